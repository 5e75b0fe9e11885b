"""Redrive's JSON API: every read of the console and every action of the registry, for scripts,
runbooks and chat-ops, behind per-user bearer tokens (deadletters.tokens).

Built on django-ninja, an optional extra (`redrive[api]`): its pydantic schemas give the OpenAPI
3.1 document (served at `openapi.json` beside the endpoints) from the same declarations that
check the responses, it mounts with one `include("deadletters.api.urls")`, and it is small and
well kept. Nothing else in the console imports this package, so a project without the extra
runs the console as before.

The API answers with the console's rules: the same permissions (deadletters.roles), the same
forms and their messages for every filter and input (a bad one is a 400 naming it, never
ignored), payloads masked as the console masks them. Each POST may carry an `Idempotency-Key`
(deadletters.api.idempotency).
"""
