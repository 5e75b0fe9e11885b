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

from django.http import StreamingHttpResponse
from django.utils.cache import patch_cache_control
from ninja import Router, Schema

from jobqueue import store
from jobqueue.models import DeadLetter

from .. import actions, exports
from ..models import Selection
from . import idempotency
from .core import API, BODY_REFUSALS, REFUSALS, Error, Refused, api, missing
from .door import JSON_FIELDS, Door, refuse_unknown_fields, route

router = Router(tags=["actions"])


class Problem(Error):
    errors: dict[str, list[str]] | None = None


ANSWERS = {**BODY_REFUSALS, 400: Problem, 404: Error, 409: Error}


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
    # The filters that chose it (a field each, as applied); {} for ticked ids.
    filters: dict[str, Any]
    by_type: list[dict[str, Any]] | None = None
    by_cause: list[dict[str, Any]] | None = None
    skipped: list[dict[str, Any]] | None = None
    previously_replayed: int | None = None
    poisoned: int | None = None
    # A letters selection's own queues (each: queue, count, paused: a replay there waits until
    # it is resumed), and whether a replay of it may go to another (to_queue).
    queues: list[dict[str, Any]] | None = None
    can_change_queue: bool | None = None


# --- the request body of each action, from its form -------------------------------------------


def form_data(request) -> dict:
    """The body the door let through (deadletters.api.door) as a form's data: a JSON field's
    value as its JSON text, every other value as the text a browser's form sends (each field
    parses it the console's way); nulls left out (a field not given)."""
    data = {}
    for name, value in request.redrive_body.items():
        if value is None:
            continue
        if name in JSON_FIELDS and not isinstance(value, str):
            value = json.dumps(value)
        data[name] = [_text(v) for v in value] if isinstance(value, list) else _text(value)
    return data


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # 7.0 is JSON's 7, as the form reads "7"
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
    counts = Counter(
        DeadLetter.objects.using(selection.database)
        .filter(store.Among(selection.ids))
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
        elif action.reveals:
            return _revealed(request, user, name, data)
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
    answers = {201: Frozen, **ANSWERS} if action.bulk else {200: Done, **ANSWERS}
    extra = {}
    if name == "letters.export":  # a file, not JSON
        del answers[200]
        types = {kind: {"schema": {"type": "string"}} for kind in exports.CONTENT_TYPES.values()}
        extra["responses"] = {"200": {"description": "The export's file.", "content": types}}

    def permitted(request):
        # The permission before the body: a refusal names what is missing, whatever was sent.
        answered(lambda: actions.check(name, request.auth.user))

    fields = dict(action.select_form.base_fields) if action.bulk else action.form.base_fields
    route(
        router.post,
        f"/actions/{name}",
        door=Door(body=dict(fields), before=permitted, extra=extra),
        response=answers,
        summary=action.label + " (" + name + ")",
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


def _revealed(request, user, name, data):
    """An answer with unmasked values: kept by no cache (no-store) and by no Idempotency-Key
    (its answer would keep them for a day); it changes nothing but its audit record, so a
    retry reveals again, recorded again."""
    found = answered(
        lambda: actions.perform(name, user=user, channel=API, data=data, token=_token(request))
    )
    status, body = found if isinstance(found, tuple) else _outcome_answer(found)
    response = api.create_response(request, body, status=status)
    patch_cache_control(response, no_store=True, private=True)
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
    from .reads.kit import row_id

    return answered(lambda: actions.own_selection(row_id(pk, "selection"), request.auth.user))


@router.get("/selections/{pk}", response={200: Frozen, **ANSWERS}, summary="A frozen selection")
def selection_detail(request, pk: str):
    """A frozen selection's preview again: how many, by type and cause, a sample, the filters
    it applied; yours only."""
    return preview(_selection(request, pk))


# The confirm step's fields of every bulk action: the document's body; each selection takes
# those of its own action (a replay's pace and destination are refused for jobs).
CONFIRM_FIELDS = {
    name: field
    for a in actions.REGISTRY.values()
    if a.bulk
    for name, field in a.form.base_fields.items()
}


@route(
    router.post,
    "/selections/{pk}/confirm",
    door=Door(
        body=CONFIRM_FIELDS,
        description="A letters selection takes every field; a jobs selection the reason only.",
    ),
    response={200: Done, **ANSWERS},
    summary="Confirm a frozen selection",
)
def selection_confirm(request, pk: str):
    """Carry out a frozen selection (the second call of a bulk action) with the confirm step's
    fields: a reason; for a replay its rate, canary, allow_poisoned and the queue its jobs go
    to (to_queue; allow_unknown_queue for one no worker or setting names: 409 unknown_queue
    otherwise; 409 cannot_change_queue for letters that replay only where they came from)."""
    selection = _selection(request, pk)
    refuse_unknown_fields(request.redrive_body, actions.action_of(selection).form.base_fields)
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
