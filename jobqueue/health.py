"""Queue health: backlog, oldest wait, leases, retries, failure rates and dead letters per queue
and task, from indexed queries only.

Live rows (ready, running) are read through the partial indexes on them; finished history is
never scanned: throughput and failure rates come from the per-minute counters the workers keep,
dead letters pending from the partial index on pending rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta

from django.db.models import Count, Exists, Min, OuterRef, Q, Sum
from django.utils import timezone

from jobqueue.conf import policy
from jobqueue.models import (
    LEASED,
    WAITING,
    DeadLetter,
    DeadLetterState,
    Job,
    JobCounter,
    JobState,
    Schedule,
    ScheduleRun,
    WorkerRecord,
)
from jobqueue.store import queues


def count_pending_dead_letters(using: str = "default") -> dict[tuple[str, str], int]:
    """Pending dead letters per (queue, task) by counting rows: right, but it reads every
    pending row."""
    rows = (
        DeadLetter.objects.using(using)
        .filter(state=DeadLetterState.PENDING)
        .values_list("queue_name", "task_path")
        .annotate(n=Count("id"))
    )
    return {(queue, task): n for queue, task, n in rows}


@dataclass(frozen=True)
class DeadLetterCounter:
    """Exact pending counts kept by another app, the hook through which jobqueue (which imports
    no other app) reads them: `count(using)` gives pending dead letters per (queue, task) of
    the database `using`; `ensure`,
    given a connection, restores whatever keeps them exact (triggers on jobqueue_deadletter, say)
    and runs after every `migrate`, since a jobqueue migration may rebuild that table on SQLite
    and so drop its triggers. The console registers its trigger-kept counters here."""

    count: Callable[[str], dict[tuple[str, str], int]]
    ensure: Callable[[object], object] | None = None


_counter: DeadLetterCounter | None = None


def register_dead_letter_counter(counter: DeadLetterCounter | None) -> None:
    """Count pending dead letters with `counter` (None: count the rows again)."""
    global _counter
    _counter = counter


def count_dead_letters(using: str = "default") -> dict[tuple[str, str], int]:
    if _counter is not None:
        return _counter.count(using)
    return count_pending_dead_letters(using)


def ensure_dead_letter_counter(connection) -> None:
    """After jobqueue's schema may have changed: let the registered counter restore itself."""
    if _counter is not None and _counter.ensure is not None:
        _counter.ensure(connection)


@dataclass
class Row:
    """Figures for one (queue, task) pair."""

    queue: str
    task: str
    ready: int = 0
    scheduled: int = 0
    running: int = 0
    expired: int = 0
    retrying: int = 0
    dead_letters: int = 0
    oldest_ready_age: float = 0.0
    succeeded_5m: int = 0
    failed_5m: int = 0
    succeeded_60m: int = 0
    failed_60m: int = 0
    paused: bool = False  # its queue is paused: workers skip its jobs
    rate_limit: float | None = None  # REDRIVE["RATE_LIMITS"] of its queue, jobs per second


# The figures that add up across rows (the oldest age is a maximum instead).
SUMMED = tuple(
    f.name
    for f in fields(Row)
    if f.name not in {"queue", "task", "oldest_ready_age", "paused", "rate_limit"}
)


@dataclass
class Health:
    at: datetime
    rows: list[Row]
    workers: list[dict]
    totals: dict = field(default_factory=dict)
    last_success_at: datetime | None = None
    # Paused queues by name: {"paused_by", "paused_at", "reason"}.
    paused: dict[str, dict] = field(default_factory=dict)

    def as_json(self) -> dict:
        data = asdict(self)
        data["at"] = self.at.isoformat()
        # Never succeeded: infinitely long ago for --fail-if, but null in JSON (no Infinity).
        if data["totals"].get("since_last_success") == float("inf"):
            data["totals"]["since_last_success"] = None
        data["last_success_at"] = self.last_success_at.isoformat() if self.last_success_at else None
        for worker in data["workers"]:
            for key in ("started_at", "last_heartbeat_at"):
                worker[key] = worker[key].isoformat()
        for pause in data["paused"].values():
            pause["paused_at"] = pause["paused_at"].isoformat()
        return data


