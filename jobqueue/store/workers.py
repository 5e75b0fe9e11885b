"""Worker registry and per-minute counters: health figures, written on the worker's heartbeat."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connections, transaction
from django.utils import timezone

from jobqueue.models import WorkerRecord

from .sql_common import COUNTERS_UPSERT


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
