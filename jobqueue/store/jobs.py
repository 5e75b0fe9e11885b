"""Jobs: enqueue, claim, acknowledge, extend, fail, release and sweep.

Every transition out of 'running' is guarded by the lease (jobqueue.store.leases): a worker may
acknowledge, fail, extend or release a job only while `state = 'running' AND lease_token = its
token AND locked_until > now`. A zero-row update means the lease was lost to the sweep or a
newer owner; the caller logs and counts it and never overwrites the newer state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import batched, chain

from django.db import DataError, IntegrityError, connections, transaction
from django.db.models.base import ModelState
from django.utils import timezone

from jobqueue.conf import setting
from jobqueue.logfmt import log_line
from jobqueue.models import (
    READY_PARTS,
    UNFINISHED_STATES,
    DeadLetter,
    Job,
    JobState,
    JobStatus,
    RateBucket,
    UniqueKey,
)

from . import dead_letters, dialects
from .leases import JOBS, NO_LEASE, expired_entry
from .payloads import check_payload, check_value
from .workers import count

logger = logging.getLogger("jobqueue.sweep")


# What a unique job's hold can cover (besides a period), in the one vocabulary of job states
# (JobStatus): due, waiting for its first run, waiting out a retry's backoff, running (a lease
# that expired still holds: the job has not finished).
UNIQUE_STATES = ("ready", "scheduled", "retrying", "running")


@dataclass(frozen=True, slots=True)
class Unique:
    """A unique job's key, the states its holder keeps it in, and an optional period."""

    key: str
    states: tuple[str, ...] = UNIQUE_STATES
    seconds: float | None = None


@dataclass(slots=True)
class NewJob:
    task_path: str
    args: Sequence = ()
    kwargs: dict = field(default_factory=dict)
    queue_name: str = "default"
    priority: int = 0
    run_after: datetime | None = None
    idempotency_key: str | None = None
    max_attempts: int = 5
    backend: str = "default"
    encoded: tuple[str, str] | None = None  # (args, kwargs) as JSON, if already checked
    unique: Unique | None = None
    ordering_key: str | None = None
    ordering_on_dead: str | None = None  # "block" or "skip" when ordering_key is set
    concurrency_key: str | None = None
    concurrency_limit: int | None = None  # set when concurrency_key is
    # A replay of a dead letter: the letter it settles, and the place in its ordering key of
    # the job it replays (which runs before the key's later jobs).
    replayed_from_id: int | None = None
    ordering_position: int | None = None
    # A job that goes in dead, having failed once with this error entry (a workflow batch's bad
    # item, which an operator replays from its letter); it holds no key of any kind.
    died: dict | None = None


def enqueue(
    new: NewJob, *, now: datetime | None = None, using: str = "default"
) -> tuple[Job, bool]:
    """Insert a ready job in the caller's transaction; returns (job, created).

    With an idempotency key that a live (not dead) job already holds, nothing is inserted and
    the existing job is returned, so a double submit yields one job.
    """
    return enqueue_many([new], now=now, using=using)[0]


def enqueue_many(
    news: Iterable[NewJob], *, now: datetime | None = None, using: str = "default"
) -> list[tuple[Job, bool]]:
    """Bulk enqueue, in one transaction. `news` may be any iterable, a generator included: it
    is read a batch (the dialect's SEND_CHUNK) at a time, and on PostgreSQL a batch of plain
    jobs is sent without waiting for the one before (pipeline mode), so the server inserts one
    batch while the next is built. So the iterable must not use the database itself (it would
    run inside the pipeline); whatever it raises part-way rolls the call back: nothing is
    written. Keyless jobs go in as one multi-row INSERT per batch; keyed ones one statement per
    batch on PostgreSQL, one each on SQLite (ON CONFLICT DO NOTHING on the live-key index)."""
    now = now or timezone.now()
    return insert_jobs(((_job_from(n, now), n.unique) for n in news), now=now, using=using)