def failure_rate(succeeded: int, failed: int) -> float:
    attempts = succeeded + failed
    return failed / attempts if attempts else 0.0


def scheduling(now: datetime, using: str = "default") -> dict[str, int]:
    """Figures of periodic jobs and ordering keys an operator watches: schedules active and
    paused, active ones late by over a minute (no worker is ticking them), ticks in the last
    hour that did not become a job (skipped, missed, failed), ordering keys held back by a
    dead job's unresolved letter, and concurrency keys with jobs running now."""
    schedules = Schedule.objects.using(using).filter(declared=True)
    unrun = (
        ScheduleRun.objects.using(using)
        .filter(at__gte=now - timedelta(hours=1))
        .exclude(outcome__in=[ScheduleRun.Outcome.ENQUEUED, ScheduleRun.Outcome.MANUAL])
    )
    unresolved = DeadLetter.objects.using(using).filter(
        job_id=OuterRef("pk"), state__in=[DeadLetterState.PENDING, DeadLetterState.REPLAYING]
    )
    blocked = (
        Job.objects.using(using)
        .filter(ordering_key__isnull=False, state=JobState.DEAD, ordering_on_dead="block")
        .filter(Exists(unresolved))
    )
    counts = schedules.aggregate(
        schedules=Count("id", filter=Q(paused_at__isnull=True)),
        schedules_paused=Count("id", filter=Q(paused_at__isnull=False)),
        schedules_late=Count(
            "id", filter=Q(paused_at__isnull=True, next_run_at__lt=now - timedelta(minutes=1))
        ),
    )
    return {
        **counts,
        "schedule_ticks_unrun_60m": unrun.count(),
        "blocked_ordering_keys": blocked.values("ordering_key").distinct().count(),
        "concurrency_keys_running": Job.objects.using(using)
        .filter(state=JobState.RUNNING, concurrency_key__isnull=False)
        .values("concurrency_key")
        .distinct()
        .count(),
    }


# Past this many, a count says "10,000+": the dead jobs' index is walked no further.
COUNT_CAP = 10_000


def live_counts(now: datetime, using: str = "default", by: tuple[str, ...] = ()):
    """The live jobs counted per state (ready, scheduled, retrying, running, expired), grouped
    `by` the given columns or in all: one dict per group, from the claim's partial indexes only.
    Ready jobs come in two halves, each matching one of the claim's two partial indexes: "state
    is ready" alone matches neither, and was a scan of every finished job in the table."""

    def grouped(jobs, measures):
        if by:
            yield from jobs.values(*by).annotate(**measures)
        else:
            yield jobs.aggregate(**measures)

    jobs = Job.objects.using(using)
    for keyed in (False, True):
        measures = {s.value: Count("id", filter=s.q(now)) for s in WAITING}
        if by:
            measures["oldest"] = Min("run_after", filter=Q(run_after__lte=now))
        ready = jobs.filter(state=JobState.READY, concurrency_key__isnull=not keyed)
        yield from grouped(ready, measures)
    running = jobs.filter(state=JobState.RUNNING)
    yield from grouped(running, {s.value: Count("id", filter=s.q(now)) for s in LEASED})


def state_counts(now: datetime, using: str = "default") -> dict[str, tuple[int, bool]]:
    """How many jobs are in each state that an index reaches (the live ones and the dead), as
    (count, more than that): the jobs browser's tabs. Done and cancelled jobs have no index of
    their own and are not counted (a count would read every finished job)."""
    counts = dict.fromkeys([s.value for s in WAITING + LEASED], 0)
    for found in live_counts(now, using):
        for name, n in found.items():
            counts[name] += n or 0
    dead = Job.objects.using(using).filter(state=JobState.DEAD).order_by("id")[: COUNT_CAP + 1]
    counted = {name: (n, False) for name, n in counts.items()}
    n = dead.count()
    counted[JobState.DEAD] = (min(n, COUNT_CAP), n > COUNT_CAP)
    return counted


