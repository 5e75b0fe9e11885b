"""Writes of the console: freeze a selection, run it batch by batch, pause, resume, cancel.

Plain functions; the caller checks permissions. Dead-letter state changes only through
`jobqueue.store.replay` / `discard`, each called inside this module's own transaction together
with the ledger rows of the batch, so a batch is recorded exactly when it happened.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from functools import reduce
from operator import or_

from django.db import OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from jobqueue import store
from jobqueue.models import DeadLetter

from . import conf
from .models import (
    ACTIVE_STATES,
    Action,
    Outcome,
    PendingCount,
    ReplayItem,
    ReplayRun,
    RunControl,
    RunEvent,
    RunState,
    Selection,
)
from .selectors import POISON_REASON, in_chunks

PREVIEW_LIFETIME = timedelta(days=1)


class RefusedError(ValueError):
    """The request cannot be carried out as asked (no reason, empty or foreign selection)."""


def freeze_selection(*, operator, action: str, ids, filter: dict | None = None, now=None):
    """Record exactly the ids an operator previews; confirming runs these and no others."""
    ids = list(dict.fromkeys(int(i) for i in ids))
    if not ids:
        raise RefusedError("Select at least one dead letter.")
    if len(ids) > conf.get("MAX_SELECTION"):
        raise RefusedError(f"A selection holds at most {conf.get('MAX_SELECTION'):,} items.")
    now = now or timezone.now()
    # Previews nobody confirmed within a day are dropped (a confirmed one is part of its run).
    Selection.objects.filter(run__isnull=True, created_at__lt=now - PREVIEW_LIFETIME).delete()
    return Selection.objects.create(
        operator=operator,
        action=action,
        filter=filter or {},
        dead_letter_ids=ids,
        created_at=now,
    )


def start_run(
    *,
    operator,
    selection: Selection,
    reason: str,
    allow_poisoned: bool = False,
    rate: float | None = None,
    background: bool = True,
    now=None,
) -> ReplayRun:
    """Confirm a frozen selection as a run.

    A run of at most one batch is carried out here, in the transaction that records it. A
    larger one is handed to the background runner on our queue (`background=False`: the caller
    drives it with `carry_out`, as the CLI does).
    """
    reason = (reason or "").strip()
    if not reason:
        raise RefusedError("A reason is required.")
    if selection.operator_id != operator.pk:
        raise RefusedError("This selection was previewed by another operator.")
    if ReplayRun.objects.filter(selection=selection).exists():
        raise RefusedError("This selection has already been confirmed.")
    now = now or timezone.now()
    ids = selection.dead_letter_ids
    job_types = sorted(
        {
            path
            for chunk in in_chunks(ids)
            for path in DeadLetter.objects.filter(pk__in=chunk)
            .order_by()
            .values_list("task_path", flat=True)
            .distinct()
        }
    )
    with transaction.atomic():
        # Locked so it cannot expire (freeze_selection's clean-up) or be confirmed twice meanwhile.
        if not Selection.objects.select_for_update().filter(pk=selection.pk).exists():
            raise RefusedError("This preview has expired: preview the selection again.")
        run = ReplayRun.objects.create(
            action=selection.action,
            selection=selection,
            operator=operator,
            operator_name=operator.get_username(),
            reason=reason,
            filter=selection.filter,
            job_types=job_types,
            allow_poisoned=allow_poisoned and selection.action == Action.REPLAY,
            batch_size=conf.get("REPLAY_BATCH_SIZE"),
            rate=conf.get("REPLAY_RATE") if rate is None else rate,
            requested=len(ids),
            created_at=now,
            updated_at=now,
        )
        if run.requested <= run.batch_size:
            process_batch(run.pk, now=now)
            run.refresh_from_db()
        elif background:
            _enqueue_runner(run)
    return run


def _enqueue_runner(run: ReplayRun):
    from .tasks import carry_out_run

    carry_out_run.enqueue(run.pk, run.generation)


@dataclass
class BatchResult:
    handled: int
    more: bool
    rate: float


DEADLOCK_RETRIES = 3


def process_batch(run_id: int, *, generation: int | None = None, now=None) -> BatchResult:
    """Carry out the next batch of a run in one transaction with its ledger rows; a batch
    PostgreSQL chose as a deadlock victim (a sweep burying letters of the same counters in its
    own order) is rolled back whole, so it is simply tried again."""
    for attempt in range(1, DEADLOCK_RETRIES + 1):
        try:
            return _process_batch(run_id, generation=generation, now=now)
        except OperationalError as exc:
            deadlock = getattr(getattr(exc, "__cause__", None), "sqlstate", None) == "40P01"
            if (
                not deadlock
                or attempt == DEADLOCK_RETRIES
                or transaction.get_connection().in_atomic_block
            ):
                raise
    raise AssertionError("unreachable")


def _process_batch(run_id: int, *, generation: int | None = None, now=None) -> BatchResult:
    """Carry out the next batch of a run in one transaction with its ledger rows.

    The run row is locked first, so two runners of one run take turns and never read the same
    position; a runner killed mid-batch rolls the whole batch back and the next one redoes it.
    `generation` is the runner's ticket: after a resume an older runner stops here.
    """
    with transaction.atomic():
        run = ReplayRun.objects.select_for_update().select_related("selection").get(pk=run_id)
        if run.state not in ACTIVE_STATES or (
            generation is not None and generation != run.generation
        ):
            return BatchResult(0, False, run.rate)
        now = now or timezone.now()
        ids = run.selection.dead_letter_ids[run.processed : run.processed + run.batch_size]
        letters = _lock_in_order(ids)
        batch_no = run.batches + 1
        if run.action == Action.REPLAY:
            done, skipped, refs = _replay(ids, letters, allow_poisoned=run.allow_poisoned, now=now)
        else:
            outcome = store.discard(ids, now=now)
            done, skipped, refs = outcome.done, outcome.skipped, {}
        ReplayItem.objects.bulk_create(
            [
                ReplayItem(
                    run=run,
                    dead_letter_id=pk,
                    task_path=letters[pk].task_path if pk in letters else "",
                    outcome=(
                        Outcome.SKIPPED
                        if pk in skipped
                        else Outcome.REPLAYED
                        if run.action == Action.REPLAY
                        else Outcome.DISCARDED
                    ),
                    job_id=done[pk].pk if done.get(pk) is not None else None,
                    external_id=refs.get(pk, ""),
                    skip_reason=skipped.get(pk, "")[:255],
                    batch=batch_no,
                    at=now,
                )
                for pk in ids
            ]
        )
        if run.state == RunState.QUEUED:
            run.state, run.started_at = RunState.RUNNING, now
        run.processed += len(ids)
        run.done += len(done)
        run.skipped += len(skipped)
        run.batches = batch_no
        run.updated_at = now
        if run.processed >= run.requested:
            run.state, run.finished_at = RunState.FINISHED, now
        run.save()
        return BatchResult(len(ids), run.state in ACTIVE_STATES, run.rate)


def _lock_in_order(ids) -> dict:
    """Lock the batch's letters, then the counter rows their triggers will change, each in id
    order: the order every writer follows (a worker burying a letter locks it, then its
    counter), so two batches, or a batch and a worker, wait for each other instead of
    deadlocking on the counters. Returns the locked letters' rows by id (the batch's one read
    of them: their job types for the ledger, their replay counts for the poison limit)."""
    letters = {
        row.pk: row
        for row in DeadLetter.objects.select_for_update()
        .filter(pk__in=ids)
        .order_by("pk")
        .values_list("pk", "task_path", "queue_name", "error_class", "replays", named=True)
    }
    keys = {(row.task_path, row.queue_name, row.error_class) for row in letters.values()}
    if keys:
        same_counter = reduce(
            or_,
            (Q(task_path=t, queue_name=q, error_class=e) for t, q, e in sorted(keys)),
        )
        list(
            PendingCount.objects.select_for_update()
            .filter(same_counter)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
    return letters


def _replay(ids, letters, *, allow_poisoned: bool, now):
    """Replay through the store, holding back items past the poison limit (`letters` are
    locked, so their replay counts cannot change before the replay)."""
    limit = conf.get("MAX_REPLAYS")
    poisoned = {}
    if not allow_poisoned:
        poisoned = {
            pk: POISON_REASON.format(n=limit) for pk, row in letters.items() if row.replays >= limit
        }
    outcome = store.replay([pk for pk in ids if pk not in poisoned], now=now)
    return outcome.done, {**poisoned, **outcome.skipped}, outcome.refs


def carry_out(run_id: int, generation: int | None = None, *, sleep=time.sleep, clock=None):
    """Drive a run to its end, one batch per transaction, at the run's rate (items/second).

    Stops early when the run is paused or cancelled, or a newer runner took over.
    """
    clock = clock or time.monotonic
    while True:
        started = clock()
        result = process_batch(run_id, generation=generation)
        if not result.more:
            return
        if result.rate > 0:
            sleep(max(0.0, result.handled / result.rate - (clock() - started)))


def pause(run: ReplayRun, *, operator, now=None) -> bool:
    return _stop(run, RunState.PAUSED, operator=operator, now=now)


def cancel(run: ReplayRun, *, operator, now=None) -> bool:
    return _stop(run, RunState.CANCELLED, operator=operator, now=now)


def _stop(run, state, *, operator, now) -> bool:
    now = now or timezone.now()
    stoppable = [*ACTIVE_STATES] + ([RunState.PAUSED] if state == RunState.CANCELLED else [])
    with transaction.atomic():
        changed = ReplayRun.objects.filter(pk=run.pk, state__in=stoppable).update(
            state=state,
            stopped_by=operator.get_username(),
            updated_at=now,
            **({"finished_at": now} if state == RunState.CANCELLED else {}),
        )
        if changed:
            _record_control(run, RunControl(state), operator, now)
    run.refresh_from_db()
    return bool(changed)


def _record_control(run, action, operator, now):
    RunEvent.objects.create(
        run_id=run.pk,
        action=action,
        operator=operator,
        operator_name=operator.get_username(),
        at=now,
    )


def resume(run: ReplayRun, *, operator, now=None) -> bool:
    """Continue a paused run (or restart the runner of a stuck one) with a fresh runner."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = ReplayRun.objects.select_for_update().get(pk=run.pk)
        if locked.state not in (*ACTIVE_STATES, RunState.PAUSED):
            return False
        locked.state = RunState.RUNNING if locked.started_at else RunState.QUEUED
        locked.generation += 1
        locked.stopped_by = ""
        locked.updated_at = now
        locked.save()
        _record_control(locked, RunControl.RESUMED, operator, now)
        _enqueue_runner(locked)
    run.refresh_from_db()
    return True
