"""Rows of the outbox table (jobqueue_outbox): insert, claim, mark, extend, retry, bury, prune.

Lifecycle of a row (jobqueue_outbox):

    pending ──claim──▶ leased ──mark_published──▶ published ──prune (after retention)──▶ gone
       ▲                 │ retry (transient, attempts left) → pending at available_at
       │                 │ bury (permanent / exhausted)     → dead + DeadLetter(source="outbox")
       │                 │ release (graceful stop)          → pending, attempt not counted
       │                 └ lease expired → swept → pending (attempt counted, LeaseExpired error)
       └──── replay of its dead letter (store.sources.outbox_letters) ◀── dead

Every transition out of `leased` is guarded like a job's: `state = 'leased' AND lease_token =
the claimer's token AND locked_until > now`, and its row count is checked. One claim writes one
token on all the rows it leased.

Per-key ordering lives in the claim: a message with a key is claimable only if no earlier
message with the same key is pending or leased, so a key has at most one message in flight and
they go out in id order. A dead message does not hold its key back (the key's later messages
flow on; replaying the dead one publishes it after them) — one poison message must not stop an
order's whole stream until an operator acts.

SQL that differs per database (the insert and the claim) is written once per dialect below; the
guarded updates are the same text on both.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.utils import timezone

from jobqueue.models import DeadLetter, OutboxMessage, OutboxState

from .dead_letters import pending_fields, return_to_pending, settle_replayed

SOURCE = "outbox"
NOTIFY_CHANNEL = "jobqueue_outbox"
SWEEP_LIMIT = 100
# Advisory locks in PostgreSQL's two-int key space ('outb'), apart from single-bigint users.
KEY_LOCK_SPACE = 0x6F757462


class PostgreSQL:
    # Same-key publishers take a transaction-scoped advisory lock on the key before the insert,
    # so their ids are allocated in commit order: without it a transaction that took id 10 and
    # commits after the one that took id 11 would let the relay publish 11 first.
    INSERT = """
    WITH message AS (
        INSERT INTO jobqueue_outbox
            (topic, "key", payload, state, created_at, available_at, attempts, errors)
        SELECT %(topic)s, %(key)s, %(payload)s::jsonb, 'pending', %(now)s, %(now)s, 0, '[]'
        {serialize}
        RETURNING id
    )
    SELECT id, pg_notify(%(channel)s, '') FROM message
    """
    SERIALIZE = "FROM (SELECT pg_advisory_xact_lock(%(space)s, hashtext(%(key)s))) AS serialized"

    # MATERIALIZED: the locking subquery runs exactly once (see store/postgresql.py CLAIM).
    CLAIM = """
    WITH picked AS MATERIALIZED (
        SELECT m.id FROM jobqueue_outbox AS m
        WHERE m.state = 'pending' AND m.available_at <= %(now)s
          AND (m."key" IS NULL OR NOT EXISTS (
                SELECT 1 FROM jobqueue_outbox AS earlier
                WHERE earlier."key" = m."key" AND earlier.id < m.id
                  AND earlier.state IN ('pending', 'leased')))
        ORDER BY m.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    UPDATE jobqueue_outbox AS m SET
        state = 'leased',
        attempts = m.attempts + 1,
        lease_token = %(token)s,
        locked_until = %(lease_until)s,
        locked_by = %(relay_id)s,
        last_attempted_at = %(now)s
    FROM picked
    WHERE m.id = picked.id
    RETURNING m.*
    """

    # The `jobs` destination's fan-out: every job of a batch in one statement (a keyed insert
    # per job was 80% of the relay's time). Same conflict target as store.enqueue's keyed insert,
    # so a job that already holds the key (a republish) makes the row a no-op.
    INSERT_JOBS = """
    INSERT INTO jobqueue_job (
        task_path, queue_name, priority, backend, args, kwargs, idempotency_key, state,
        run_after, attempts, max_attempts, worker_ids, enqueued_at, errors
    )
    SELECT v.task_path, v.queue_name, v.priority, v.backend, v.args::jsonb, v.kwargs::jsonb,
           v.idempotency_key, 'ready', %(now)s, 0, v.max_attempts, '[]', %(now)s, '[]'
    FROM unnest(
        %(task_paths)s::text[], %(queue_names)s::text[], %(priorities)s::smallint[],
        %(backends)s::text[], %(args)s::text[], %(kwargs)s::text[], %(keys)s::text[],
        %(max_attempts)s::integer[]
    ) AS v(task_path, queue_name, priority, backend, args, kwargs, idempotency_key, max_attempts)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND NOT (state = 'dead')
    DO NOTHING
    """

    @classmethod
    def insert_jobs(cls, connection, news, now) -> None:
        from jobqueue import store
        from jobqueue.store import postgresql

        # No check_payload here: the payload passed publish()'s size check, and each message's
        # jobs share one serialisation.
        rows, dumped = [], {}
        for n in news:
            kwargs = dumped.get(id(n.kwargs))
            if kwargs is None:
                kwargs = dumped[id(n.kwargs)] = store.dumps(n.kwargs)
            rows.append(
                (
                    n.task_path,
                    n.queue_name,
                    n.priority,
                    n.backend,
                    store.dumps(list(n.args)) if n.args else "[]",
                    kwargs,
                    n.idempotency_key,
                    n.max_attempts,
                )
            )
        columns = list(zip(*rows, strict=True))
        names = (
            "task_paths", "queue_names", "priorities", "backends", "args", "kwargs", "keys",
            "max_attempts",
        )  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute(
                cls.INSERT_JOBS, {"now": now, **dict(zip(names, map(list, columns), strict=True))}
            )
        postgresql.notify(connection, {n.queue_name for n in news})

    @classmethod
    def insert(cls, connection, params) -> int:
        sql = cls.INSERT.format(serialize=cls.SERIALIZE if params["key"] is not None else "")
        with connection.cursor() as cursor:
            cursor.execute(sql, {**params, "channel": NOTIFY_CHANNEL, "space": KEY_LOCK_SPACE})
            return cursor.fetchone()[0]

    @classmethod
    def claim(cls, connection, params) -> list[OutboxMessage]:
        return list(OutboxMessage.objects.raw(cls.CLAIM, params))


class SQLite:
    """Every store transaction is BEGIN IMMEDIATE (settings), so a claim holds the single write
    lock from its first read: ids follow commit order and no two relays lease the same row."""

    INSERT = """
    INSERT INTO jobqueue_outbox
        (topic, "key", payload, state, created_at, available_at, attempts, errors)
    VALUES (%(topic)s, %(key)s, %(payload)s, 'pending', %(now)s, %(now)s, 0, '[]')
    RETURNING id
    """

    CLAIM = """
    UPDATE jobqueue_outbox SET
        state = 'leased',
        attempts = attempts + 1,
        lease_token = %(token)s,
        locked_until = %(lease_until)s,
        locked_by = %(relay_id)s,
        last_attempted_at = %(now)s
    WHERE id IN (
        SELECT m.id FROM jobqueue_outbox AS m
        WHERE m.state = 'pending' AND m.available_at <= %(now)s
          AND (m."key" IS NULL OR NOT EXISTS (
                SELECT 1 FROM jobqueue_outbox AS earlier
                WHERE earlier."key" = m."key" AND earlier.id < m.id
                  AND earlier.state IN ('pending', 'leased')))
        ORDER BY m.id
        LIMIT %(limit)s
    )
    RETURNING *
    """

    @classmethod
    def insert(cls, connection, params) -> int:
        with connection.cursor() as cursor:
            cursor.execute(cls.INSERT, params)
            return cursor.fetchone()[0]

    @classmethod
    def claim(cls, connection, params) -> list[OutboxMessage]:
        return list(OutboxMessage.objects.raw(cls.CLAIM, params))

    @classmethod
    def insert_jobs(cls, connection, news, now) -> None:
        from jobqueue import store

        # No round trips to save under SQLite's write lock: the store's own enqueue.
        store.enqueue_many(news, now=now, using=connection.alias)


# The guarded batch updates, one text for both databases.
MARK_PUBLISHED = """
UPDATE jobqueue_outbox SET
    state = 'published', published_at = %s, lease_token = NULL, locked_until = NULL,
    locked_by = NULL
WHERE id IN ({ids}) AND state = 'leased' AND lease_token = %s AND locked_until > %s
RETURNING id, dead_letter_id
"""

EXTEND = """
UPDATE jobqueue_outbox SET locked_until = %s
WHERE id IN ({ids}) AND state = 'leased' AND lease_token = %s AND locked_until > %s
RETURNING id
"""


def _dialect(using: str):
    vendor = connections[using].vendor
    if vendor == "postgresql":
        return PostgreSQL
    if vendor == "sqlite":
        return SQLite
    raise NotImplementedError(f"the outbox supports PostgreSQL and SQLite, not {vendor}")


def _ts(using: str, value: datetime):
    return connections[using].ops.adapt_datetimefield_value(value)


def insert(
    topic: str, payload_json: str, *, key: str | None, now: datetime, using: str = "default"
) -> int:
    """One pending row in the caller's transaction (and, on PostgreSQL, a NOTIFY at its commit)."""
    params = {"topic": topic, "key": key, "payload": payload_json, "now": _ts(using, now)}
    return _dialect(using).insert(connections[using], params)


def enqueue_jobs(news, *, now: datetime | None = None, using: str = "default") -> None:
    """Insert the `jobs` destination's fan-out; a job whose key a live job holds is skipped.

    Runs in the caller's transaction (the one that marks the messages published).
    """
    if news:
        _dialect(using).insert_jobs(connections[using], list(news), now or timezone.now())


def claim(
    *,
    relay_id: str,
    limit: int,
    lease_seconds: float,
    now: datetime | None = None,
    using: str = "default",
    sweep: bool = True,
) -> list[OutboxMessage]:
    """Lease up to `limit` publishable messages in id order under one fresh token.

    Short transaction: the network calls happen after it commits. Expired leases are swept
    first (when `sweep`), so a crashed relay's messages become claimable again.
    """
    now = now or timezone.now()
    with transaction.atomic(using=using):
        if sweep:
            sweep_expired(now=now, using=using)
        if limit <= 0:
            return []
        params = {
            "now": _ts(using, now),
            "lease_until": _ts(using, now + timedelta(seconds=lease_seconds)),
            "limit": limit,
            "token": uuid.uuid4().hex,
            "relay_id": relay_id,
        }
        messages = _dialect(using).claim(connections[using], params)
    return sorted(messages, key=lambda m: m.pk)


def error_entry(
    message: OutboxMessage, *, class_path: str, text: str, traceback: str, now: datetime
) -> dict:
    from jobqueue.store import MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS, storable_text

    return {
        "attempt": message.attempts,
        "at": now.isoformat(),
        "worker_id": message.locked_by,
        "exception_class_path": class_path,
        "message": storable_text(text, MAX_MESSAGE_CHARS),
        "traceback": storable_text(traceback, MAX_TRACEBACK_CHARS),
    }


def sweep_expired(*, now: datetime | None = None, using: str = "default") -> int:
    """Expired leases → pending again, the lost attempt recorded as LeaseExpired.

    The attempt stays counted: a message that keeps killing its relay runs out of attempts and
    the relay that claims it next dead-letters it instead of publishing.
    """
    now = now or timezone.now()
    with transaction.atomic(using=using, savepoint=False):
        expired = list(
            OutboxMessage.objects.using(using)
            .filter(state=OutboxState.LEASED, locked_until__lte=now)
            .select_for_update(skip_locked=True)
            .order_by("locked_until")[:SWEEP_LIMIT]
        )
        for message in expired:
            entry = error_entry(
                message,
                class_path="jobqueue.errors.LeaseExpired",
                text=f"lease held by {message.locked_by} expired at "
                f"{message.locked_until.isoformat()}",
                traceback="",
                now=now,
            )
            OutboxMessage.objects.using(using).filter(
                pk=message.pk, state=OutboxState.LEASED, lease_token=message.lease_token
            ).update(
                state=OutboxState.PENDING,
                available_at=now,
                errors=[*message.errors, entry],
                **_NO_LEASE,
            )
    return len(expired)


_NO_LEASE = {"lease_token": None, "locked_until": None, "locked_by": None}


def _ids_sql(sql: str, ids: Sequence[int]) -> str:
    return sql.format(ids=", ".join(["%s"] * len(ids)))


def _by_token(messages: Sequence[OutboxMessage]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for message in messages:
        groups.setdefault(message.lease_token, []).append(message.pk)
    return groups


def mark_published(
    messages: Sequence[OutboxMessage], *, now: datetime | None = None, using: str = "default"
) -> set[int]:
    """Published, for the messages whose lease is still ours; returns those ids.

    A replayed message's dead letter becomes 'replayed' in the same transaction.
    """
    if not messages:
        return set()
    now = now or timezone.now()
    ts = _ts(using, now)
    marked: set[int] = set()
    letters: list[int] = []
    with transaction.atomic(using=using, savepoint=False), connections[using].cursor() as cursor:
        for token, ids in _by_token(messages).items():
            cursor.execute(_ids_sql(MARK_PUBLISHED, ids), [ts, *ids, token, ts])
            for message_id, letter_id in cursor.fetchall():
                marked.add(message_id)
                if letter_id is not None:
                    letters.append(letter_id)
        if letters:
            settle_replayed(using, pk__in=letters)
    return marked


def extend_leases(
    messages: Sequence[OutboxMessage],
    *,
    lease_seconds: float,
    now: datetime | None = None,
    using: str = "default",
) -> set[int]:
    """Push locked_until forward for leases still ours; returns the ids kept."""
    if not messages:
        return set()
    now = now or timezone.now()
    until = now + timedelta(seconds=lease_seconds)
    kept: set[int] = set()
    with transaction.atomic(using=using, savepoint=False), connections[using].cursor() as cursor:
        for token, ids in _by_token(messages).items():
            cursor.execute(_ids_sql(EXTEND, ids), [_ts(using, until), *ids, token, _ts(using, now)])
            kept.update(row[0] for row in cursor.fetchall())
    for message in messages:
        if message.pk in kept:
            message.locked_until = until
    return kept


def _guard(message: OutboxMessage, now: datetime, using: str):
    return OutboxMessage.objects.using(using).filter(
        pk=message.pk,
        state=OutboxState.LEASED,
        lease_token=message.lease_token,
        locked_until__gt=now,
    )


def retry(
    message: OutboxMessage,
    error: dict,
    *,
    retry_at: datetime,
    now: datetime | None = None,
    using: str = "default",
) -> bool:
    """A failed attempt with attempts left: pending again, not claimable before `retry_at`.

    The message's key stays blocked meanwhile: later messages with that key wait for it.
    """
    now = now or timezone.now()
    with transaction.atomic(using=using):
        return (
            _guard(message, now, using).update(
                state=OutboxState.PENDING,
                available_at=retry_at,
                errors=[*message.errors, error],
                **_NO_LEASE,
            )
            == 1
        )


def bury(
    message: OutboxMessage,
    error: dict,
    *,
    max_attempts: int,
    now: datetime | None = None,
    using: str = "default",
) -> DeadLetter | None:
    """Permanent failure or attempts exhausted: dead, with a DeadLetter the console lists.

    Returns None (and changes nothing) if the lease is no longer ours.
    """
    now = now or timezone.now()
    errors = [*message.errors, error]
    with transaction.atomic(using=using):
        if (
            _guard(message, now, using).update(state=OutboxState.DEAD, errors=errors, **_NO_LEASE)
            != 1
        ):
            return None
        message.errors = errors
        fields = pending_fields(
            error, attempts=message.attempts, max_attempts=max_attempts, now=now
        )
        letter = None
        if message.dead_letter_id:
            letter = (
                DeadLetter.objects.using(using)
                .select_for_update()
                .filter(pk=message.dead_letter_id)
                .first()
            )
        if letter is not None:
            # Died again after a replay.
            return_to_pending(letter, fields, errors, using=using)
        else:
            letter = DeadLetter.objects.using(using).create(
                source=SOURCE,
                task_path=f"outbox:{message.topic}",
                queue_name=SOURCE,
                args=[],
                kwargs=message.payload,
                idempotency_key=message.message_id,
                errors=errors,
                first_failed_at=datetime.fromisoformat(errors[0]["at"]),
                **fields,
            )
            OutboxMessage.objects.using(using).filter(pk=message.pk).update(dead_letter=letter)
            message.dead_letter = letter
    return letter


def release(
    messages: Sequence[OutboxMessage], *, now: datetime | None = None, using: str = "default"
) -> int:
    """Give leases back on a graceful stop: claimable at once, the attempt not counted."""
    now = now or timezone.now()
    released = 0
    with transaction.atomic(using=using):
        for message in messages:
            released += _guard(message, now, using).update(
                state=OutboxState.PENDING,
                available_at=now,
                attempts=max(message.attempts - 1, 0),
                **_NO_LEASE,
            )
    return released


def prune(
    *,
    older_than: timedelta,
    now: datetime | None = None,
    chunk: int = 5_000,
    using: str = "default",
) -> int:
    """Delete published rows older than the retention, in chunks; unpublished rows never."""
    now = now or timezone.now()
    cutoff = now - older_than
    deleted = 0
    while True:
        with transaction.atomic(using=using):
            ids = list(
                OutboxMessage.objects.using(using)
                .filter(state=OutboxState.PUBLISHED, published_at__lt=cutoff)
                .order_by("published_at")
                .values_list("pk", flat=True)[:chunk]
            )
            if not ids:
                return deleted
            deleted += (
                OutboxMessage.objects.using(using)
                .filter(pk__in=ids, state=OutboxState.PUBLISHED)
                .delete()[0]
            )
