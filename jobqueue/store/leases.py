"""The lease lifecycle, written once for jobs and outbox messages.

A claim writes a lease (token, holder, locked_until) on the rows it takes and moves them to the
table's leased state. While the lease is live, and only then, its holder may extend it, give it
back (release), send the row back to wait (retry) or kill it (dead): each a guarded UPDATE on
`state = <leased> AND lease_token = <token> AND locked_until > now` whose row count says whether
the lease was still ours. A zero-row update means the sweep or a newer holder got there first;
the caller counts it and never overwrites the newer state. The sweep finds leases past their
`locked_until` and sends their rows back (or to dead), recording a LeaseExpired error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.db.models import Model

from jobqueue.models import Job, JobState, OutboxMessage, OutboxState

from . import dialects
from .payloads import CLASS_PATH_CHARS, MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS, storable_text

SWEEP_LIMIT = 100
LEASE_EXPIRED = "jobqueue.errors.LeaseExpired"
NO_LEASE = {"lease_token": None, "locked_until": None, "locked_by": None}


def _no_extra(row) -> dict:
    return {}


@dataclass(frozen=True)
class LeasedTable:
    """A table whose rows are leased: which states mean leased, waiting and dead, and the column
    that says when a waiting row may be claimed."""

    model: type[Model]
    table: str  # dialects name their statements for it by this
    leased: str
    waiting: str
    dead: str
    due: str
    # Columns a release also restores, given the row as claimed (a job drops its worker id).
    released: Callable[[Model], dict] = _no_extra
    # Columns a death also sets, given the time.
    died: Callable[[datetime], dict] = lambda now: {}

    def guard(self, row, now: datetime, using: str, *, live: bool = True):
        """The row while its lease is the caller's (and, when `live`, not expired)."""
        qs = self.model.objects.using(using).filter(
            pk=row.pk, state=self.leased, lease_token=row.lease_token
        )
        return qs.filter(locked_until__gt=now) if live else qs

    def expired(self, now: datetime, using: str) -> list:
        """Expired leases the caller may sweep, oldest first, locked (others' skipped)."""
        return list(
            self.model.objects.using(using)
            .filter(state=self.leased, locked_until__lte=now)
            .select_for_update(skip_locked=True)
            .order_by("locked_until")[:SWEEP_LIMIT]
        )

    def extend(
        self, rows: Sequence, *, lease_seconds: float, now: datetime, using: str
    ) -> set[int]:
        """Heartbeat: push locked_until forward for leases still ours; returns the ids kept."""
        if not rows:
            return set()
        until = now + timedelta(seconds=lease_seconds)
        dialect = dialects.of(using)
        with transaction.atomic(using=using) if dialect.LOOPS else nullcontext():
            kept = dialect.extend(
                connections[using],
                self.table,
                [(row.pk, row.lease_token) for row in rows],
                now=now,
                until=until,
            )
        for row in rows:
            if row.pk in kept:
                row.locked_until = until
        return kept

    def wait(self, row, errors: list, *, at: datetime, now: datetime, using: str, live=True):
        """Back to waiting, claimable from `at`, its errors recorded; True if the lease was ours."""
        return (
            self.guard(row, now, using, live=live).update(
                state=self.waiting, **{self.due: at}, errors=errors, **NO_LEASE
            )
            == 1
        )

    def kill(self, row, errors: list, *, now: datetime, using: str, live=True) -> bool:
        """Dead, its errors recorded; True if the lease was ours."""
        return (
            self.guard(row, now, using, live=live).update(
                state=self.dead, errors=errors, **self.died(now), **NO_LEASE
            )
            == 1
        )

    def release(self, rows: Sequence, *, now: datetime, using: str) -> int:
        """Give leases back on a graceful stop: claimable at once, the attempt not counted."""
        released = 0
        with transaction.atomic(using=using):
            for row in rows:
                released += self.guard(row, now, using).update(
                    state=self.waiting,
                    **{self.due: now},
                    attempts=max(row.attempts - 1, 0),
                    **self.released(row),
                    **NO_LEASE,
                )
        return released


JOBS = LeasedTable(
    model=Job,
    table="jobqueue_job",
    leased=JobState.RUNNING,
    waiting=JobState.READY,
    dead=JobState.DEAD,
    due="run_after",
    released=lambda job: {"worker_ids": job.worker_ids[:-1]},
    died=lambda now: {"finished_at": now},
)
OUTBOX = LeasedTable(
    model=OutboxMessage,
    table="jobqueue_outbox",
    leased=OutboxState.LEASED,
    waiting=OutboxState.PENDING,
    dead=OutboxState.DEAD,
    due="available_at",
)


def error_entry(
    row,
    *,
    class_path: str,
    message: str,
    traceback: str,
    now: datetime,
    duration: float | None = None,
) -> dict:
    """One attempt's error, as both tables and dead letters keep it. A class path goes to a
    255-character column (DeadLetter.error_class) and, like the message, may hold anything (a
    class made with type()): a failure must always store. `duration`: how long the handler
    ran, in seconds, where a worker measured it."""
    entry = {
        "attempt": row.attempts,
        "at": now.isoformat(),
        "worker_id": row.locked_by,
        "exception_class_path": storable_text(class_path, CLASS_PATH_CHARS),
        "message": storable_text(message, MAX_MESSAGE_CHARS),
        "traceback": storable_text(traceback, MAX_TRACEBACK_CHARS),
    }
    if duration is not None:
        entry["duration_ms"] = round(duration * 1000, 1)
    return entry


def expired_entry(row, now: datetime) -> dict:
    """The error a swept lease leaves: its holder died or stalled without a word."""
    return error_entry(
        row,
        class_path=LEASE_EXPIRED,
        message=f"lease held by {row.locked_by} expired at {row.locked_until.isoformat()}",
        traceback="",
        now=now,
    )
