"""Worker registry, per-minute counters and timing buckets: health figures.

A job's outcome is counted by the transition that stores it (store.acknowledge, store.fail, the
lease sweep), in its transaction, through count(): a worker killed at any moment leaves nothing
stored uncounted and nothing counted unstored. Its run times and queue waits are tallied in its
memory and written with its record on the heartbeat (a kill loses at most a heartbeat's worth of
samples from the histograms, never a count)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connections, transaction
from django.utils import timezone

from jobqueue.models import AuditEntry, JobCounter, JobTiming, WorkerRecord
from jobqueue.timing import bucket_of

from . import audit
from .sql_common import COUNTERS_UPSERT, TIMINGS_UPSERT


@dataclass
class Tally:
    """One minute, queue and task's figures not yet written: the run times and queue waits as
    [count, seconds] per (kind, bucket) (jobqueue.timing), and counts (a worker's are always
    zero: its outcomes were counted as they were stored; record_worker adds any given)."""

    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    last_success_at: datetime | None = None
    timings: dict[tuple[str, int], list] = field(default_factory=dict)

    def observe(self, kind: str, seconds: float | None) -> None:
        """Count one run time or queue wait (None: not known, not counted)."""
        if seconds is None:
            return
        slot = self.timings.setdefault((kind, bucket_of(seconds)), [0, 0.0])
        slot[0] += 1
        slot[1] += seconds

    def add(self, other: Tally) -> None:
        """Take `other`'s counts too (a flush that failed, kept for the next)."""
        self.succeeded += other.succeeded
        self.failed += other.failed
        self.dead += other.dead
        self.last_success_at = max(
            filter(None, [self.last_success_at, other.last_success_at]), default=None
        )
        for key, (count, seconds) in other.timings.items():
            slot = self.timings.setdefault(key, [0, 0.0])
            slot[0] += count
            slot[1] += seconds


def timing_rows(tallies: dict[tuple[datetime, str, str], Tally]) -> list[tuple]:
    """The tallies' timing buckets as rows of the minute and of its hour, added up per row and
    sorted: workers flushing at once lock the rows they share in the same order (no deadlock)."""
    rows: dict[tuple, list] = {}
    for (minute, queue, task), t in tallies.items():
        hour = minute.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        for (kind, bucket), (count, seconds) in t.timings.items():
            for key in (
                (1, minute, queue, task, kind, bucket),
                (60, hour, queue, task, kind, bucket),
            ):
                slot = rows.setdefault(key, [0, 0.0])
                slot[0] += count
                slot[1] += seconds
    return [(*key, count, seconds) for key, (count, seconds) in sorted(rows.items())]


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
    last_claim_at: datetime | None = None,
    now: datetime | None = None,
    using: str = "default",
) -> str:
    """Upsert the worker's record (with `last_claim_at`, when a claim last leased it a job)
    and add its tallies to the per-minute counters and timing buckets, atomically; returns the
    operator's command waiting for it ("quiet", "stop" or "")."""
    now = now or timezone.now()
    connection = connections[using]
    ts = connection.ops.adapt_datetimefield_value
    with transaction.atomic(using=using):
        record, _ = WorkerRecord.objects.using(using).update_or_create(
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
                # Kept as it is when not given (a record written by other code than a worker).
                **({"last_claim_at": last_claim_at} if last_claim_at is not None else {}),
            },
        )
        if tallies:
            count(
                {
                    key: (t.succeeded, t.failed, t.dead, t.last_success_at)
                    for key, t in tallies.items()
                    if t.succeeded or t.failed or t.dead
                },
                using=using,
            )
            buckets = timing_rows(tallies)
            if buckets:
                with connection.cursor() as cursor:
                    cursor.executemany(
                        TIMINGS_UPSERT,
                        [(span, ts(start), *rest) for span, start, *rest in buckets],
                    )
    return record.command


Counts = tuple[int, int, int, datetime | None]  # succeeded, failed, dead, last success


def count(counts: dict[tuple[datetime, str, str], Counts], *, using: str) -> None:
    """Add to the counters of these (minute, queue, task) keys in the caller's transaction,
    after the job rows it changes and in key order (sql_common.COUNTERS_ADD says why)."""
    if not counts:
        return
    ts = connections[using].ops.adapt_datetimefield_value
    with connections[using].cursor() as cursor:
        cursor.executemany(
            COUNTERS_UPSERT,
            [
                (ts(minute), queue, task, succeeded, failed, dead, last and ts(last))
                for (minute, queue, task), (succeeded, failed, dead, last) in sorted(
                    counts.items(), key=lambda item: item[0]
                )
            ],
        )


def command(
    command: str,
    *,
    workers: Sequence[str] = (),
    host: str = "",
    actor: str,
    reason: str,
    channel: str = AuditEntry.Channel.CODE,
    now: datetime | None = None,
    using: str = "default",
) -> list[str]:
    """Tell these workers (by id, or every worker of `host`) to quiet (claim nothing more) or
    stop (drain and exit) at their next heartbeat, with its audit entry; returns the ids told.
    A stop is never taken back by a quiet; a worker already told the same is left as it is."""
    if command not in WorkerRecord.Command.values:
        raise ValueError(f"a worker's command is {' or '.join(WorkerRecord.Command.values)}")
    if bool(workers) == bool(host):
        raise ValueError("name the workers or their host, not both or neither")
    actor, reason = audit.checked_action(actor, reason)
    with transaction.atomic(using=using):
        rows = WorkerRecord.objects.using(using).select_for_update()
        rows = rows.filter(worker_id__in=list(workers)) if workers else rows.filter(host=host)
        rows = rows.exclude(command=command)
        if command == WorkerRecord.Command.QUIET:
            rows = rows.exclude(command=WorkerRecord.Command.STOP)
        told = sorted(rows.values_list("worker_id", flat=True))
        if not told:
            return []
        WorkerRecord.objects.using(using).filter(worker_id__in=told).update(
            command=command, commanded_by=actor
        )
        audit.record(
            f"worker.{command}",
            actor=actor,
            channel=channel,
            target_kind="worker",
            targets=told,
            reason=reason,
            params={"host": host} if host else {},
            at=now,
            using=using,
        )
    return told


def forget_worker(worker_id: str, *, using: str = "default") -> None:
    WorkerRecord.objects.using(using).filter(worker_id=worker_id).delete()


def prune_counters(
    *, older_than: timedelta, now: datetime | None = None, using: str = "default"
) -> tuple[int, int]:
    """Delete per-minute counters and timing buckets of minutes before now - older_than;
    returns how many of each."""
    cutoff = (now or timezone.now()) - older_than
    counters = JobCounter.objects.using(using).filter(minute__lt=cutoff).delete()[0]
    timings = JobTiming.objects.using(using).filter(minute__lt=cutoff).delete()[0]
    return counters, timings


def prune_lost_workers(
    *, lost_for: timedelta, now: datetime | None = None, using: str = "default"
) -> int:
    """Delete the records of workers silent since before now - lost_for (crashed: a clean exit
    removes its own)."""
    cutoff = (now or timezone.now()) - lost_for
    return WorkerRecord.objects.using(using).filter(last_heartbeat_at__lt=cutoff).delete()[0]