def enqueue_calls(
    common: NewJob,
    arguments: Iterable[tuple[list, dict, tuple[str, str]]],
    *,
    now: datetime | None = None,
    using: str = "default",
) -> list[tuple[Job, bool]]:
    """enqueue_many for many calls of one task: each row is `common` but for its arguments,
    given as (args, kwargs, their JSON from check_payload). The columns the calls share are
    set once rather than per row: building rows took as long as the server took to insert
    them, and it is the part that does not overlap."""
    if common.died is not None:
        raise ValueError("enqueue_calls makes ready jobs; a dead one goes through enqueue_many")
    now = now or timezone.now()
    shared, unique = _shared_row(common, now), common.unique
    jobs = (
        (_job_with(shared.copy(), args, kwargs, encoded), unique)
        for args, kwargs, encoded in arguments
    )
    return insert_jobs(jobs, now=now, using=using)


def insert_jobs(
    jobs: Iterable[tuple[Job, Unique | None]], *, now: datetime, using: str
) -> list[tuple[Job, bool]]:
    """The one way a job row is written (enqueue, bulk, keyed, ordered, unique, replays, the
    outbox's fan-out, a workflow's dead items): built rows (_job_from) and their unique holds,
    in the caller's transaction; returns (job, created) per row, in order. Each row goes in
    through the cheapest statement that carries it: the dialect's hot INSERT for plain ready
    jobs, its keyed INSERT (ON CONFLICT DO NOTHING on the live-key index) for idempotency keys,
    the ORM's for the rest (ordering and concurrency keys, replays, dead items)."""
    dialect = dialects.of(using)
    connection = connections[using]
    batches = batched(jobs, dialect.SEND_CHUNK)
    first, second = next(batches, ()), next(batches, None)
    if second is None:  # most calls: one job, or a few hundred
        return _enqueue_batch(connection, dialect, first, now, using)
    results: list[tuple[Job, bool]] = []
    with transaction.atomic(using=using), dialect.sender(connection, now) as sender:
        for batch in chain((first, second), batches):
            results += _enqueue_batch(connection, dialect, batch, now, using, sender)
    return results


def _plain(job: Job, unique: Unique | None) -> bool:
    """No key of any kind: the dialect's hot INSERT takes it as it is."""
    return unique is None and job.idempotency_key is None and _hot(job)


def _hot(job: Job) -> bool:
    """What the dialects' hot INSERT carries: a ready job of no replay (its ordering and
    concurrency keys too, in a statement of their own for the jobs that have them). Anything
    else goes through the ORM's insert."""
    return (
        job.replayed_from_id is None
        and job.ordering_position is None
        and job.state == JobState.READY
    )


def _enqueue_batch(
    connection,
    dialect: dialects.Dialect,
    batch: Sequence[tuple[Job, Unique | None]],
    now,
    using,
    sender: dialects.Sender | None = None,
) -> list[tuple[Job, bool]]:
    jobs = [job for job, _ in batch]
    results: list[tuple[Job, bool]] = [(job, True) for job in jobs]
    if sender is not None and all(_plain(job, unique) for job, unique in batch):
        sender.send(jobs)  # ids filled in when the sender flushes, before the call returns
        return results
    if sender is not None:
        sender.flush()  # what follows reads as it goes: nothing may be in flight
    keyless = [job for job, unique in batch if job.idempotency_key is None and unique is None]
    keyed = [(i, job) for i, job in enumerate(jobs) if job.idempotency_key is not None]
    unique = [(i, job, spec) for i, (job, spec) in enumerate(batch) if spec]
    # Keyless jobs alone are one statement (its notification included; a batch is never more
    # than SEND_CHUNK): atomic without a transaction of our own, so a single enqueue costs one
    # round trip.
    with _atomic_if(keyed or unique, using):
        if keyless:
            _insert(connection, dialect, keyless, now, using)
        for i, job, spec in unique:
            results[i] = _enqueue_unique(connection, dialect, job, spec, now, using)
        if keyed:
            _insert_keyed(connection, dialect, keyed, results, now, using)
    return results


