"""The API object, its bearer authentication and the one shape of every refusal.

A request names its token as `Authorization: Bearer rdr_<prefix>_<secret>`. Missing, unknown,
wrong, expired or revoked: 401. A GET needs the token's read scope and a POST its act scope
(403 naming the scope), and the token's user the console's view permission (403 naming it):
the token acts as its user, never above them. Every refusal is `{"detail": "<message>"}`, with
a `"code"` naming it where a script may act on it (409 unknown_queue, cannot_change_queue).
"""

from __future__ import annotations

import inspect

from django.db import connections, transaction
from ninja import NinjaAPI, Schema
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.security import HttpBearer

from jobqueue.models import AuditEntry

from .. import tokens
from ..roles import VIEW
from ..views.base import DOING, role_with

API = AuditEntry.Channel.API


class Error(Schema):
    detail: str
    # What refused it, where a script may act on it (unknown_queue, cannot_change_queue, ...).
    code: str | None = None


# Every endpoint may answer these besides its own result.
REFUSALS = {400: Error, 401: Error, 403: Error}
# And every one that reads a body these (deadletters.api.door).
BODY_REFUSALS = {**REFUSALS, 413: Error, 422: Error}


class Refused(HttpError):
    """A refusal with its status and message: the whole answer is `{"detail": message}`, and
    `"code"` where the refusal has one (deadletters.actions.Conflict's)."""

    def __init__(self, status_code: int, message: str, code: str = ""):
        super().__init__(status_code, message)
        self.code = code


def missing(permission: str) -> Refused:
    """403 naming the permission and what it lets one do, as the console's 403 page does."""
    doing = DOING.get(permission)
    role = role_with(permission)
    text = f"Not allowed: this needs the permission {permission}"
    if doing:
        text += f" (to {doing})"
    if role:
        text += f", which the {role} role holds"
    return Refused(403, text + ".")


def require(request, permission: str) -> None:
    if not request.auth.user.has_perm(permission):
        raise missing(permission)


class BearerToken(HttpBearer):
    """The token of the Authorization header, checked for its scope and its user's view
    permission; the token is `request.auth`, its user `request.auth.user`."""

    def __call__(self, request):
        header = request.headers.get("Authorization", "")
        if not header:
            raise Refused(401, "Authentication required: send Authorization: Bearer <API token>.")
        scheme, _, text = header.partition(" ")
        if scheme.lower() != "bearer" or not text.strip():
            raise Refused(401, "Send the API token as Authorization: Bearer <API token>.")
        return self.authenticate(request, text.strip())

    def authenticate(self, request, token):
        try:
            found = tokens.authenticate(token)
        except tokens.NotAuthenticated as exc:
            raise Refused(401, str(exc)) from None
        scope = "read" if request.method in ("GET", "HEAD", "OPTIONS") else "act"
        if scope not in found.scope_list:
            raise Refused(
                403, f"Not allowed: API token {found.label} lacks the scope {scope!r}."
            ) from None
        if not found.user.has_perm(VIEW):
            raise missing(VIEW)
        return found


class Api(NinjaAPI):
    """The API, its OpenAPI document made when asked: each endpoint's input as its door says
    now (deadletters.api.door; a backend's choices are the settings')."""

    def get_openapi_schema(self, **kwargs):
        for bound in self._get_bound_routers():
            for path_view in bound.path_operations.values():
                for operation in path_view.operations:
                    door = getattr(inspect.unwrap(operation.view_func), "door", None)
                    if door is not None:
                        operation.openapi_extra = door.openapi()
        return super().get_openapi_schema(**kwargs)


api = Api(
    title="Redrive",
    version="1",
    description="Dead letters, replays, jobs, queues, schedules, workflows and the audit log "
    "of a Redrive installation, with the console's permissions and rules.",
    auth=BearerToken(),
    urls_namespace="redrive-api",
    openapi_url="/openapi.json",
    docs_url="/docs",
)


def _rolled_back():
    """Nothing a refused request wrote is kept (under ATOMIC_REQUESTS too)."""
    for connection in connections.all(initialized_only=True):
        if connection.settings_dict["ATOMIC_REQUESTS"] and connection.in_atomic_block:
            transaction.set_rollback(True, using=connection.alias)


@api.exception_handler(HttpError)
def _refused(request, exc):
    _rolled_back()
    body = {"detail": str(exc)}
    if getattr(exc, "code", ""):
        body["code"] = exc.code
    return api.create_response(request, body, status=exc.status_code)


@api.exception_handler(NinjaValidationError)
def _invalid(request, exc):
    """A body, path or parameter the schema refuses: a 400 with one line per field."""
    _rolled_back()
    lines = []
    for error in exc.errors:
        where = ".".join(str(p) for p in error.get("loc", ())[1:] if p != "body") or "request"
        lines.append(f"{where}: {error.get('msg', 'invalid')}")
    return api.create_response(
        request, {"detail": "Invalid request: " + "; ".join(lines)}, status=400
    )
