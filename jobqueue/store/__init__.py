"""The only code that changes job, dead-letter and execution state.

Every transition is a guarded UPDATE whose row count is checked: a worker may acknowledge, fail,
extend or release a job only while `state = 'running' AND lease_token = its token AND
locked_until > now`. A zero-row update means the lease was lost to the sweep or a newer owner;
the caller logs and counts it and never overwrites the newer state.

Statements whose SQL differs between PostgreSQL and SQLite (claim, batched acknowledgement and
lease extension, keyed insert) live in `postgresql.py` and `sqlite.py`, once each; the rest is ORM.
Every function takes `now` so tests can inject a clock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DataError, connections, transaction
from django.db.models.base import ModelState
from django.utils import timezone

from jobqueue.conf import policy
from jobqueue.errors import UnstorableValue
from jobqueue.listener import log_line
from jobqueue.models import DeadLetter, DeadLetterState, Job, JobState, WorkerRecord

from . import postgresql, sqlite

SWEEP_LIMIT = 100
logger = logging.getLogger("jobqueue.sweep")


def _dialect(using: str):
    vendor = connections[using].vendor
    if vendor == "postgresql":
        return postgresql
    if vendor == "sqlite":
        return sqlite
    raise NotImplementedError(f"jobqueue supports PostgreSQL and SQLite, not {vendor}")


# One encoder for every payload: json.dumps with options builds a new encoder on each call,
# which cost a bulk enqueue more than the encoding itself.
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def dumps(value) -> str:
    """JSON for a payload column; refuses anything JSON cannot carry (no pickle, ever)."""
    return _encode(value)


def storable_json(value, what: str = "value") -> str:
    """JSON text both databases store and give back unchanged.

    Raises TypeError (not JSON), ValueError (NaN, infinity, an integer too long to print) or
    UnstorableValue: a string or key holding NUL, which PostgreSQL refuses in jsonb ("unsupported
    Unicode escape sequence"), or a lone surrogate, which it refuses as invalid JSON. SQLite
    would take both; they are refused there too, so a payload's fate never depends on the
    database. The encoder escapes every non-ASCII character, so one scan for a backslash-u
    escape clears almost every text; only one containing such an escape is walked.
    """
    text = _encode(value)
    if "\\u" in text and ("\\u0000" in text or "\\ud" in text):
        _refuse_unstorable(value, what)
    return text


def _refuse_unstorable(value, path: str) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise UnstorableValue(
                f"{path} contains NUL (\\u0000), which PostgreSQL cannot store; "
                "encode binary data (base64) or strip it"
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UnstorableValue(
                f"{path} contains a lone surrogate ({value[exc.start]!a}), which is not text "
                "a database can store; decode bytes with errors='replace'"
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_unstorable(key, f"a key of {path}")
            _refuse_unstorable(item, f"{path}[{key!a}]")
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            _refuse_unstorable(item, f"{path}[{n}]")


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
    """Bulk enqueue. Keyless jobs go in as one multi-row INSERT per chunk; keyed ones one
    statement each (ON CONFLICT DO NOTHING on the live-key index)."""
    now = now or timezone.now()
    dialect = _dialect(using)
    connection = connections[using]
    news = list(news)
    jobs = [_job_from(n, now) for n in news]
    keyless = [job for job in jobs if job.idempotency_key is None]
    keyed = [(i, job) for i, job in enumerate(jobs) if job.idempotency_key is not None]
    results: list[tuple[Job, bool]] = [(job, True) for job in jobs]
    # Keyless jobs alone are one statement (its notification included): atomic without a
    # transaction of our own, so a single enqueue costs one round trip.
    with _atomic_if(keyed or len(keyless) > dialect.INSERT_CHUNK, using):
        if keyless:
            dialect.insert_many(connection, keyless, now=now)
        woken = set()
        for i, job in keyed:
            job_id = dialect.insert_keyed(connection, job)
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
    return results


def check_payload(args, kwargs) -> tuple[str, str]:
    """JSON only, and small: pass ids, not documents (checklist: small payloads, fresh state).

    Returns the two JSON texts, so an insert encodes each payload once.
    """
    args_json, kwargs_json = storable_json(args, "args"), storable_json(kwargs, "kwargs")
    size = len(args_json) + len(kwargs_json)
    limit = policy("MAX_PAYLOAD_BYTES")
    if size > limit:
        raise ValueError(f"payload is {size} bytes, over the {limit}-byte limit")
    return args_json, kwargs_json


def _job_from(n: NewJob, now: datetime) -> Job:
    """The Job a new row will be, built without Model.__init__: for a bulk enqueue its
    per-field defaults and init signals cost more than the INSERT. Every column is set here
    (tests/jobqueue/test_store.py checks the list against the model's fields)."""
    job = Job.__new__(Job)
    job._state = ModelState()
    job.__dict__.update(
        id=None,
        task_path=n.task_path,
        args=list(n.args),
        kwargs=dict(n.kwargs),
        queue_name=n.queue_name,
        priority=n.priority,
        backend=n.backend,
        idempotency_key=n.idempotency_key,
        state=JobState.READY,
        run_after=n.run_after or now,
        attempts=0,
        max_attempts=n.max_attempts,
        lease_token=None,
        locked_until=None,
        locked_by=None,
        worker_ids=[],
        enqueued_at=now,
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
        errors=[],
        return_value=None,
        replayed_from_id=None,
    )
    job.encoded_payload = n.encoded or check_payload(job.args, job.kwargs)
    return job


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
    dialect = _dialect(using)
    arguments = {
        "worker_id": worker_id,
        "queues": list(queues) if queues else None,
        "limit": limit,
        "now": now,
        "lease_until": now + timedelta(seconds=lease_seconds),
    }
    if not sweep:
        # One statement, atomic by itself: no BEGIN/COMMIT round trips around it.
        return dialect.claim(connections[using], **arguments) if limit > 0 else []
    with transaction.atomic(using=using):
        sweep_expired(now=now, using=using, dead=swept_dead)
        return dialect.claim(connections[using], **arguments) if limit > 0 else []


def sweep_expired(
    *, now: datetime | None = None, using: str = "default", dead: list[Job] | None = None
) -> int:
    now = now or timezone.now()
    with transaction.atomic(using=using):
        expired = list(
            Job.objects.using(using)
            .lease_expired(now)
            .select_for_update(skip_locked=True)
            .order_by("locked_until")[:SWEEP_LIMIT]
        )
        for job in expired:
            error = error_entry(
                job,
                class_path="jobqueue.errors.LeaseExpired",
                message=f"lease held by {job.locked_by} expired at {job.locked_until.isoformat()}",
                traceback="",
                now=now,
            )
            retry = job.attempts < job.max_attempts
            _retire(
                job,
                error,
                retry_at=now if retry else None,
                now=now,
                using=using,
                require_live_lease=False,
            )
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
    return len(expired)


MAX_MESSAGE_CHARS = 4_000
CLASS_PATH_CHARS = DeadLetter._meta.get_field("error_class").max_length
MAX_TRACEBACK_CHARS = 64_000


def storable_text(text: str, limit: int) -> str:
    """Text any database column takes: no NUL (PostgreSQL refuses it), no lone surrogates
    (undecodable bytes in an exception message), and bounded, keeping the end of a traceback."""
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limit:
        # The marker counts against the limit (a column may be exactly that wide); the number
        # it prints never has more digits than len(text).
        keep = max(limit - len(f"[{len(text)} characters cut]\n"), 0)
        text = f"[{len(text) - keep} characters cut]\n" + text[len(text) - keep :]
        text = text[-limit:] if len(text) > limit else text
    return text


def error_entry(job: Job, *, class_path: str, message: str, traceback: str, now: datetime) -> dict:
    return {
        "attempt": job.attempts,
        "at": now.isoformat(),
        "worker_id": job.locked_by,
        # A class path goes to a 255-character column (DeadLetter.error_class) and, like the
        # message, may hold anything (a class made with type()): a failure must always store.
        "exception_class_path": storable_text(class_path, CLASS_PATH_CHARS),
        "message": storable_text(message, MAX_MESSAGE_CHARS),
        "traceback": storable_text(traceback, MAX_TRACEBACK_CHARS),
    }


def _lease_guard(job: Job, now: datetime, using: str, *, live: bool = True):
    qs = Job.objects.using(using).filter(
        pk=job.pk, state=JobState.RUNNING, lease_token=job.lease_token
    )
    return qs.filter(locked_until__gt=now) if live else qs


def acknowledge(
    done: Sequence[tuple[Job, object]], *, now: datetime | None = None, using: str = "default"
) -> set[int]:
    """Mark finished jobs done in one statement; returns the ids whose lease was still ours.

    A value neither database can store (storable_json) raises DataError before any SQL, as the
    database would for what only it refuses: nothing is acknowledged, and the caller can store
    the others without that one.
    """
    if not done:
        return set()
    now = now or timezone.now()
    dialect = _dialect(using)
    rows = []
    for job, value in done:
        try:
            rows.append((job.pk, job.lease_token, storable_json(value, "the return value")))
        except (TypeError, ValueError) as exc:
            raise DataError(f"job {job.pk}: {exc}") from exc
    replayed = [job.pk for job, _ in done if job.replayed_from_id]
    # PostgreSQL acknowledges the batch in one statement; only replayed jobs need a second
    # statement (their dead letters) in the same transaction.
    with _atomic_if(replayed or dialect.LOOPS, using):
        acked = dialect.acknowledge(connections[using], rows, now=now)
        replayed = [pk for pk in replayed if pk in acked]
        if replayed:
            DeadLetter.objects.using(using).filter(
                replay_job_id__in=replayed, state=DeadLetterState.REPLAYING
            ).update(state=DeadLetterState.REPLAYED)
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
    if not jobs:
        return set()
    now = now or timezone.now()
    until = now + timedelta(seconds=lease_seconds)
    dialect = _dialect(using)
    with _atomic_if(dialect.LOOPS, using):
        kept = dialect.extend(
            connections[using], [(job.pk, job.lease_token) for job in jobs], now=now, until=until
        )
    for job in jobs:
        if job.pk in kept:
            job.locked_until = until
    return kept


def fail(
    job: Job,
    error: dict,
    *,
    retry_at: datetime | None,
    now: datetime | None = None,
    using: str = "default",
) -> bool:
    """Record a failed attempt: ready again at `retry_at`, or dead-lettered when it is None.

    Returns False (and changes nothing) if the lease is no longer ours.
    """
    now = now or timezone.now()
    with transaction.atomic(using=using):
        return _retire(job, error, retry_at=retry_at, now=now, using=using)


def _retire(job, error, *, retry_at, now, using, require_live_lease=True) -> bool:
    errors = [*job.errors, error]
    guard = _lease_guard(job, now, using, live=require_live_lease)
    cleared = {"lease_token": None, "locked_until": None, "locked_by": None, "errors": errors}
    if retry_at is not None:
        return guard.update(state=JobState.READY, run_after=retry_at, **cleared) == 1
    if guard.update(state=JobState.DEAD, finished_at=now, **cleared) != 1:
        return False
    job.errors = errors
    _bury(job, now=now, using=using)
    return True


def _bury(job: Job, *, now: datetime, using: str) -> DeadLetter:
    """Write the dead letter in the transaction that retires the job."""
    last = job.errors[-1]
    fields = {
        "attempts": job.attempts,
        "last_error": last["message"] or last["exception_class_path"],
        "error_class": last["exception_class_path"],
        "traceback": last["traceback"],
        "dead_lettered_at": now,
        "state": DeadLetterState.PENDING,
    }
    if job.replayed_from_id:
        letter = DeadLetter.objects.using(using).select_for_update().get(pk=job.replayed_from_id)
        for name, value in fields.items():
            setattr(letter, name, value)
        letter.errors = [*letter.errors, *job.errors]
        letter.save(using=using, update_fields=[*fields, "errors"])
        return letter
    return DeadLetter.objects.using(using).create(
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
        first_failed_at=datetime.fromisoformat(job.errors[0]["at"]),
        **fields,
    )


def release(jobs: Sequence[Job], *, now: datetime | None = None, using: str = "default") -> int:
    """Give leases back on graceful shutdown: claimable at once, the attempt not counted."""
    now = now or timezone.now()
    released = 0
    with transaction.atomic(using=using):
        for job in jobs:
            released += _lease_guard(job, now, using).update(
                state=JobState.READY,
                run_after=now,
                attempts=max(job.attempts - 1, 0),
                worker_ids=job.worker_ids[:-1],
                lease_token=None,
                locked_until=None,
                locked_by=None,
            )
    return released


# Dead letters: the operations a console calls. Permission checks and the audit log belong to
# the caller (deadletters.services), which wraps these in its own transaction.

SKIP_REASONS = {
    DeadLetterState.REPLAYING: "an earlier replay is still pending",
    DeadLetterState.REPLAYED: "already replayed successfully",
    DeadLetterState.DISCARDED: "discarded",
}
SKIP_KEY_HELD = "a live job already holds its idempotency key"
SKIP_MISSING = "no such dead letter"


@dataclass
class Outcome:
    """What a dead-letter operation did: `done` maps ids to the new job (None for a discard)."""

    done: dict[int, Job | None] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    # Replays that made no job of ours: the external task id (django-q2's) per letter id.
    refs: dict[int, str] = field(default_factory=dict)


def replay(
    dead_letter_ids: Iterable[int], *, now: datetime | None = None, using: str = "default"
) -> Outcome:
    """Make each pending dead letter a new ready job with the same task, payload and key.

    The new job gets a fresh attempt budget and points back at its dead letter, which becomes
    'replaying' until that job is done (→ 'replayed') or dies again (→ 'pending', replays kept).
    Items not pending are skipped with the reason; nothing is replayed twice concurrently.

    Outbox dead letters (source "outbox") make no job: their message row becomes unpublished
    again, same message id (store/outbox.py republish); done maps them to None.

    django-q2 dead letters (source "django_q2") make no job either: their task is enqueued to
    django-q2 again from its kept Failure row (store/django_q2.py requeue); done maps them to
    None and refs to the new django-q2 task id.
    """
    from jobqueue.store import django_q2 as q2_store
    from jobqueue.store import outbox as outbox_store

    own_sources = (outbox_store.SOURCE, q2_store.SOURCE)

    now = now or timezone.now()
    ids = list(dict.fromkeys(dead_letter_ids))
    outcome = Outcome()
    with transaction.atomic(using=using):
        letters = {
            dl.pk: dl
            for dl in DeadLetter.objects.using(using)
            .select_for_update()
            .filter(pk__in=ids)
            .order_by("pk")
        }
        keys = {
            dl.idempotency_key
            for dl in letters.values()
            if dl.idempotency_key and dl.source not in own_sources
        }
        held = (
            set(
                Job.objects.using(using)
                .filter(idempotency_key__in=keys)
                .exclude(state=JobState.DEAD)
                .values_list("idempotency_key", flat=True)
            )
            if keys
            else set()
        )
        todo = []
        outbox_todo = []
        q2_todo = []
        for pk in ids:
            letter = letters.get(pk)
            if letter is None:
                outcome.skipped[pk] = SKIP_MISSING
            elif letter.state != DeadLetterState.PENDING:
                outcome.skipped[pk] = SKIP_REASONS[letter.state]
            elif letter.source == outbox_store.SOURCE:
                outbox_todo.append(letter)
            elif letter.source == q2_store.SOURCE:
                q2_todo.append(letter)
            elif letter.idempotency_key and letter.idempotency_key in held:
                outcome.skipped[pk] = SKIP_KEY_HELD
            else:
                if letter.idempotency_key:
                    held.add(letter.idempotency_key)
                todo.append(letter)
        jobs = Job.objects.using(using).bulk_create(
            [
                Job(
                    task_path=dl.task_path,
                    args=dl.args,
                    kwargs=dl.kwargs,
                    queue_name=dl.queue_name,
                    priority=dl.priority,
                    backend=dl.backend,
                    idempotency_key=dl.idempotency_key,
                    max_attempts=dl.max_attempts,
                    run_after=now,
                    enqueued_at=now,
                    state=JobState.READY,
                    replayed_from=dl,
                )
                for dl in todo
            ]
        )
        for letter, job in zip(todo, jobs, strict=True):
            letter.state = DeadLetterState.REPLAYING
            letter.replays += 1
            letter.last_replayed_at = now
            letter.replay_job = job
            outcome.done[letter.pk] = job
        republished = outbox_store.republish(outbox_todo, now=now, using=using)
        outbox_done = []
        for letter in outbox_todo:
            if republished[letter.pk] is not None:
                outcome.skipped[letter.pk] = republished[letter.pk]
                continue
            outcome.done[letter.pk] = None
            # Which replay of the message this is: the letter follows its latest one, so the
            # audit can tell "published" from "died again" per replay (as for django-q2).
            ref = f"outbox:{letter.replays + 1}"
            outcome.refs[letter.pk] = letter.replay_ref = ref
            outbox_done.append(letter)
        for ref, pks in _group_by_ref(outbox_done).items():
            DeadLetter.objects.using(using).filter(pk__in=pks).update(replay_ref=ref)
        for pk, (task_id, reason) in q2_store.requeue(q2_todo, now=now, using=using).items():
            if reason is not None:
                outcome.skipped[pk] = reason
                continue
            outcome.done[pk] = None
            outcome.refs[pk] = task_id
            outbox_done.append(letters[pk])
        _dialect(using).mark_replaying(
            connections[using],
            [(letter.pk, letter.replay_job.pk) for letter in todo]
            + [(letter.pk, None) for letter in outbox_done],
            now=now,
        )
        _dialect(using).notify(connections[using], {job.queue_name for job in jobs})
    return outcome


def _group_by_ref(letters) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for letter in letters:
        groups.setdefault(letter.replay_ref, []).append(letter.pk)
    return groups


def discard(
    dead_letter_ids: Iterable[int], *, now: datetime | None = None, using: str = "default"
) -> Outcome:
    """Resolve pending dead letters without replay. Rows are kept, marked discarded."""
    now = now or timezone.now()
    ids = list(dict.fromkeys(dead_letter_ids))
    outcome = Outcome()
    with transaction.atomic(using=using):
        letters = {
            dl.pk: dl
            for dl in DeadLetter.objects.using(using).select_for_update().filter(pk__in=ids)
        }
        todo = []
        for pk in ids:
            letter = letters.get(pk)
            if letter is None:
                outcome.skipped[pk] = SKIP_MISSING
            elif letter.state != DeadLetterState.PENDING:
                outcome.skipped[pk] = SKIP_REASONS[letter.state]
            else:
                todo.append(pk)
                outcome.done[pk] = None
        DeadLetter.objects.using(using).filter(pk__in=todo).update(
            state=DeadLetterState.DISCARDED, discarded_at=now
        )
    return outcome


# Worker registry and per-minute counters: health figures, written on the worker's heartbeat.

COUNTERS_UPSERT = """
INSERT INTO jobqueue_jobcounter
    (minute, queue_name, task_path, succeeded, failed, dead, last_success_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (minute, queue_name, task_path) DO UPDATE SET
    succeeded = jobqueue_jobcounter.succeeded + excluded.succeeded,
    failed = jobqueue_jobcounter.failed + excluded.failed,
    dead = jobqueue_jobcounter.dead + excluded.dead,
    last_success_at = CASE
        WHEN excluded.last_success_at IS NULL THEN jobqueue_jobcounter.last_success_at
        WHEN jobqueue_jobcounter.last_success_at IS NULL
          OR excluded.last_success_at > jobqueue_jobcounter.last_success_at
        THEN excluded.last_success_at
        ELSE jobqueue_jobcounter.last_success_at
    END
"""


@dataclass
class Tally:
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    last_success_at: datetime | None = None


def record_worker(
    *,
    worker_id: str,
    host: str,
    pid: int,
    queues: Sequence[str] | None,
    concurrency: int,
    started_at: datetime,
    succeeded: int,
    failed: int,
    current_job_ids: Sequence[int],
    tallies: dict[tuple[datetime, str, str], Tally],
    now: datetime | None = None,
    using: str = "default",
) -> None:
    """Upsert the worker's record and add its tallies to the per-minute counters, atomically."""
    now = now or timezone.now()
    connection = connections[using]
    ts = connection.ops.adapt_datetimefield_value
    with transaction.atomic(using=using):
        WorkerRecord.objects.using(using).update_or_create(
            worker_id=worker_id,
            defaults={
                "host": host,
                "pid": pid,
                "queues": list(queues or []),
                "concurrency": concurrency,
                "started_at": started_at,
                "last_heartbeat_at": now,
                "jobs_succeeded": succeeded,
                "jobs_failed": failed,
                "current_job_ids": list(current_job_ids),
            },
        )
        if tallies:
            with connection.cursor() as cursor:
                cursor.executemany(
                    COUNTERS_UPSERT,
                    [
                        (
                            ts(minute),
                            queue,
                            task,
                            t.succeeded,
                            t.failed,
                            t.dead,
                            ts(t.last_success_at) if t.last_success_at else None,
                        )
                        for (minute, queue, task), t in tallies.items()
                    ],
                )


def forget_worker(worker_id: str, *, using: str = "default") -> None:
    WorkerRecord.objects.using(using).filter(worker_id=worker_id).delete()