def _insert_keyed(
    connection, dialect: dialects.Dialect, keyed: list[tuple[int, Job]], results, now, using
):
    """Jobs with an idempotency key, through the dialect's insert_keyed; a job whose key a live
    job holds (an earlier one of this batch included) is not inserted: its result is that job."""
    woken = set()
    ids = dialect.insert_keyed(connection, [job for _, job in keyed], now=now)
    for (i, job), job_id in zip(keyed, ids, strict=True):
        if job_id is None:
            existing = (
                Job.objects.using(using)
                .exclude(state=JobState.DEAD)
                .get(idempotency_key=job.idempotency_key)
            )
            results[i] = (existing, False)
        else:
            job.pk = job_id
            if job.run_after <= now:
                woken.add(job.queue_name)
    dialect.notify(connection, woken)


def _insert(
    connection, dialect: dialects.Dialect, jobs: list[Job], now: datetime, using: str
) -> None:
    """Insert keyless jobs: the plain ones through the dialect's hot INSERT, the others (few)
    through the ORM's."""
    plain, ordered = [], []
    for job in jobs:
        (plain if _hot(job) else ordered).append(job)
    if not ordered:
        dialect.insert_many(connection, plain, now=now)
        return
    with transaction.atomic(using=using):  # several statements: all or none
        if plain:
            dialect.insert_many(connection, plain, now=now)
        Job.objects.using(using).bulk_create(ordered)
        due = {j.queue_name for j in ordered if j.state == JobState.READY and j.run_after <= now}
        dialect.notify(connection, due)


def _enqueue_unique(
    connection, dialect: dialects.Dialect, job: Job, spec: Unique, now, using
) -> tuple[Job, bool]:
    """Insert `job` unless the job holding `spec.key` still holds it: then that job. The key's
    row is read FOR UPDATE, so enqueues of one key queue behind each other; two that both find
    no row both insert, and the primary key fails the second, whose savepoint rolls back (its
    job and notification with it) before it reads the key again and finds the first's job."""
    for _ in range(3):
        hold = UniqueKey.objects.using(using).select_for_update().filter(key=spec.key).first()
        if hold is not None:
            holder = Job.objects.using(using).filter(pk=hold.job_id).first()
            if holder is not None and _holds(holder, hold, now):
                return holder, False
        expires = now + timedelta(seconds=spec.seconds) if spec.seconds else None
        try:
            with transaction.atomic(using=using):
                _insert(connection, dialect, [job], now, using)
                held = {"job_id": job.pk, "states": ",".join(spec.states), "expires_at": expires}
                if hold is None:  # fails on the primary key if another enqueue made one since
                    UniqueKey.objects.using(using).create(key=spec.key, **held)
                else:  # locked above: nobody else can have moved it
                    UniqueKey.objects.using(using).filter(key=spec.key).update(**held)
        except IntegrityError:
            job.pk = None
            continue
        return job, True
    raise IntegrityError(f"unique key {spec.key!r} kept changing hands; enqueue again")


def _holds(holder: Job, hold: UniqueKey, now: datetime) -> bool:
    if hold.expires_at is not None and hold.expires_at > now:
        return True
    status = JobStatus.of(holder, now)
    if status == JobStatus.EXPIRED:
        status = JobStatus.RUNNING
    return status.value in hold.states.split(",")


def _job_from(n: NewJob, now: datetime) -> Job:
    """The Job a new row will be, built without Model.__init__: for a bulk enqueue its
    per-field defaults and init signals cost more than the INSERT. Every column is set here
    or in _shared_row (tests/jobqueue/test_store.py checks the list against the model's
    fields)."""
    job = _job_with(
        _shared_row(n, now),
        list(n.args),
        dict(n.kwargs),
        n.encoded or check_payload(n.args, n.kwargs),
    )
    if n.died is not None:
        _dead_on_arrival(job, n)
    return job