def snapshot(
    *, now: datetime | None = None, lost_after: timedelta | None = None, using: str = "default"
) -> Health:
    """The health of the queue in the database `using` (a TASKS backend's OPTIONS["DATABASE"]):
    its jobs, dead letters, counters, workers and paused queues."""
    now = now or timezone.now()
    if lost_after is None:
        lost_after = timedelta(seconds=policy("WORKER_LOST_AFTER"))
    rows: dict[tuple[str, str], Row] = {}

    def row(queue, task) -> Row:
        if (queue, task) not in rows:
            rows[queue, task] = Row(queue=queue, task=task)
        return rows[queue, task]

    live = tuple(s.value for s in WAITING + LEASED)
    for r in live_counts(now, using, by=("queue_name", "task_path")):
        target = row(r["queue_name"], r["task_path"])
        for name in live:
            if name in r:
                setattr(target, name, getattr(target, name) + r[name])
        if r.get("oldest"):
            age = max(0.0, (now - r["oldest"]).total_seconds())
            target.oldest_ready_age = max(target.oldest_ready_age, age)
    for (queue, task), n in count_dead_letters(using).items():
        row(queue, task).dead_letters = n

    windows = {"5m": now - timedelta(minutes=5), "60m": now - timedelta(minutes=60)}
    counters = JobCounter.objects.using(using).filter(minute__gte=windows["60m"].replace(second=0))
    for r in counters.values("queue_name", "task_path").annotate(
        s5=Sum("succeeded", filter=Q(minute__gte=windows["5m"].replace(second=0))),
        f5=Sum("failed", filter=Q(minute__gte=windows["5m"].replace(second=0))),
        s60=Sum("succeeded"),
        f60=Sum("failed"),
    ):
        target = row(r["queue_name"], r["task_path"])
        target.succeeded_5m, target.failed_5m = r["s5"] or 0, r["f5"] or 0
        target.succeeded_60m, target.failed_60m = r["s60"] or 0, r["f60"] or 0
    # The newest minute with a success: a backward walk of the minute index, not a scan.
    last_success = (
        JobCounter.objects.using(using)
        .filter(succeeded__gt=0)
        .order_by("-minute", "-last_success_at")
        .values_list("last_success_at", flat=True)
        .first()
    )

    workers = []
    for w in WorkerRecord.objects.using(using).order_by("started_at"):
        workers.append(
            {
                "worker_id": w.worker_id,
                "host": w.host,
                "pid": w.pid,
                "queues": w.queues or ["*"],
                "started_at": w.started_at,
                "last_heartbeat_at": w.last_heartbeat_at,
                "lost": now - w.last_heartbeat_at > lost_after,
                "jobs_succeeded": w.jobs_succeeded,
                "jobs_failed": w.jobs_failed,
                "current_jobs": len(w.current_job_ids),
                "command": w.command,  # an operator's quiet or stop, until it takes effect
                "commanded_by": w.commanded_by,
            }
        )

    paused = {
        name: {"paused_by": p.paused_by, "paused_at": p.paused_at, "reason": p.reason}
        for name, p in queues.paused(using).items()
    }
    limits = policy("RATE_LIMITS") or {}
    for r in rows.values():
        r.paused = r.queue in paused
        r.rate_limit = limits.get(r.queue)
    ordered = sorted(rows.values(), key=lambda r: (r.queue, r.task))
    # Every figure present even when nothing is live, so `queuehealth --fail-if` can name it.
    totals: dict[str, float] = dict.fromkeys((*SUMMED, "oldest_ready_age"), 0)
    for r in ordered:
        for name in SUMMED:
            totals[name] += getattr(r, name)
        totals["oldest_ready_age"] = max(totals["oldest_ready_age"], r.oldest_ready_age)
    totals["failure_rate_5m"] = failure_rate(totals["succeeded_5m"], totals["failed_5m"])
    totals["failure_rate_60m"] = failure_rate(totals["succeeded_60m"], totals["failed_60m"])
    totals["paused"] = len(paused)  # queues
    totals["rate_limited_queues"] = len(limits)
    totals["workers"] = len(workers)
    totals["lost_workers"] = sum(w["lost"] for w in workers)
    totals["since_last_success"] = (
        (now - last_success).total_seconds() if last_success else float("inf")
    )
    totals.update(scheduling(now, using))
    return Health(
        at=now,
        rows=ordered,
        workers=workers,
        totals=totals,
        last_success_at=last_success,
        paused=paused,
    )
