"""What the store asks of a database's SQL (`Dialect`), and the one for a connection (`of`).

Two dialects implement it, each a class beside its statements: `PostgreSQL` in postgresql.py and
`SQLite` in sqlite.py; what both write alike is in sql_common.py. tests/jobqueue/test_dialects.py
holds each to this protocol, member by member and signature by signature.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from importlib import import_module
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from django.db import connections

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from jobqueue.models import Job, OutboxMessage

# Imported on first use (then kept here): a process needs its own database's only.
_CLASSES = {
    "postgresql": ("jobqueue.store.postgresql", "PostgreSQL"),
    "sqlite": ("jobqueue.store.sqlite", "SQLite"),
}
_DIALECTS: dict[str, Dialect] = {}


def of(using: str) -> Dialect:
    """The dialect of the database `using` names."""
    vendor = connections[using].vendor
    dialect = _DIALECTS.get(vendor)
    if dialect is None:
        if vendor not in _CLASSES:
            raise NotImplementedError(f"jobqueue supports PostgreSQL and SQLite, not {vendor}")
        module, name = _CLASSES[vendor]
        dialect = _DIALECTS[vendor] = getattr(import_module(module), name)()
    return dialect


class Sender(Protocol):
    """A bulk enqueue's batches of plain ready jobs, in the caller's transaction: a context
    manager that flushes on a clean exit."""

    def __enter__(self) -> Sender: ...

    def __exit__(self, kind, exc, tb) -> bool: ...

    def send(self, jobs: Sequence[Job]) -> None:
        """Insert a batch (at most SEND_CHUNK jobs), or send it on while the next is built."""

    def flush(self) -> None:
        """Finish every batch sent: each job has its id; nothing is left in flight."""


@runtime_checkable
class Dialect(Protocol):
    """The statements the store runs that differ by database. Every lease-guarded statement
    changes a row only while `state` is the leased one, `lease_token` is the caller's and
    `locked_until` is after `now`; it returns (or counts) the rows it changed, so a caller
    that lost its lease changes nothing and knows it."""

    LOOPS: bool
    """Batches are one statement per row: the caller runs them in one transaction."""

    SEND_CHUNK: int
    """Jobs a bulk enqueue builds before it writes them (one batch, one sender.send)."""

    def claim(
        self,
        connection: BaseDatabaseWrapper,
        *,
        worker_id: str,
        queues: list[str] | None,
        limit: int,
        now: datetime,
        lease_until: datetime,
        excluded: list[str] | None = None,
        keys: list[str] | None = None,
    ) -> list[Job]:
        """Lease up to `limit` due ready jobs (of `queues`, none of `excluded`, none of a paused
        queue, none an earlier job of its ordering key holds back) in priority order; without
        `keys` only jobs of no concurrency key, with them those keys' within their limits and
        the keyless ones (in the caller's transaction, which holds the keys until it ends). No
        two claims lease one job; returns them best first."""

    def ready_keys(self, connection: BaseDatabaseWrapper) -> list[str]:
        """Concurrency keys with ready jobs (a bounded number): the keyed claim's `keys`."""

    def acknowledge(
        self,
        connection: BaseDatabaseWrapper,
        rows: Sequence[tuple[int, str | None, str]],
        *,
        now: datetime,
    ) -> set[int]:
        """Lease-guarded: (id, lease token, return value as stored JSON text) rows → done,
        lease cleared, and counted as succeeded in `now`'s minute (jobqueue_jobcounter) in
        the same transaction; returns the ids acknowledged."""

    def extend(
        self,
        connection: BaseDatabaseWrapper,
        table: str,
        leases: Sequence[tuple[int, str | None]],
        *,
        now: datetime,
        until: datetime,
    ) -> set[int]:
        """Lease-guarded heartbeat: (id, token) leases of `table` (sql_common.LEASED) held to
        `until`; returns the ids still leased by their token."""

    def insert_many(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[Job], *, now: datetime
    ) -> None:
        """Plain ready jobs (no key of any kind, of no replay) inserted in order, each given its
        id; on PostgreSQL in one statement with its queues' notifications."""

    def insert_keyed(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[Job], *, now: datetime
    ) -> list[int | None]:
        """Ready jobs with an idempotency key, ON CONFLICT DO NOTHING on the live-key index, in
        order; per job its id, or None where a live job (an earlier one of these) holds the key."""

    def sender(self, connection: BaseDatabaseWrapper, now: datetime) -> Sender:
        """A bulk enqueue's sender of insert_many batches."""

    def notify(self, connection: BaseDatabaseWrapper, queues: Iterable[str]) -> None:
        """Wake workers listening on these queues at commit (SQLite: nothing; workers poll)."""

    def mark_replaying(
        self,
        connection: BaseDatabaseWrapper,
        rows: Sequence[tuple[int, int | None, str | None]],
        *,
        now: datetime,
    ) -> None:
        """(letter id, new job id, replay reference) rows: each letter replaying, its replay
        counted, the job linked, the reference kept where none is given."""

    def outbox_insert(self, connection: BaseDatabaseWrapper, params: dict) -> int:
        """One pending outbox message (topic, key, payload, now); its id. Messages of one key
        get ids in commit order (PostgreSQL: a per-key lock) and wake the relay at commit."""

    def outbox_claim(self, connection: BaseDatabaseWrapper, params: dict) -> list[OutboxMessage]:
        """Lease up to `limit` available pending messages in id order under one token, each
        key's first only (sql_common.OUTBOX_KEY_IS_FREE); no two relays lease one message."""

    def among(self, column: str, ids: Sequence[int]) -> tuple[str, list]:
        """A condition true where `column` (compiled SQL) is one of `ids`, and its parameters:
        one, however many ids (jobqueue.store.id_lists.Among)."""

    def bound_transaction(self, connection: BaseDatabaseWrapper, seconds: float) -> None:
        """Bound the caller's transaction: neither its statements, lock waits nor idle pauses
        may hold others up beyond `seconds` (SQLite: its single writer already is)."""