def _dead_on_arrival(job: Job, n: NewJob) -> None:
    if n.idempotency_key or n.unique or n.ordering_key or n.concurrency_key:
        raise ValueError("a job that goes in dead holds no key")
    job.state, job.attempts, job.errors = JobState.DEAD, 1, [n.died]
    job.started_at = job.last_attempted_at = job.finished_at = job.enqueued_at


def _shared_row(n: NewJob, now: datetime) -> dict:
    """The columns of a new job that every call of its task shares: all but its arguments."""
    row = _NEW_ROW.copy()  # copying a built dict costs a third of building one this size
    row["task_path"] = n.task_path
    row["queue_name"] = n.queue_name
    row["priority"] = n.priority
    row["backend"] = n.backend
    row["idempotency_key"] = n.idempotency_key
    row["run_after"] = n.run_after or now
    row["max_attempts"] = n.max_attempts
    row["enqueued_at"] = now
    row["ordering_key"] = n.ordering_key
    row["ordering_on_dead"] = n.ordering_on_dead
    row["concurrency_key"] = n.concurrency_key
    row["concurrency_limit"] = n.concurrency_limit
    row["replayed_from_id"] = n.replayed_from_id
    row["ordering_position"] = n.ordering_position
    return row


def _job_with(row: dict, args: list, kwargs: dict, encoded: tuple[str, str]) -> Job:
    """A Job of `row` (taken, not copied) with its own arguments, and the model state and
    lists that no two jobs may share."""
    row["_state"] = ModelState()
    row["args"], row["kwargs"], row["encoded_payload"] = args, kwargs, encoded
    row["worker_ids"], row["errors"] = [], []
    job = Job.__new__(Job)
    job.__dict__ = row
    return job


_NEW_ROW = dict.fromkeys(
    [
        "_state",
        "id",
        "task_path",
        "args",
        "kwargs",
        "queue_name",
        "priority",
        "backend",
        "idempotency_key",
        "state",
        "run_after",
        "attempts",
        "max_attempts",
        "lease_token",
        "locked_until",
        "locked_by",
        "worker_ids",
        "enqueued_at",
        "started_at",
        "last_attempted_at",
        "finished_at",
        "errors",
        "return_value",
        "replayed_from_id",
        "ordering_key",
        "ordering_position",
        "ordering_on_dead",
        "concurrency_key",
        "concurrency_limit",
        "encoded_payload",
    ]
) | {"state": JobState.READY, "attempts": 0}


def claim(
    *,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    lease_seconds: float,
    now: datetime | None = None,
    using: str = "default",
    sweep: bool = True,
    swept_dead: list[Job] | None = None,
) -> list[Job]:
    """Lease up to `limit` due jobs in one short transaction; the handler runs after it commits.
    The jobs come back in the order they should start: best priority first.

    The same transaction first sweeps expired leases: attempts left → ready again; final
    attempt → dead letter, so a worker killed on its last attempt never leaves a row stuck.
    (A busy worker sweeps once a second rather than on every claim: `sweep=False`.) Jobs the
    sweep dead-lettered are appended to `swept_dead`, for the caller's task_finished signals.
    """
    now = now or timezone.now()
    dialect = dialects.of(using)
    arguments = {
        "worker_id": worker_id,
        "queues": list(queues) if queues else None,
        "limit": limit,
        "now": now,
        "lease_until": now + timedelta(seconds=lease_seconds),
    }
    limits = rate_limits()
    if limits:
        return _claim_rate_limited(dialect, arguments, limits, sweep, swept_dead, using)
    if sweep:
        sweep_expired(now=now, using=using, dead=swept_dead)
    return _claim_all(dialect, connections[using], arguments, using)


def _claim_all(
    dialect: dialects.Dialect, connection, arguments: dict, using: str, keys=None
) -> list[Job]:
    """The claim. While jobs with a concurrency key are ready, the keyed statement: each key
    within its limit, the keyless jobs as one more key, every key's next job before any key's
    second. Otherwise the plain one (one statement, atomic by itself); telling which costs one
    index probe (`keys`: that probe's answer, when the caller asked already)."""
    if arguments["limit"] <= 0:
        return []
    keys = dialect.ready_keys(connection) if keys is None else keys
    if not keys:
        return dialect.claim(connection, **arguments)
    with transaction.atomic(using=using):  # the per-key locks last until this commits
        return dialect.claim(connection, **arguments, keys=keys)


