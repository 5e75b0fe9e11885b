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

The SQL is in the dialect modules (postgresql.py, sqlite.py: OUTBOX_*), the statements both
share in sql_common.py; the lease lifecycle is jobqueue.store.leases, as for jobs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.utils import timezone

from jobqueue.models import DeadLetter, OutboxMessage, OutboxState

from . import dead_letters, dialects, leases
from .jobs import enqueue_many
from .leases import OUTBOX, expired_entry
from .postgresql import OUTBOX_NOTIFY_CHANNEL
from .sql_common import OUTBOX_MARK_PUBLISHED

SOURCE = "outbox"
NOTIFY_CHANNEL = OUTBOX_NOTIFY_CHANNEL


def _ts(using: str, value: datetime):
    return connections[using].ops.adapt_datetimefield_value(value)


def insert(
    topic: str, payload_json: str, *, key: str | None, now: datetime, using: str = "default"
) -> int:
    """One pending row in the caller's transaction (and, on PostgreSQL, a NOTIFY at its commit)."""
    params = {"topic": topic, "key": key, "payload": payload_json, "now": _ts(using, now)}
    return dialects.of(using).outbox_insert(connections[using], params)


def enqueue_jobs(news, *, now: datetime | None = None, using: str = "default") -> None:
    """Insert the `jobs` destination's fan-out; a job whose key a live job holds is skipped.

    Runs in the caller's transaction (the one that marks the messages published).
    """
    if news:
        enqueue_many(news, now=now, using=using)


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
        messages = dialects.of(using).outbox_claim(connections[using], params)
    return sorted(messages, key=lambda m: m.pk)


def error_entry(
    message: OutboxMessage, *, class_path: str, text: str, traceback: str, now: datetime
) -> dict:
    return leases.error_entry(
        message, class_path=class_path, message=text, traceback=traceback, now=now
    )


def sweep_expired(*, now: datetime | None = None, using: str = "default") -> int:
    """Expired leases → pending again, the lost attempt recorded as LeaseExpired.

    The attempt stays counted: a message that keeps killing its relay runs out of attempts and
    the relay that claims it next dead-letters it instead of publishing.
    """
    now = now or timezone.now()
    with transaction.atomic(using=using, savepoint=False):
        expired = OUTBOX.expired(now, using)
        for message in expired:
            errors = [*message.errors, expired_entry(message, now)]
            OUTBOX.wait(message, errors, at=now, now=now, using=using, live=False)
    return len(expired)


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
            cursor.execute(_ids_sql(OUTBOX_MARK_PUBLISHED, ids), [ts, *ids, token, ts])
            for message_id, letter_id in cursor.fetchall():
                marked.add(message_id)
                if letter_id is not None:
                    letters.append(letter_id)
        if letters:
            dead_letters.settle_replayed(using, pk__in=letters)
    return marked


def extend_leases(
    messages: Sequence[OutboxMessage],
    *,
    lease_seconds: float,
    now: datetime | None = None,
    using: str = "default",
) -> set[int]:
    """Push locked_until forward for leases still ours; returns the ids kept."""
    return OUTBOX.extend(
        messages, lease_seconds=lease_seconds, now=now or timezone.now(), using=using
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
        return OUTBOX.wait(message, [*message.errors, error], at=retry_at, now=now, using=using)


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
        if not OUTBOX.kill(message, errors, now=now, using=using):
            return None
        message.errors = errors
        letter = dead_letters.bury(
            dead_letters.Burial(
                error,
                attempts=message.attempts,
                now=now,
                # Died again after a replay (the letter stays linked to its message).
                replayed=message.dead_letter_id,
                renewed=("max_attempts",),
                letter=dead_letters.NewLetter(
                    source=SOURCE,
                    task_path=f"outbox:{message.topic}",
                    queue_name=SOURCE,
                    args=[],
                    kwargs=message.payload,
                    idempotency_key=message.message_id,
                    max_attempts=max_attempts,
                    errors=errors,
                ),
            ),
            using=using,
        )
        if message.dead_letter_id != letter.pk:
            OutboxMessage.objects.using(using).filter(pk=message.pk).update(dead_letter=letter)
            message.dead_letter = letter
    return letter


def release(
    messages: Sequence[OutboxMessage], *, now: datetime | None = None, using: str = "default"
) -> int:
    """Give leases back on a graceful stop: claimable at once, the attempt not counted."""
    return OUTBOX.release(messages, now=now or timezone.now(), using=using)


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
