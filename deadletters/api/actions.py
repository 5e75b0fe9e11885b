"""The registry's actions as endpoints, made by a loop over it (deadletters.actions.REGISTRY):
one `POST /actions/<name>` each, whose body is the action's form fields as a JSON object and
whose OpenAPI request body is made from that form.

A bulk action is carried out in two calls, as in the console: `POST /actions/<name>` freezes
the selection (ticked `ids`, or `select_all` with the list's filter) and answers its id, count,
breakdown by job type and by cause, and a sample; `POST /selections/<id>/confirm` with the
confirm step's fields (a reason; a replay's pace, canary and destination queue) carries it out.

Refusals, each `{"detail": ...}` with the registry's message: 400 invalid input (the form's
messages, by field in `errors`), 401, 403 (the permission or scope named), 404 (no such action,
target or selection), 409 (refused by state; `code` names the refusal where it has a name).
Every POST may carry an `Idempotency-Key` (deadletters.api.idempotency); each entry it writes
in the audit log names its token.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from django import forms
from django.http import StreamingHttpResponse
from ninja import Router, Schema

from jobqueue.models import DeadLetter

from .. import actions, exports, selectors
from ..forms import IdField, IdListField, TimeBoundField
from ..models import Selection
from ..timefilter import ACCEPTED
from . import idempotency
from .core import API, REFUSALS, Error, Refused, api, missing

router = Router(tags=["actions"])

# Fields whose text the form parses as JSON: the API takes the JSON value itself too.
JSON_FIELDS = {"args", "kwargs", "payload"}


class Problem(Error):
    errors: dict[str, list[str]] | None = None


ANSWERS = {**REFUSALS, 400: Problem, 404: Error, 409: Error, 422: Error}


class Done(Schema):
    """What an action did: whether anything changed, what happened, and its own fields."""

    changed: bool
    message: str

    model_config = {"extra": "allow"}


class Frozen(Schema):
    selection: int
    action: str
    count: int
    backend: str
    confirmed: bool
    will_act: int
    sample: list[int]
    by_type: list[dict[str, Any]] | None = None
    by_cause: list[dict[str, Any]] | None = None
    skipped: list[dict[str, Any]] | None = None
    previously_replayed: int | None = None
    poisoned: int | None = None
    # A letters selection's own queues, and whether a replay of it may go to another (to_queue).
    queues: list[dict[str, Any]] | None = None
    can_change_queue: bool | None = None


# --- the request body of each action, from its form -------------------------------------------


def field_schema(name: str, field: forms.Field) -> dict:
    described = {}
    if field.help_text:
        described["description"] = str(field.help_text)
    if name in JSON_FIELDS:
        return described  # any JSON value, or its text
    if isinstance(field, IdListField):
        return {"type": "array", "items": {"type": "integer", "minimum": 1}} | described
    if isinstance(field, IdField):
        return {"type": "integer", "minimum": 1} | described
    if isinstance(field, forms.BooleanField):
        return {"type": "boolean"} | described
    if isinstance(field, forms.IntegerField):
        return {"type": "integer"} | described
    if isinstance(field, forms.FloatField):
        return {"type": "number"} | described
    if isinstance(field, TimeBoundField):
        return {"type": "string", "maxLength": field.max_length, "description": ACCEPTED}
    schema = {"type": "string"}
    if getattr(field, "max_length", None):
        schema["maxLength"] = field.max_length
    return schema | described


def body_schema(fields: dict[str, forms.Field]) -> dict:
    return {
        "type": "object",
        "properties": {name: field_schema(name, f) for name, f in fields.items()},
        "required": sorted(name for name, f in fields.items() if f.required),
    }


def request_body(fields) -> dict:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": body_schema(fields)}},
        }
    }


def form_data(request) -> dict:
    """The JSON body as a form's data: an object; a JSON field's value as its JSON text; nulls
    left out (a field not given)."""
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise Refused(400, "Invalid request: the body is not JSON.") from None
    if not isinstance(body, dict):
        raise Refused(400, "Invalid request: the body is a JSON object of the action's fields.")
    data = {}
    for name, value in body.items():
        if value is None:
            continue
        if name in JSON_FIELDS and not isinstance(value, str):
            value = json.dumps(value)
        elif isinstance(value, dict) or (isinstance(value, list) and name != "ids"):
            raise Refused(400, f"Nothing changed: {name}: a single value is expected.")
        # As text, as a browser's form sends it: each field parses it the console's way.
        data[name] = [_text(v) for v in value] if isinstance(value, list) else _text(value)
    return data


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


# --- errors -------------------------------------------------------------------------------------


def answered(call):
    """`call()`'s Outcome or Selection, the registry's errors as the API's answers."""
    try:
        return call()
    except actions.Missing as exc:
        raise missing(exc.permission) from None
    except actions.Invalid as exc:
        return 400, {"detail": exc.message, "errors": exc.errors or None}
    except (actions.Unknown, actions.Gone) as exc:
        hint = getattr(exc, "hint", "")
        raise Refused(404, f"{exc.message} {hint}".strip()) from None
    except actions.Conflict as exc:
        raise Refused(409, exc.message, exc.code) from None