def rate_limits() -> dict[str, float]:
    """REDRIVE["RATE_LIMITS"]: jobs per second per queue, across every worker."""
    return setting("RATE_LIMITS") or {}


def throttled(queues, *, now: datetime, using: str = "default") -> bool:
    """Whether a rate-limited queue among `queues` (None: every queue) has due jobs waiting:
    an empty claim then means "wait for tokens", not "nothing to do" (a burst worker keeps
    going)."""
    served = [q for q in rate_limits() if not queues or q in queues]
    if not served:
        return False
    due = Job.objects.using(using).filter(
        state=JobState.READY, queue_name__in=served, run_after__lte=now
    )
    # One probe per partial index of ready jobs (READY_PARTS): "ready" alone matches none
    # and would scan every finished job.
    return any(due.filter(part).exists() for part in READY_PARTS)


def _claim_rate_limited(
    dialect: dialects.Dialect, arguments, limits, sweep, swept_dead, using
) -> list[Job]:
    """The claim with rate-limited queues taken apart: the other queues as usual, then each
    limited queue this worker serves for as many jobs as its bucket has tokens. The bucket row
    is locked until the transaction commits, so workers on every host share one rate."""
    connection, now, limit = connections[using], arguments["now"], arguments["limit"]
    served = [q for q in limits if not arguments["queues"] or q in arguments["queues"]]
    with transaction.atomic(using=using):
        if sweep:
            sweep_expired(now=now, using=using, dead=swept_dead)
        jobs = []
        keys = dialect.ready_keys(connection)  # one probe for every part of this claim
        if not arguments["queues"] or set(arguments["queues"]) - set(served):
            jobs = _claim_all(
                dialect, connection, {**arguments, "excluded": list(limits)}, using, keys
            )
        for queue in served:
            if len(jobs) >= limit:
                break
            rate = float(limits[queue])
            bucket, _ = (
                RateBucket.objects.using(using)
                .select_for_update()
                .get_or_create(
                    queue_name=queue, defaults={"tokens": max(1.0, rate), "updated_at": now}
                )
            )
            elapsed = max(0.0, (now - bucket.updated_at).total_seconds())
            tokens = min(max(1.0, rate), bucket.tokens + rate * elapsed)  # a second's burst
            grant = min(limit - len(jobs), int(tokens))
            taken = []
            if grant > 0:
                taken = _claim_all(
                    dialect,
                    connection,
                    {**arguments, "queues": [queue], "limit": grant},
                    using,
                    keys,
                )
            RateBucket.objects.using(using).filter(pk=queue).update(
                tokens=tokens - len(taken), updated_at=max(now, bucket.updated_at)
            )
            jobs += taken
    jobs.sort(key=lambda job: (-job.priority, job.run_after, job.pk))
    return jobs


def sweep_expired(
    *, now: datetime | None = None, using: str = "default", dead: list[Job] | None = None
) -> int:
    now = now or timezone.now()
    with transaction.atomic(using=using):
        expired = JOBS.expired(now, using)
        counts: dict[tuple, list[int]] = {}
        for job in expired:
            error = expired_entry(job, now)
            retry = job.attempts < job.max_attempts
            _retire(
                job,
                error,
                retry_at=now if retry else None,
                now=now,
                using=using,
                require_live_lease=False,
            )
            tally = counts.setdefault(_counter_key(job, now), [0, 0])
            tally[0] += 1
            tally[1] += not retry
            if not retry and dead is not None:
                job.state, job.finished_at = JobState.DEAD, now
                dead.append(job)
            # The attempt's owner died or stalled, so it wrote no line of its own: say it here,
            # once the sweep has committed.
            fields = {
                "job_id": job.pk,
                "task": job.task_path,
                "queue": job.queue_name,
                "key": job.idempotency_key or "-",
                "attempt": job.attempts,
                "worker": job.locked_by,
                "outcome": "retry" if retry else "dead",
            }
            level = logging.WARNING if retry else logging.ERROR
            transaction.on_commit(
                lambda level=level, fields=fields: log_line(
                    logger, level, "lease_expired", **fields
                ),
                using=using,
            )
        # A failed attempt each, as a worker's failure is (the attempt was counted at claim).
        count({key: (0, failed, died, None) for key, (failed, died) in counts.items()}, using=using)
    return len(expired)


