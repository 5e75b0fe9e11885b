"""Replay runs: start one, carry it out batch by batch at its pace behind its canary, pause,
resume, cancel, approve. Dead-letter state changes only through `jobqueue.store.replay` /
`discard`, each called inside this module's own transaction together with the ledger rows of
the batch, so a batch is recorded exactly when it happened."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from operator import or_

from django.db import IntegrityError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.models import DeadLetter, Job, JobState

from .. import conf
from ..models import (
    ACTIVE_STATES,
    Action,
    CanaryState,
    Outcome,
    PendingCount,
    ReplayItem,
    ReplayRun,
    RunControl,
    RunState,
    Selection,
)
from ..selectors import POISON_REASON
from .selections import RefusedError, check_destination


def _job_types(ids, *, using: str) -> list[str]:
    """The task paths of these letters, each once, sorted: what a run records it replays."""
    return sorted(
        DeadLetter.objects.using(using)
        .filter(store.Among(ids))
        .order_by()
        .values_list("task_path", flat=True)
        .distinct()
    )


def start_run(
    *,
    operator,
    selection: Selection,
    reason: str,
    allow_poisoned: bool = False,
    to_queue: str | None = None,
    allow_unknown_queue: bool = False,
    rate: float | None = None,
    background: bool = True,
    canary_size: int = 0,
    canary_max_dead_share: float | None = None,
    canary_timeout: float | None = None,
    channel: str = "code",
    now=None,
) -> ReplayRun:
    """Confirm a frozen selection as a run, audited through `channel` (letters.replay or
    letters.discard on the selection, in the run's transaction).

    A run of at most one batch is carried out here, in the transaction that records it. A
    larger one is handed to the background runner on our queue (`background=False`: the caller
    drives it with `carry_out`, as the CLI does). A run of more items than the approval
    threshold (conf.approval_threshold) is created awaiting approval and not started: a second
    user's `approve` starts it the same way.

    A replay run's jobs go to `to_queue` instead of their letters' own queues, checked by
    `check_destination` (`allow_unknown_queue`: a queue the console does not know yet).

    A replay run may start with a canary of `canary_size` items (0: none; the console and the
    CLI default to REDRIVE["CANARY_SIZE"], callers here choose): see `_watch_canary`. A canary
    as large as the selection is none (nothing would be left to hold back), and a discard has
    none. The allowed share and the timeout default to the settings.
    """
    limits = _run_limits(rate, canary_size, canary_max_dead_share, canary_timeout)
    reason = _confirmable(selection, operator, reason)
    now = now or timezone.now()
    ids = selection.ids
    to_queue = check_destination(
        to_queue,
        ids=ids,
        using=selection.database,
        action=selection.action,
        allow_unknown=allow_unknown_queue,
    )
    job_types = _job_types(ids, using=selection.database)
    # A canary as large as the selection is none; a discard has none.
    canary = limits.canary_size if selection.action == Action.REPLAY else 0
    canary = canary if canary < len(ids) else 0
    # Two-person rule: over the threshold it waits for a second user's `approve`.
    awaiting = limits.threshold is not None and len(ids) > limits.threshold
    try:
        with transaction.atomic():
            # Locked so it cannot expire (freeze_selection's clean-up) or be confirmed twice
            # meanwhile.
            if not Selection.objects.select_for_update().filter(pk=selection.pk).exists():
                raise RefusedError("This preview has expired: preview the selection again.")
            # Asked again under the lock: a confirmation that committed while this one got here.
            if ReplayRun.objects.filter(selection=selection).exists():
                raise RefusedError("This selection has already been confirmed.")
            run = ReplayRun.objects.create(
                action=selection.action,
                selection=selection,
                operator=operator,
                operator_name=operator.get_username(),
                reason=reason,
                filter=selection.filter,
                job_types=job_types,
                allow_poisoned=allow_poisoned and selection.action == Action.REPLAY,
                to_queue=to_queue,
                batch_size=limits.batch_size,
                rate=limits.rate,
                requested=len(ids),
                canary_size=canary,
                canary_max_dead_share=limits.canary_share,
                canary_timeout=limits.canary_timeout,
                created_at=now,
                updated_at=now,
                **({"state": RunState.AWAITING} if awaiting else {}),
            )
            _record_start(run, operator, channel, now, allow_unknown_queue=allow_unknown_queue)
            if run.state != RunState.AWAITING:
                _begin(run, now=now, background=background)
    except IntegrityError:
        # The same selection confirmed twice at once (a double click) where the lock does not
        # keep the two apart (SQLite): the second is refused, as it is once the first is in.
        if ReplayRun.objects.filter(selection=selection).exists():
            raise RefusedError("This selection has already been confirmed.") from None
        raise
    return run


@dataclass(frozen=True)
class RunLimits:
    rate: float
    batch_size: int
    canary_size: int
    canary_share: float
    canary_timeout: float
    threshold: int | None  # above this many items a second person approves (None: never)


def _run_limits(rate, canary_size, canary_max_dead_share, canary_timeout) -> RunLimits:
    """A run's pace, batch and canary, the settings filling what the caller left out. Checked
    again here, not only in the form, the CLI and at start-up: a rate or batch size out of range
    would overflow the schedule or loop without progress in the runner."""
    try:
        return RunLimits(
            rate=conf.validate_replay_rate(setting("REPLAY_RATE") if rate is None else rate),
            batch_size=conf.validate_replay_batch_size(setting("REPLAY_BATCH_SIZE")),
            canary_size=conf.validate_canary_size(canary_size),
            canary_share=conf.validate_canary_share(
                setting("CANARY_MAX_DEAD_SHARE")
                if canary_max_dead_share is None
                else canary_max_dead_share
            ),
            canary_timeout=conf.validate_canary_timeout(
                setting("CANARY_TIMEOUT") if canary_timeout is None else canary_timeout
            ),
            threshold=conf.approval_threshold(),
        )
    except ValueError as exc:
        raise RefusedError(str(exc)) from None


def _confirmable(selection: Selection, operator, reason: str) -> str:
    """The reason, stripped, if `operator` may confirm `selection` as a run (RefusedError
    otherwise)."""
    reason = (reason or "").strip()
    if not reason:
        raise RefusedError("A reason is required.")
    if selection.operator_id != operator.pk:
        raise RefusedError("This selection was previewed by another operator.")
    if selection.kind != Selection.Kind.LETTERS:
        raise RefusedError("This selection is of jobs, not dead letters.")
    if ReplayRun.objects.filter(selection=selection).exists():
        raise RefusedError("This selection has already been confirmed.")
    return reason


def _record_start(run: ReplayRun, operator, channel: str, now, *, allow_unknown_queue: bool):
    """The audit entry of a confirmed run: on its selection (whose ids it acts on), with what
    was asked of it (and, for a replay to a queue, whether the operator let it be one the
    console did not know)."""
    params = start_params(run)
    if run.to_queue and allow_unknown_queue:
        params["allow_unknown_queue"] = True
    store.audit.record(
        f"letters.{run.action}",
        actor=operator.get_username(),
        channel=channel,
        target_kind="selection",
        targets=[run.selection_id],
        reason=run.reason,
        params=params,
        at=now,
    )


def start_params(run: ReplayRun) -> dict:
    """What a run's start is audited with (the data migration that moved older runs in writes
    the same)."""
    params = {
        "run": run.pk,
        "count": run.requested,
        "allow_poisoned": run.allow_poisoned,
        "rate": run.rate,
        "filter": run.filter,
    }
    if run.to_queue:
        params["to_queue"] = run.to_queue
    if run.canary_size:
        params["canary"] = {
            "size": run.canary_size,
            "max_dead_share": run.canary_max_dead_share,
            "timeout": run.canary_timeout,
        }
    if run.state == RunState.AWAITING:
        params["awaiting_approval"] = True
    return params


def _begin(run: ReplayRun, *, now, background: bool):
    """Start a confirmed (or approved) run, in the caller's transaction: a run of at most one
    batch is carried out here; a larger one is handed to the background runner
    (`background=False`: the caller drives it with `carry_out`)."""
    if run.requested <= run.batch_size:
        # Under a rate only the first item(s) may go now; the runner does the rest on time.
        process_batch(run.pk, now=now, reschedule=background)
        run.refresh_from_db()
    elif background:
        _enqueue_runner(run)


def _enqueue_runner(run: ReplayRun, *, at=None):
    from ..tasks import carry_out_run

    task = carry_out_run if at is None else carry_out_run.using(run_after=at)
    task.enqueue(run.pk, run.generation)


@dataclass
class BatchResult:
    handled: int
    more: bool
    # When the run's next item may go, if not straight away (a paced run ahead of schedule).
    due_at: datetime | None = None


# A runner that comes late (the worker was busy, the run was paused) may catch up at most this
# many seconds of its schedule at once: the rate holds over any second, give or take one item,
# while a late runner still gets through about a second's worth of items per wake-up.
PACING_WINDOW = 1.0
# How often a caller driving a run in its own process looks at the run again while it waits
# for the next item: a pause or cancel takes effect within this many seconds.
STATE_CHECK_SECONDS = 1.0


DEADLOCK_RETRIES = 3


def process_batch(
    run_id: int, *, generation: int | None = None, now=None, reschedule: bool = False
) -> BatchResult:
    """Carry out the next batch of a run in one transaction with its ledger rows; a batch
    PostgreSQL chose as a deadlock victim (a sweep burying letters of the same counters in its
    own order) is rolled back whole, so it is simply tried again."""
    for attempt in range(1, DEADLOCK_RETRIES + 1):
        try:
            return _process_batch(run_id, generation=generation, now=now, reschedule=reschedule)
        except OperationalError as exc:
            deadlock = getattr(getattr(exc, "__cause__", None), "sqlstate", None) == "40P01"
            if (
                not deadlock
                or attempt == DEADLOCK_RETRIES
                or transaction.get_connection().in_atomic_block
            ):
                raise
    raise AssertionError("unreachable")


def _process_batch(
    run_id: int, *, generation: int | None = None, now=None, reschedule: bool = False
) -> BatchResult:
    """Carry out the next batch of a run in one transaction with its ledger rows.

    The run row is locked first, so two runners of one run take turns and never read the same
    position; a runner killed mid-batch rolls the whole batch back and the next one redoes it.
    `generation` is the runner's ticket: after a resume an older runner stops here.

    A batch holds at most the run's batch size, and under a rate only the items whose time has
    come. With `reschedule`, a run left with items not yet due gets its continuation runner
    (run after the next item's time) in this same transaction, as the next generation: this
    runner's job may still be retried if its worker dies before acknowledging it, and that
    retry must then find itself stale rather than drive the run beside the continuation.
    """
    with transaction.atomic():
        run = ReplayRun.objects.select_for_update().select_related("selection").get(pk=run_id)
        if run.state not in ACTIVE_STATES or (
            generation is not None and generation != run.generation
        ):
            return BatchResult(0, False)
        now = now or timezone.now()
        if run.canary_state == CanaryState.WATCHING:
            return _watch_canary(run, now, reschedule=reschedule)
        allowed, due = _allowance(run, now)
        if not allowed:  # a runner woke before its time (clocks differ between machines)
            if reschedule:
                _continue_later(run, due)
                run.save(update_fields=["generation"])
            return BatchResult(0, True, due)
        if run.canary_size and not run.canary_state:
            # The canary goes alone: no item after it before its jobs are judged.
            allowed = min(allowed, run.canary_size - run.processed)
        ids = run.selection.ids[run.processed : run.processed + allowed]
        using = run.selection.database
        batch_no = run.batches + 1
        # The letters live in the selection's queue database, the run and its ledger on default.
        # On another database than default the two cannot commit atomically, so the letters'
        # transaction (nested here, its own on that database) commits first, then this one. A
        # crash between the two leaves those letters replaying (or discarded) with the run not
        # advanced: the next runner redoes the batch and the letters' own state skips each of
        # them ("an earlier replay is still pending"), so no letter is replayed twice; only
        # their ledger rows say "skipped" instead of "replayed". (The other order could record
        # replays that never happened.) On default it is one transaction, as always.
        with transaction.atomic(using=using):
            letters = lock_in_order(ids, using=using)
            if run.action == Action.REPLAY:
                done, skipped, refs = _replay(
                    ids,
                    letters,
                    allow_poisoned=run.allow_poisoned,
                    to_queue=run.to_queue or None,
                    now=now,
                    using=using,
                )
            else:
                outcome = store.discard(ids, now=now, using=using)
                done, skipped, refs = outcome.done, outcome.skipped, {}
        _record_batch(run, ids, letters, done, skipped, refs, batch_no, now)
        due_at = _advance(run, len(ids), len(done), len(skipped), batch_no, due, now)
        if due_at is not None and reschedule:
            _continue_later(run, due_at)
        run.save()
        return BatchResult(len(ids), run.state in ACTIVE_STATES, due_at)


def _record_batch(run: ReplayRun, ids, letters, done, skipped, refs, batch_no: int, now):
    """A batch's ledger: one row per item, with what became of it."""
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


def _advance(run: ReplayRun, handled: int, carried_out: int, skipped: int, batch_no: int, due, now):
    """Move a run past a batch (not saved): its counts, its state, the next item's time and
    the canary's watch. Returns when its runner should look again, if not straight away."""
    if run.state == RunState.QUEUED:
        run.state, run.started_at = RunState.RUNNING, now
    run.processed += handled
    run.done += carried_out
    run.skipped += skipped
    run.batches = batch_no
    run.updated_at = now
    if run.processed >= run.requested:
        run.state, run.finished_at = RunState.FINISHED, now
    due_at = None
    if run.rate:
        run.next_item_at = due + timedelta(seconds=handled / _pace(run.rate))
        if run.next_item_at > now and run.state in ACTIVE_STATES:
            due_at = run.next_item_at
    if (
        run.canary_size
        and not run.canary_state
        and run.processed >= run.canary_size
        and run.state in ACTIVE_STATES
    ):
        # The whole canary is out: a fresh runner looks at its jobs in a moment.
        run.canary_state, run.canary_started_at = CanaryState.WATCHING, now
        due_at = now + timedelta(seconds=min(CANARY_CHECK_SECONDS, run.canary_timeout))
    return due_at


def _pace(rate: float) -> float:
    """The rate a run is paced at: runs confirmed before rates were checked may hold one out
    of range (1e-300 overflowed the wait), so they run at the nearest sane rate instead."""
    if not math.isfinite(rate) or rate < conf.MIN_REPLAY_RATE:
        return conf.MIN_REPLAY_RATE
    return min(rate, conf.MAX_REPLAY_RATE)


def _allowance(run: ReplayRun, now) -> tuple[int, datetime | None]:
    """How many items of the run may go now, and the time the first of them was due.

    Per item, not per batch: item n of a run at rate r goes no earlier than start + n/r. A
    runner that comes late may take the items that fell due meanwhile, but at most
    PACING_WINDOW seconds' worth, so a lull is never followed by a burst above the rate (a
    token bucket holding a second of tokens, its first item going at once). When nothing may go
    yet, returns (0, when the next item may).
    """
    left = min(run.batch_size, run.requested - run.processed)
    if not run.rate:
        return left, None
    rate = _pace(run.rate)
    interval = 1.0 / rate
    earliest = now - timedelta(seconds=max(0.0, PACING_WINDOW - interval))
    due = max(run.next_item_at or now, earliest)
    if due > now:
        return 0, due
    # A microsecond of slack: the schedule is kept in whole microseconds.
    fell_due = int(((now - due).total_seconds() + 1e-6) * rate) + 1
    return min(left, fell_due), due


def _continue_later(run: ReplayRun, at):
    """Hand the run to a continuation runner that starts when its next item is due, instead of
    sleeping in a worker slot until then. The caller saves the bumped generation in the
    transaction that enqueues the continuation."""
    run.generation += 1
    _enqueue_runner(run, at=at)


# How often a watched canary's jobs are looked at: each look is a short runner job (or, in the
# CLI, a wait in its own process), so a watching run holds no worker slot meanwhile.
CANARY_CHECK_SECONDS = 1.0
# The name a canary's halt is recorded under (in the audit log, through the channel "system",
# and as ReplayRun.stopped_by).
CANARY_ACTOR = "canary"


@dataclass
class CanaryTally:
    """What became of a canary's replays. Only items that made a replay count: a canary item
    skipped (poisoned, no longer pending) is judged by nobody."""

    replayed: int = 0
    done: int = 0  # its job (or external replay) succeeded
    dead: int = 0  # it died again (a job cancelled by an operator counts here too)

    @property
    def unfinished(self) -> int:
        return self.replayed - self.done - self.dead

    @property
    def failed_share(self) -> float:
        """The share that failed, unfinished replays counted as failures (they are judged
        only at the timeout); 0 if nothing was replayed."""
        return (self.dead + self.unfinished) / self.replayed if self.replayed else 0.0


CANARY_JOB_VERDICT = {
    JobState.DONE: "done",
    JobState.DEAD: "dead",
    JobState.CANCELLED: "dead",
}
CANARY_LETTER_VERDICT = {"replayed": "done", "pending": "dead", "discarded": "dead"}


def canary_tally(run: ReplayRun) -> CanaryTally:
    """Read the canary's outcome: the first `canary_size` rows of the run's ledger are exactly
    its items (they commit before any item after them). A replay job's state says done, dead
    or unfinished (ready, running); a replay that made no job of ours (django-q2, outbox), or
    whose job was pruned, is read from its letter as the ledger reads it."""
    using = run.selection.database
    rows = (
        ReplayItem.objects.filter(run_id=run.pk)
        .order_by("id")
        .values_list("dead_letter_id", "outcome", "job_id", "external_id")[: run.canary_size]
    )
    items = [(pk, job, ref) for pk, outcome, job, ref in rows if outcome == Outcome.REPLAYED]
    jobs = dict(
        Job.objects.using(using)
        .filter(store.Among(job for _, job, _ in items if job is not None))
        .values_list("pk", "state")
    )
    letters = {
        pk: (state, ref)
        for pk, state, ref in DeadLetter.objects.using(using)
        .filter(store.Among(pk for pk, job, _ in items if job not in jobs))
        .values_list("pk", "state", "replay_ref")
    }
    tally = CanaryTally(replayed=len(items))
    for pk, job, ref in items:
        if job in jobs:
            verdict = CANARY_JOB_VERDICT.get(jobs[job])
        else:
            state, latest_ref = letters.get(pk, (None, None))
            # A later replay of the letter means this one died.
            verdict = "dead" if ref and latest_ref != ref else CANARY_LETTER_VERDICT.get(state)
        if verdict == "done":
            tally.done += 1
        elif verdict == "dead":
            tally.dead += 1
    return tally


def canary_as_judged(run: ReplayRun) -> CanaryTally:
    """The canary as its runner last judged it (the counts stored on the run), for the run
    page: `unfinished` were still pending then, or at the timeout, counted as failures."""
    outcomes = (
        ReplayItem.objects.filter(run_id=run.pk)
        .order_by("id")
        .values_list("outcome", flat=True)[: run.canary_size]
    )
    replayed = sum(1 for outcome in outcomes if outcome == Outcome.REPLAYED)
    return CanaryTally(replayed=replayed, done=run.canary_done, dead=run.canary_dead)


def _watch_canary(run: ReplayRun, now, *, reschedule: bool) -> BatchResult:
    """One look at a watched canary, with the run row locked (from `_process_batch`).

    Until each of its replays finished, or `canary_timeout` seconds after the canary went out,
    the run waits: a continuation runner (with `reschedule`) or the caller (`carry_out`) looks
    again in CANARY_CHECK_SECONDS, never sleeping in a worker slot. Then it decides: if more
    than `canary_max_dead_share` of the replayed canary died again (replays still unfinished
    at the timeout counted as failures), the run halts itself (state halted, audited as
    run.halted by CANARY_ACTOR) until an operator resumes it (`resume`); otherwise
    the canary passed and the rest of the run goes on from here."""
    tally = canary_tally(run)
    run.canary_done, run.canary_dead = tally.done, tally.dead
    run.updated_at = now  # the runner is alive: a watched run is not stalled
    deadline = (run.canary_started_at or now) + timedelta(seconds=run.canary_timeout)
    if tally.unfinished and now < deadline:
        due_at = min(now + timedelta(seconds=CANARY_CHECK_SECONDS), deadline)
        if reschedule:
            _continue_later(run, due_at)
        run.save()
        return BatchResult(0, True, due_at)
    if tally.failed_share > run.canary_max_dead_share:
        run.state = RunState.HALTED
        run.canary_state = CanaryState.HALTED
        run.stopped_by = CANARY_ACTOR
        run.save()
        store.audit.record(
            "run.halted",
            actor=CANARY_ACTOR,
            channel="system",
            target_kind="run",
            targets=[run.pk],
            params=canary_params(run),
            at=now,
        )
        return BatchResult(0, False)
    run.canary_state = CanaryState.PASSED
    run.save()
    return BatchResult(0, True)


def lock_in_order(ids, *, using: str = "default") -> dict:
    """Lock the batch's letters, then the counter rows their triggers will change, each in id
    order: the order every writer follows (a worker burying a letter locks it, then its
    counter), so two batches, or a batch and a worker, wait for each other instead of
    deadlocking on the counters. Returns the locked letters' rows by id (the batch's one read
    of them: their job types for the ledger, their replay counts for the poison limit)."""
    letters = {
        row.pk: row
        for row in DeadLetter.objects.using(using)
        .select_for_update()
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
            PendingCount.objects.using(using)
            .select_for_update()
            .filter(same_counter)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
    return letters


def _replay(ids, letters, *, allow_poisoned: bool, to_queue=None, now, using: str = "default"):
    """Replay through the store (to `to_queue`, if not None), holding back items past the
    poison limit (`letters` are locked, so their replay counts cannot change before the
    replay)."""
    limit = setting("MAX_REPLAYS")
    poisoned = {}
    if not allow_poisoned:
        poisoned = {
            pk: POISON_REASON.format(n=limit) for pk, row in letters.items() if row.replays >= limit
        }
    outcome = store.replay(
        [pk for pk in ids if pk not in poisoned], now=now, using=using, to_queue=to_queue
    )
    return outcome.done, {**poisoned, **outcome.skipped}, outcome.refs


def run_due(run_id: int, generation: int, *, clock=timezone.now) -> BatchResult:
    """One attempt of the background runner (`tasks.carry_out_run`): carry out the batches that
    are due, and if the run is paced and its next item is not due yet, leave a continuation
    runner for that time and return. It never sleeps, so a waiting run holds no worker slot:
    other runs' runners and other jobs use the slot meanwhile, and a pause or cancel is seen
    before the next batch of the continuation, which then stops without doing anything.
    An unpaced run is driven to its end in this attempt, one transaction per batch.
    """
    while True:
        result = process_batch(run_id, generation=generation, now=clock(), reschedule=True)
        if not result.more or result.due_at is not None:
            return result


def carry_out(run_id: int, generation: int | None = None, *, sleep=time.sleep, clock=None):
    """Drive a run to its end in the caller's own process (the CLI), at the run's rate.

    Waits between items here, which is fine for a command, never for a worker (see
    `run_due`); it looks at the run at least every STATE_CHECK_SECONDS while waiting, so it
    stops within a second when the run is paused or cancelled, or a newer runner took over.
    """
    clock = clock or timezone.now
    while True:
        result = process_batch(run_id, generation=generation, now=clock())
        if not result.more:
            return
        if result.due_at is not None:
            wait = (result.due_at - clock()).total_seconds()
            if wait > 0:
                sleep(min(wait, STATE_CHECK_SECONDS))


def pause(run: ReplayRun, *, operator, channel: str = "code", now=None) -> bool:
    return _stop(run, RunState.PAUSED, operator=operator, channel=channel, now=now)


def cancel(run: ReplayRun, *, operator, channel: str = "code", now=None) -> bool:
    return _stop(run, RunState.CANCELLED, operator=operator, channel=channel, now=now)


def _stop(run, state, *, operator, channel, now) -> bool:
    now = now or timezone.now()
    stoppable = [*ACTIVE_STATES] + (
        [RunState.PAUSED, RunState.HALTED] if state == RunState.CANCELLED else []
    )
    if state == RunState.CANCELLED:
        stoppable.append(RunState.AWAITING)  # refused approval: it never starts
    with transaction.atomic():
        changed = ReplayRun.objects.filter(pk=run.pk, state__in=stoppable).update(
            state=state,
            stopped_by=operator.get_username(),
            updated_at=now,
            **({"finished_at": now} if state == RunState.CANCELLED else {}),
        )
        if changed:
            _record_control(run, RunControl(state), operator, channel, now)
    run.refresh_from_db()
    return bool(changed)


def _record_control(run, action, operator, channel, now):
    store.audit.record(
        f"run.{action}",
        actor=operator.get_username(),
        channel=channel,
        target_kind="run",
        targets=[run.pk],
        at=now,
    )


def canary_params(run) -> dict:
    """What a canary judged, as its halt is audited."""
    return {"canary_done": run.canary_done, "canary_dead": run.canary_dead}


def run_events(run) -> list:
    """Who paused, resumed, cancelled or approved a run, or its canary halted it, oldest
    first (the audit log's entries on it)."""
    return store.audit.history("run", run.pk)[::-1]


def resume(run: ReplayRun, *, operator, channel: str = "code", now=None) -> bool:
    """Continue a paused run (or restart the runner of a stuck one) with a fresh runner.

    A run its canary halted goes on too, with the items after the canary: the operator's
    deliberate override, kept as the canary's state and in the audit log."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = ReplayRun.objects.select_for_update().get(pk=run.pk)
        if locked.state not in (*ACTIVE_STATES, RunState.PAUSED, RunState.HALTED):
            return False
        if locked.state == RunState.HALTED:
            locked.canary_state = CanaryState.OVERRIDDEN
        locked.state = RunState.RUNNING if locked.started_at else RunState.QUEUED
        locked.generation += 1
        locked.stopped_by = ""
        locked.updated_at = now
        locked.save()
        _record_control(locked, RunControl.RESUMED, operator, channel, now)
        # A paced run resumed before its next item's time: the runner starts at that time.
        due = locked.next_item_at if locked.next_item_at and locked.next_item_at > now else None
        _enqueue_runner(locked, at=due)
    run.refresh_from_db()
    return True


def approve(
    run: ReplayRun, *, operator, background: bool = True, channel: str = "code", now=None
) -> ReplayRun:
    """The two-person rule: a second user holding the run's action permission (and, for a run
    past the poison limit, that permission too) approves a run awaiting approval, which then
    starts exactly as a run under the threshold starts (`_begin`). Both names stay on the run:
    `operator_name` asked, `approved_by` approved (audited). RefusedError, changing
    nothing, for the requester's own run, a missing permission or a run not awaiting."""
    from ..roles import ACTION_PERMISSION, POISON

    now = now or timezone.now()
    with transaction.atomic():
        locked = ReplayRun.objects.select_for_update().get(pk=run.pk)
        if locked.state != RunState.AWAITING:
            raise RefusedError(
                f"The run is {locked.get_state_display().lower()}: there is nothing to approve."
            )
        if locked.operator_id == operator.pk:
            raise RefusedError(
                "You asked for this run: a second person must approve it (two-person rule)."
            )
        needed = [ACTION_PERMISSION[locked.action]] + ([POISON] if locked.allow_poisoned else [])
        missing = [perm for perm in needed if not operator.has_perm(perm)]
        if not operator.is_active or missing:
            raise RefusedError(
                f"{operator.get_username()} may not approve this run (needs {missing[0]})."
                if missing
                else f"{operator.get_username()} is not an active user."
            )
        locked.state = RunState.QUEUED
        locked.approved_by = operator.get_username()
        locked.approved_at = now
        locked.updated_at = now
        locked.save(update_fields=["state", "approved_by", "approved_at", "updated_at"])
        _record_control(locked, RunControl.APPROVED, operator, channel, now)
        _begin(locked, now=now, background=background)
    run.refresh_from_db()
    return run
