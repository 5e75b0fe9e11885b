"""Dead-letter actions: replay and discard (bulk), reveal, edit-and-replay, export."""

from __future__ import annotations

from django.db import transaction

from jobqueue import store
from jobqueue.models import (
    DeadLetter,
)

from .. import databases, exports, redaction, selectors, services
from ..forms import (
    ConfirmForm,
)
from ..models import Action as LetterAction
from ..models import RunState, Selection
from ..roles import (
    ACTION_PERMISSION,
    EDIT,
    EXPORT,
    POISON,
)
from .forms import (
    EditReplayForm,
    ExportForm,
    LetterSelectionForm,
    RevealForm,
)
from .kernel import (
    Action,
    Actor,
    Conflict,
    Gone,
    Outcome,
    backend_of,
    may_search_payloads,
    register,
)


def _select_letters(actor: Actor, cleaned) -> tuple[list[int], dict, str]:
    database = backend_of(cleaned).database
    if cleaned["select_all"]:
        f = cleaned.form.to_filter(payload_search=may_search_payloads(actor))
        if limit := cleaned.get("limit"):
            return selectors.matching_ids(f, first=limit), f.as_json() | {"limit": limit}, database
        return selectors.matching_ids(f), f.as_json(), database
    return cleaned["ids"], {}, database


def _start_run(actor: Actor, cleaned, selection: Selection) -> Outcome:
    if hasattr(selection, "run"):
        raise Conflict(f"This selection was already confirmed: run #{selection.run.pk}.")
    if cleaned["allow_poisoned"]:
        actor.require(POISON)
    run = services.start_run(
        operator=actor.user,
        selection=selection,
        reason=cleaned["reason"],
        allow_poisoned=cleaned["allow_poisoned"],
        rate=cleaned["rate"],
        canary_size=cleaned["canary_size"],
        canary_max_dead_share=cleaned["canary_max_dead_share"],
        to_queue=cleaned["to_queue"],
        allow_unknown_queue=cleaned["allow_unknown_queue"],
        channel=actor.channel,
    )
    awaiting = run.state == RunState.AWAITING
    where = f", to queue {run.to_queue}" if run.to_queue else ""
    message = (
        f"Run #{run.pk}{where} is awaiting a second person's approval."
        if awaiting
        else f"Run #{run.pk}{where} has started."
    )
    data = {"run": run.pk, "state": run.state}
    if run.to_queue:
        data["to_queue"] = run.to_queue
    if selection.action == LetterAction.REPLAY:
        paused = _paused_destinations(selection, run.to_queue)
        data["paused_queues"] = paused
        if paused:
            names, several = ", ".join(paused), len(paused) > 1
            message += (
                f" Queue{'s' if several else ''} {names} {'are' if several else 'is'} paused: "
                f"the replayed jobs wait there until {'they are' if several else 'it is'} "
                "resumed."
            )
    return Outcome(True, message, data, run)


def _paused_destinations(selection: Selection, to_queue: str) -> list[str]:
    """The paused queues a replay of `selection` sends jobs to: its destination, else the
    letters' own queues (a replay there is allowed, and said)."""
    paused = store.queues.paused(selection.database)
    if not paused:
        return []
    if to_queue:
        return [to_queue] if to_queue in paused else []
    return sorted(
        DeadLetter.objects.using(selection.database)
        .filter(store.Among(selection.ids), queue_name__in=list(paused))
        .order_by()
        .values_list("queue_name", flat=True)
        .distinct()
    )


for _verb, _label in ((LetterAction.REPLAY, "Replay"), (LetterAction.DISCARD, "Discard")):
    register(
        Action(
            f"letters.{_verb}",
            "letters",
            _label,
            f"{_label} the ticked dead letters, or every one matching a filter, in bounded "
            "batches, previewed first.",
            (ACTION_PERMISSION[_verb],),
            ConfirmForm,
            _start_run,
            selection_kind=Selection.Kind.LETTERS,
            select_form=LetterSelectionForm,
            select=_select_letters,
            two_person=True,
        )
    )


def _letter(cleaned) -> tuple[databases.QueueBackend, DeadLetter]:
    backend = backend_of(cleaned)
    letter = DeadLetter.objects.using(backend.database).filter(pk=cleaned["letter"]).first()
    if letter is None:
        raise Gone(
            "dead letter",
            cleaned["letter"],
            "It may have been discarded and pruned, or the id has a typo.",
        )
    return backend, letter


def _reveal(actor: Actor, cleaned) -> Outcome:
    backend, letter = _letter(cleaned)
    detail = selectors.detail(letter.pk, redacted=False, using=backend.database)
    with transaction.atomic():
        via = "edit" if cleaned["for_edit"] else actor.channel
        redaction.record_reveal(actor.user, letter, via=via, channel=actor.channel)
    return Outcome(
        False,
        f"Dead letter {letter.pk} shown unmasked (recorded).",
        {"letter": letter.pk, "args": letter.args, "kwargs": letter.kwargs},
        (backend, detail),
    )


def _edit_replay(actor: Actor, cleaned) -> Outcome:
    # Of the default database only: an edit's record (PayloadEdit) points at a letter there.
    _, letter = _letter({"letter": cleaned["letter"], "backend": ""})
    actor.require(ACTION_PERMISSION[LetterAction.REPLAY])
    if cleaned["allow_poisoned"]:
        actor.require(POISON)
    edit = services.edit_and_replay(
        operator=actor.user,
        dead_letter_id=letter.pk,
        args=cleaned["args"],
        kwargs=cleaned["kwargs"],
        reason=cleaned["reason"],
        allow_poisoned=cleaned["allow_poisoned"],
        channel=actor.channel,
    )
    return Outcome(
        True,
        f"Replayed with the edited payload: job {edit.job_id} is queued.",
        {"letter": letter.pk, "edit": edit.pk, "job": edit.job_id},
        edit,
    )


def _export(actor: Actor, cleaned) -> Outcome:
    f = cleaned.form.to_filter(payload_search=may_search_payloads(actor))
    fmt = cleaned["format"]
    record, chunks = exports.export(operator=actor.user, filter=f, fmt=fmt, channel=actor.channel)
    return Outcome(
        False,
        f"Export {exports.filename(record)} started.",
        {"filename": exports.filename(record), "format": fmt},
        (record, chunks),
    )


register(
    Action(
        "letter.reveal",
        "letter",
        "Reveal",
        "Show a dead letter's masked payload values (each reveal recorded).",
        (redaction.REVEAL_PERMISSION,),
        RevealForm,
        _reveal,
        reveals=True,
    )
)
register(
    Action(
        "letter.edit_replay",
        "letter",
        "Edit and replay",
        "Replay one pending dead letter with an edited payload.",
        (EDIT,),
        EditReplayForm,
        _edit_replay,
    )
)
register(
    Action(
        "letters.export",
        "letters",
        "Export",
        "Download the dead letters matching a filter as CSV or JSON Lines, masked.",
        (EXPORT,),
        ExportForm,
        _export,
    )
)