def _counter_key(job: Job, now: datetime) -> tuple[datetime, str, str]:
    return (now.replace(second=0, microsecond=0), job.queue_name, job.task_path)


def acknowledge(
    done: Sequence[tuple[Job, object]], *, now: datetime | None = None, using: str = "default"
) -> set[int]:
    """Mark finished jobs done in one statement; returns the ids whose lease was still ours.

    A value neither database can store (storable_json) or over MAX_PAYLOAD_BYTES (check_value)
    raises DataError before any SQL, as the database would for what only it refuses: nothing is
    acknowledged, and the caller can store the others without that one.
    """
    if not done:
        return set()
    now = now or timezone.now()
    dialect = dialects.of(using)
    limit = setting("MAX_PAYLOAD_BYTES")
    rows = []
    for job, value in done:
        try:
            rows.append((job.id, job.lease_token, check_value(value, "the return value", limit)))
        except (TypeError, ValueError) as exc:
            raise DataError(f"job {job.pk}: {exc}") from exc
    replayed = [job.id for job, _ in done if job.replayed_from_id]
    # PostgreSQL acknowledges the batch in one statement; only replayed jobs need a second
    # statement (their dead letters) in the same transaction.
    with _atomic_if(replayed or dialect.LOOPS, using):
        acked = dialect.acknowledge(connections[using], rows, now=now)
        replayed = [pk for pk in replayed if pk in acked]
        if replayed:
            dead_letters.settle_replayed(using, replay_job_id__in=replayed)
    return acked


def _atomic_if(needed, using):
    return transaction.atomic(using=using) if needed else nullcontext()


def extend_leases(
    jobs: Sequence[Job],
    *,
    lease_seconds: float,
    now: datetime | None = None,
    using: str = "default",
) -> set[int]:
    """Heartbeat: push locked_until forward for leases still ours; returns the ids kept."""
    return JOBS.extend(jobs, lease_seconds=lease_seconds, now=now or timezone.now(), using=using)


def fail(
    job: Job,
    error: dict,
    *,
    retry_at: datetime | None,
    now: datetime | None = None,
    using: str = "default",
) -> bool:
    """Record a failed attempt: ready again at `retry_at`, or dead-lettered when it is None;
    counted in its minute's counters in the same transaction.

    Returns False (and changes nothing) if the lease is no longer ours.
    """
    now = now or timezone.now()
    with transaction.atomic(using=using):
        if not _retire(job, error, retry_at=retry_at, now=now, using=using):
            return False
        count({_counter_key(job, now): (0, 1, int(retry_at is None), None)}, using=using)
        return True


def suspend(job: Job, *, until: datetime, now: datetime, using: str = "default") -> bool:
    """A workflow waits (a durable sleep, a wait for a signal, a step's retry after its
    backoff): ready again at `until`, its lease given back and the attempt not counted, so no
    worker holds it meanwhile. False (nothing changed) if the lease is no longer ours."""
    return (
        JOBS.guard(job, now, using).update(
            state=JobState.READY, run_after=until, attempts=max(job.attempts - 1, 0), **NO_LEASE
        )
        == 1
    )