def by_cause(selection: Selection) -> list[dict]:
    """A letters selection's letters per cause (error fingerprint and class), most first."""
    counts = Counter()
    for chunk in selectors.in_chunks(selection.ids):
        counts.update(
            DeadLetter.objects.using(selection.database)
            .filter(pk__in=chunk)
            .values_list("fingerprint", "error_class")
        )
    return [
        {"fingerprint": fp or "", "error_class": cls or "(none)", "count": n}
        for (fp, cls), n in counts.most_common()
    ]


def preview(selection: Selection) -> dict:
    shown = actions.describe(selection)
    if selection.kind == Selection.Kind.LETTERS:
        shown["by_cause"] = by_cause(selection)
    return shown


def _token(request) -> str:
    return request.auth.label


def _outcome_answer(outcome) -> tuple[int, dict]:
    return 200, outcome.as_json()


# --- the endpoints ------------------------------------------------------------------------------


class ActionOut(Schema):
    name: str
    target: str
    label: str
    summary: str
    permissions: list[str]
    bulk: bool
    two_person: bool
    fields: list[str]


class ActionsOut(Schema):
    actions: list[ActionOut]


@router.get("/actions", response={200: ActionsOut, **REFUSALS}, summary="Actions")
def action_list(request):
    """Every action of the registry, with the permissions it needs and its input's fields."""
    return {"actions": [actions.as_json(a) for a in actions.REGISTRY.values()]}


def _endpoint(action: actions.Action):
    name = action.name

    def carry_out(request):
        user = request.auth.user
        # The permission before the body: a refusal names what is missing, whatever was sent.
        answered(lambda: actions.check(name, user))
        data = form_data(request)
        if action.bulk:

            def handler():
                found = answered(
                    lambda: actions.freeze(
                        name, user=user, channel=API, data=data, token=_token(request)
                    )
                )
                if isinstance(found, tuple):
                    return found
                return 201, preview(found)

        elif name == "letters.export":
            return _export(request, user, data)
        else:

            def handler():
                found = answered(
                    lambda: actions.perform(
                        name, user=user, channel=API, data=data, token=_token(request)
                    )
                )
                return found if isinstance(found, tuple) else _outcome_answer(found)

        return _idempotent(request, handler)

    carry_out.__name__ = "act_" + name.replace(".", "_")
    carry_out.__doc__ = action.summary + (
        " Freezes the selection: confirm it with POST /selections/{id}/confirm."
        if action.bulk
        else ""
    )
    fields = dict(action.select_form.base_fields) if action.bulk else action.form.base_fields
    extra = request_body(fields)
    answers = {201: Frozen, **ANSWERS} if action.bulk else {200: Done, **ANSWERS}
    if name == "letters.export":  # a file, not JSON
        del answers[200]
        types = {kind: {"schema": {"type": "string"}} for kind in exports.CONTENT_TYPES.values()}
        extra["responses"] = {"200": {"description": "The export's file.", "content": types}}
    router.post(
        f"/actions/{name}",
        response=answers,
        summary=action.label + " (" + name + ")",
        openapi_extra=extra,
        operation_id="act_" + name.replace(".", "_"),
    )(carry_out)


def _idempotent(request, handler):
    try:
        status, body, replayed = idempotency.answer(request, handler)
    except idempotency.KeyRefused as exc:
        raise Refused(exc.status, str(exc)) from None
    response = api.create_response(request, body, status=status)
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def _export(request, user, data):
    """An export streams its file (CSV or JSON Lines), as the console's download does; it
    changes nothing but its audit record, so a key is not needed to retry it."""
    outcome = answered(
        lambda: actions.perform(
            "letters.export", user=user, channel=API, data=data, token=_token(request)
        )
    )
    if isinstance(outcome, tuple):
        return api.create_response(request, outcome[1], status=outcome[0])
    record, chunks = outcome.result
    fmt = outcome.data["format"]
    response = StreamingHttpResponse(
        (chunk.encode("utf-8") for chunk in chunks), content_type=exports.CONTENT_TYPES[fmt]
    )
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(record)}"'
    return response


for _action in actions.REGISTRY.values():
    if _action.api:
        _endpoint(_action)


def _selection(request, pk: str) -> Selection:
    from .reads import row_id

    return answered(lambda: actions.own_selection(row_id(pk, "selection"), request.auth.user))


@router.get("/selections/{pk}", response={200: Frozen, **ANSWERS}, summary="A frozen selection")
def selection_detail(request, pk: str):
    """A frozen selection's preview again: how many, by type and cause, a sample; yours only."""
    return preview(_selection(request, pk))


@router.post(
    "/selections/{pk}/confirm",
    response={200: Done, **ANSWERS},
    summary="Confirm a frozen selection",
    openapi_extra=request_body(
        {
            name: field
            for a in actions.REGISTRY.values()
            if a.bulk
            for name, field in a.form.base_fields.items()
        }
    ),
)
def selection_confirm(request, pk: str):
    """Carry out a frozen selection (the second call of a bulk action) with the confirm step's
    fields: a reason; for a replay its rate, canary, allow_poisoned and the queue its jobs go
    to (to_queue; allow_unknown_queue for one no worker or setting names: 409 unknown_queue
    otherwise; 409 cannot_change_queue for letters that replay only where they came from)."""
    selection = _selection(request, pk)
    data = form_data(request)

    def handler():
        found = answered(
            lambda: actions.confirm(
                selection.pk,
                user=request.auth.user,
                channel=API,
                data=data,
                token=_token(request),
            )
        )
        return found if isinstance(found, tuple) else _outcome_answer(found)

    return _idempotent(request, handler)
