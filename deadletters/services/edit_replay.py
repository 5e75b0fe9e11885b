"""Edit a dead letter's payload and replay it, audited with what changed."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.models import DeadLetter
from jobqueue.store import sources

from .. import redaction
from ..models import (
    Action,
    Outcome,
    ReplayItem,
    ReplayRun,
    RunState,
    Selection,
)
from ..selectors import POISON_REASON
from .runs import lock_in_order
from .selections import RefusedError


def edit_and_replay(
    *,
    operator,
    dead_letter_id: int,
    args,
    kwargs,
    reason: str,
    allow_poisoned: bool = False,
    channel: str = "code",
    now=None,
):
    """Replay one pending dead letter with an operator's edited payload (issue 18): the new job
    gets the checked payload (deadletters.edits.checked: masks put back, storable, taken by the
    task, passed by its validator) and everything else a replay keeps; the letter keeps its own
    payload. Refused as a replay is (not pending, past the poison limit unless
    `allow_poisoned`, key held by a live job), and for a source that replays its own payload.

    One transaction writes the job, the letter's replaying state, the PayloadEdit (old and new
    payloads, the job), the record a replay writes (a one-item run with its ledger row, its
    filter naming the edit) and the audit log's entry (letter.edit_replay through `channel`:
    the edit, the job, the run and the places changed, never their values). The caller checks
    the edit permission (and the poison one).
    RefusedError, writing nothing, says why not.
    """
    from .. import edits
    from ..models import PayloadEdit

    reason = (reason or "").strip()
    if not reason:
        raise RefusedError("A reason is required.")
    letter = DeadLetter.objects.filter(pk=dead_letter_id).first()
    if letter is None:
        raise RefusedError(f"No dead letter #{dead_letter_id}.")
    refuse_unless_editable(letter, allow_poisoned=allow_poisoned)
    try:
        # Equal to the letter's own payload only if the edit changed nothing the operator was
        # shown: one who has not seen the masked values cannot replace them (edits.checked).
        args, kwargs = edits.checked(
            letter, args, kwargs, may_replace=redaction.has_seen(operator, letter)
        )
    except edits.InvalidEdit as exc:
        raise RefusedError(str(exc)) from None
    if (args, kwargs) == (letter.args, letter.kwargs):
        raise RefusedError("The payload is unchanged: replay the letter instead of editing it.")
    now = now or timezone.now()
    with transaction.atomic():
        locked = lock_in_order([letter.pk])  # the letter, then its counter, as a batch does
        if letter.pk not in locked:
            raise RefusedError(f"No dead letter #{dead_letter_id}.")
        letter.refresh_from_db()  # its state and replay count under the lock
        refuse_unless_editable(letter, allow_poisoned=allow_poisoned)
        try:
            outcome = store.replay_edited(letter.pk, args=args, kwargs=kwargs, now=now)
        except (TypeError, ValueError) as exc:  # checked above; the store checks again
            raise RefusedError(f"Not a payload a job can carry: {exc}.") from None
        if letter.pk in outcome.skipped:
            raise RefusedError(f"Not replayed: {outcome.skipped[letter.pk]}.")
        job = outcome.done[letter.pk]
        edit = PayloadEdit.objects.create(
            dead_letter=letter,
            operator=operator,
            operator_name=operator.get_username(),
            reason=reason,
            old_args=letter.args,
            old_kwargs=letter.kwargs,
            new_args=job.args if job else args,
            new_kwargs=job.kwargs if job else kwargs,
            job=job,
            at=now,
        )
        external_id = outcome.refs.get(letter.pk, "")
        run = _record_as_run(letter, edit, job, external_id, now, allow_poisoned=allow_poisoned)
        store.audit.record(
            EDIT_REPLAY,
            actor=operator.get_username(),
            channel=channel,
            target_kind="letter",
            targets=[letter.pk],
            reason=reason,
            params=edit_params(edit, run=run.pk),
            at=now,
        )
    return edit


def _record_as_run(letter, edit, job, external_id: str, now, *, allow_poisoned: bool) -> ReplayRun:
    """What a replay records, for an edit's: a finished one-item run with its ledger row, its
    selection and filter naming the edit."""
    recorded = {"payload_edit": edit.pk}
    selection = Selection.objects.create(
        operator=edit.operator,
        action=Action.REPLAY,
        filter=recorded,
        ids=[letter.pk],
        created_at=now,
    )
    run = ReplayRun.objects.create(
        action=Action.REPLAY,
        selection=selection,
        operator=edit.operator,
        operator_name=edit.operator_name,
        reason=edit.reason,
        filter=recorded,
        job_types=[letter.task_path],
        allow_poisoned=allow_poisoned,
        batch_size=1,
        rate=0,
        state=RunState.FINISHED,
        requested=1,
        processed=1,
        done=1,
        batches=1,
        created_at=now,
        started_at=now,
        finished_at=now,
        updated_at=now,
    )
    ReplayItem.objects.create(
        run=run,
        dead_letter_id=letter.pk,
        task_path=letter.task_path,
        outcome=Outcome.REPLAYED,
        job_id=job.pk if job else None,
        external_id=external_id,
        batch=1,
        at=now,
    )
    return run


EDIT_REPLAY = "letter.edit_replay"  # the audit log's action of an edit and its replay


def edit_params(edit, *, run: int | None) -> dict:
    """What an edit is audited with: its record, the job and run it made, and where the payload
    changed (edits.changed_paths: places, no values)."""
    from .. import edits

    paths, changed = edits.changed_paths(
        edit.old_args, edit.old_kwargs, edit.new_args, edit.new_kwargs
    )
    params = {"edit": edit.pk, "job": edit.job_id, "changed": paths}
    if run is not None:
        params["run"] = run
    if changed > len(paths):
        params["changed_more"] = changed - len(paths)
    return params


def refuse_unless_editable(letter, *, allow_poisoned: bool):
    """The rules of a replay, for one letter about to be edited (RefusedError says which)."""
    from jobqueue.models import DeadLetterState

    if letter.state != DeadLetterState.PENDING:
        raise RefusedError(
            "Only a pending dead letter can be edited and replayed, not this one: "
            f"{store.SKIP_REASONS[letter.state]}."
        )
    if not sources.editable(letter.source):
        raise RefusedError(
            f"Letters of source {letter.source!r} are replayed as they are, not edited: "
            "replay it from its page."
        )
    if max(store.json_depth(letter.args), store.json_depth(letter.kwargs)) > store.MAX_JSON_DEPTH:
        # Stored by hand or by an older version: no edit of it is a payload a job may carry.
        raise RefusedError(
            f"Its payload nests deeper than {store.MAX_JSON_DEPTH} levels, more than a job may "
            "carry: it cannot be edited (discard it)."
        )
    limit = setting("MAX_REPLAYS")
    if letter.replays >= limit and not allow_poisoned:
        raise RefusedError(f"Not replayed: {POISON_REASON.format(n=limit)}.")