def _retire(job, error, *, retry_at, now, using, require_live_lease=True) -> bool:
    errors = [*job.errors, error]
    if retry_at is not None:
        return JOBS.wait(job, errors, at=retry_at, now=now, using=using, live=require_live_lease)
    if not JOBS.kill(job, errors, now=now, using=using, live=require_live_lease):
        return False
    job.errors = errors
    _bury(job, now=now, using=using)
    return True


def _bury(job: Job, *, now: datetime, using: str) -> DeadLetter:
    """Write the dead letter in the transaction that retires the job: a replay's death returns
    its letter (locked here) to pending."""
    return dead_letters.bury(
        dead_letters.Burial(
            job.errors[-1],
            attempts=job.attempts,
            now=now,
            replayed=job.replayed_from_id,
            letter=dead_letters.NewLetter(
                job_id=job.pk,
                original_job_id=job.pk,
                task_path=job.task_path,
                queue_name=job.queue_name,
                priority=job.priority,
                backend=job.backend,
                args=job.args,
                kwargs=job.kwargs,
                idempotency_key=job.idempotency_key,
                max_attempts=job.max_attempts,
                errors=job.errors,
            ),
        ),
        using=using,
    )


def unfinished(queues: Sequence[str] | None, *, using: str = "default") -> int:
    """How many jobs of `queues` (every queue if None) are still to finish: waiting (due or
    not) or running. A drain (`runworker --drain`) ends at 0."""
    jobs = Job.objects.using(using).filter(state__in=UNFINISHED_STATES)
    if queues:
        jobs = jobs.filter(queue_name__in=list(queues))
    return jobs.count()


def release(jobs: Sequence[Job], *, now: datetime | None = None, using: str = "default") -> int:
    """Give leases back on graceful shutdown: claimable at once, the attempt not counted."""
    return JOBS.release(jobs, now=now or timezone.now(), using=using)


PRUNE_CHUNK = 5_000


def prune_finished_jobs(
    *, older_than: timedelta, now: datetime | None = None, using: str = "default"
) -> int:
    """Delete done and cancelled jobs that finished before now - older_than, a chunk per
    transaction (a dead letter that named one as its replay keeps the letter; the link is
    cleared). Dead jobs stay with their letters; ready and running ones always stay.

    Walks the ids forward (keyset): each chunk starts after the last one deleted, so ten
    million rows are one pass over the primary key, not a rescan of what is gone per chunk."""
    cutoff = (now or timezone.now()) - older_than
    finished = Job.objects.using(using).filter(
        state__in=[JobState.DONE, JobState.CANCELLED], finished_at__lt=cutoff
    )
    deleted, after = 0, 0
    while True:
        with transaction.atomic(using=using):
            chunk = list(
                finished.filter(pk__gt=after)
                .order_by("id")
                .values_list("id", flat=True)[:PRUNE_CHUNK]
            )
            if not chunk:
                return deleted
            after = chunk[-1]
            deleted += delete_jobs(chunk, using=using)


def delete_jobs(ids: Sequence[int], *, using: str) -> int:
    """Delete these jobs as Django's delete would, without loading them: every row that points
    at one follows its own on_delete rule, found through the model's relations (so a table of
    another app, the console's edits, is cleared without this app naming it). Loading each job
    to delete it, as the collector does, made pruning ten million rows take hours."""
    from django.db import models

    # Every relation pointing here, the hidden ones (related_name="+") included, as the
    # deletion collector finds them.
    links = [
        field
        for field in Job._meta.get_fields(include_hidden=True)
        if field.auto_created and not field.concrete and (field.one_to_one or field.one_to_many)
    ]
    if any(link.on_delete not in (models.SET_NULL, models.DO_NOTHING) for link in links):
        _, by_model = Job.objects.using(using).filter(pk__in=ids).delete()
        return by_model.get(Job._meta.label, 0)
    for link in links:
        if link.on_delete is models.SET_NULL:
            link.related_model._base_manager.using(using).filter(
                **{f"{link.field.name}__in": ids}
            ).update(**{link.field.name: None})
    return Job.objects.using(using).filter(pk__in=ids)._raw_delete(using)
