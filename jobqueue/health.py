"""Queue health: backlog, oldest wait, leases, retries, failure rates and dead letters per queue
and task, from indexed queries only.

Live rows (ready, running) are read through the partial indexes on them; finished history is
never scanned: throughput and failure rates come from the per-minute counters the workers keep,
dead letters pending from the partial index on pending rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta

from django.db import connections
from django.db.models import Count, Exists, OuterRef, Q, Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobqueue.conf import setting
from jobqueue.models import (
    LEASED,
    LINE_POSITION,
    READY_IN_LINE,
    READY_KEYED,
    READY_PLAIN,
    WAITING,
    DeadLetter,
    DeadLetterState,
    Job,
    JobCounter,
    JobState,
    JobStatus,
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
    capped: bool = False  # live counts are at least these (over LIVE_CAP: live_sample)


# Not figures that add up across rows (the oldest age is a maximum instead).
NOT_SUMMED = {"queue", "task", "oldest_ready_age", "paused", "rate_limit", "capped"}
SUMMED = tuple(f.name for f in fields(Row) if f.name not in NOT_SUMMED)


@dataclass
class QueueFigures:
    """One queue: its live jobs, its oldest due job's wait (None: nothing due), whether it is
    paused, its rate limit, and its live concurrency: running jobs per worker, the slots of the
    live workers that take from it (shared with their other queues), and the concurrency keys
    running in it with their limit."""

    queue: str
    ready: int = 0
    scheduled: int = 0
    retrying: int = 0
    running: int = 0
    expired: int = 0
    dead_letters: int = 0
    oldest_ready_age: float | None = None
    paused: bool = False
    rate_limit: float | None = None
    running_by_worker: dict[str, int] = field(default_factory=dict)
    workers: int = 0  # live workers that take from this queue
    slots: int = 0  # their --concurrency, added up
    keys_running: int = 0  # concurrency keys with a job running in this queue
    key_limit: int | None = None  # the largest concurrency_limit among them
    capped: bool = False


@dataclass
class Health:
    at: datetime
    rows: list[Row]
    workers: list[dict]
    totals: dict = field(default_factory=dict)
    last_success_at: datetime | None = None
    # Paused queues by name: {"paused_by", "paused_at", "reason"}.
    paused: dict[str, dict] = field(default_factory=dict)
    queues: list[QueueFigures] = field(default_factory=list)

    def as_json(self) -> dict:
        data = asdict(self)
        data["at"] = self.at.isoformat()
        # Never succeeded: infinitely long ago for --fail-if, but null in JSON (no Infinity).
        if data["totals"].get("since_last_success") == float("inf"):
            data["totals"]["since_last_success"] = None
        data["last_success_at"] = self.last_success_at.isoformat() if self.last_success_at else None
        for worker in data["workers"]:
            for key in ("started_at", "last_heartbeat_at", "last_claim_at"):
                worker[key] = worker[key].isoformat() if worker[key] else None
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

# Past this many live jobs of one queue (ready ones, keyless, per queue), of keyed ready jobs
# and of running jobs, the health figures count no further and say "1,000+": each half is read
# from the head of its partial index (in claim order, expired leases first), never in full.
# Counting a backlog of 50,000 ready jobs cost the health page 120 ms of heap reads; a queue's
# size past a thousand tells an operator no more than its oldest wait, which stays exact.
LIVE_CAP = 1_000
# Distinct priorities walked for a queue's oldest ready job past the cap.
PRIORITY_WALK = 32


@dataclass
class LiveSample:
    """The live jobs as read for the health figures, counted per group in the database from at
    most LIVE_CAP jobs per half (see LIVE_CAP), and which halves had more."""

    # Per (queue, task): {"queue", "task", "ready", "scheduled", "retrying", "oldest"} where
    # oldest is the earliest due run_after (None: nothing due).
    ready: list[dict]
    # Per (queue, task, worker, concurrency key, its limit): {..., "running", "expired"}.
    running: list[dict]
    capped_queues: set[str]  # queues whose keyless ready jobs were more than LIVE_CAP
    keyed_capped: bool  # keyed or ordered ready jobs were more than LIVE_CAP (in any queue)
    running_capped: bool
    oldest: dict[str, datetime]  # per queue: the earliest run_after of its ready jobs, exact


def live_sample(now: datetime, using: str = "default", cap: int | None = None) -> LiveSample:
    """The live jobs, bounded: per queue its first `cap` keyless ready jobs in claim order (the
    queues found by a skip scan of the claim's per-queue index), the first `cap` keyed ready
    jobs, the first `cap` running ones by lease end, each head counted per group by the
    database; a head of `cap` looks one row further to know whether there are more. A queue
    over the cap has its earliest job looked up per priority instead."""
    cap = LIVE_CAP if cap is None else cap
    jobs = Job.objects.using(using)
    keyless = jobs.filter(READY_PLAIN)
    ready: list[dict] = []
    capped: set[str] = set()
    oldest: dict[str, datetime] = {}
    claim_order = ("-priority", "run_after", "id")
    for queue in queues.ready_queues(using):
        head = keyless.filter(queue_name=queue).order_by(*claim_order)
        found, n = _ready_heads(head[:cap], now, using)
        if n == cap and head[cap : cap + 1].exists():
            capped.add(queue)
            oldest[queue] = _earliest_of_priorities(keyless.filter(queue_name=queue))
        ready.extend(found)
    # Jobs with a concurrency key, and those in ordering lines, in the order of their indexes.
    keyed_capped = False
    for keyed in (
        jobs.filter(READY_KEYED).order_by("concurrency_key", *claim_order),
        jobs.filter(READY_IN_LINE).order_by("ordering_key", LINE_POSITION),
    ):
        found, n = _ready_heads(keyed[:cap], now, using)
        keyed_capped = keyed_capped or (n == cap and keyed[cap : cap + 1].exists())
        ready.extend(found)
    for r in ready:
        if r["earliest"] is not None:
            oldest[r["queue"]] = min(oldest.get(r["queue"], r["earliest"]), r["earliest"])
    leased = jobs.filter(state=JobState.RUNNING).order_by("locked_until")
    running, n = _running_heads(leased[:cap], now, using)
    return LiveSample(
        ready=ready,
        running=running,
        capped_queues=capped,
        keyed_capped=keyed_capped,
        running_capped=n == cap and leased[cap : cap + 1].exists(),
        oldest=oldest,
    )


def _grouped(head, columns, measures: str, params: list, using: str) -> list[tuple]:
    """`head` (a sliced queryset: the first rows of an index) counted per `columns` by the
    database: the ORM writes the bounded inner read for each dialect, the outer SQL is plain
    aggregates. Counting in the database rather than here: a few rows back, not thousands."""
    inner, inner_params = head.values(*columns[:2], *HEAD_COLUMNS[columns]).query.sql_with_params()
    grouping = ", ".join(columns)
    sql = f"SELECT {grouping}, {measures} FROM ({inner}) head GROUP BY {grouping}"
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [*params, *inner_params])
        return cursor.fetchall()


HEAD_COLUMNS = {
    ("queue_name", "task_path"): ("run_after", "attempts"),
    ("queue_name", "task_path", "locked_by", "concurrency_key", "concurrency_limit"): (
        "locked_by",
        "concurrency_key",
        "concurrency_limit",
        "locked_until",
    ),
}


def _ready_heads(head, now, using) -> tuple[list[dict], int]:
    due = connections[using].ops.adapt_datetimefield_value(now)
    measures = (
        "COUNT(*), "
        "SUM(CASE WHEN run_after <= %s THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN run_after > %s AND attempts > 0 THEN 1 ELSE 0 END), "
        "MIN(CASE WHEN run_after <= %s THEN run_after END), MIN(run_after)"
    )
    rows = _grouped(head, ("queue_name", "task_path"), measures, [due, due, due], using)
    found = [
        {
            "queue": queue,
            "task": task,
            JobStatus.READY.value: ready,
            JobStatus.RETRYING.value: retrying,
            JobStatus.SCHEDULED.value: n - ready - retrying,
            "oldest": _moment(oldest),
            "earliest": _moment(earliest),
        }
        for queue, task, n, ready, retrying, oldest, earliest in rows
    ]
    return found, sum(row[2] for row in rows)


def _running_heads(head, now, using) -> tuple[list[dict], int]:
    live = connections[using].ops.adapt_datetimefield_value(now)
    columns = ("queue_name", "task_path", "locked_by", "concurrency_key", "concurrency_limit")
    measures = "COUNT(*), SUM(CASE WHEN locked_until > %s THEN 1 ELSE 0 END)"
    rows = _grouped(head, columns, measures, [live], using)
    found = [
        {
            "queue": queue,
            "task": task,
            "worker": worker,
            "key": key,
            "limit": limit,
            JobStatus.RUNNING.value: running,
            JobStatus.EXPIRED.value: n - running,
        }
        for queue, task, worker, key, limit, n, running in rows
    ]
    return found, sum(row[5] for row in rows)


def _moment(value) -> datetime | None:
    """A datetime the raw aggregate returned: aware already (PostgreSQL), or SQLite's text of
    a UTC time."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = parse_datetime(value)
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, UTC)


def _earliest_of_priorities(ready) -> datetime | None:
    """The earliest run_after of `ready` (one queue's keyless ready jobs): the first entry of
    each priority in the claim's index, priority by priority (a skip scan: one probe each)."""
    earliest = None
    ordered = ready.order_by("-priority", "run_after", "id").values_list("priority", "run_after")
    step = ordered.first()
    for _ in range(PRIORITY_WALK):
        if step is None:
            break
        priority, run_after = step
        earliest = run_after if earliest is None else min(earliest, run_after)
        step = ordered.filter(priority__lt=priority).first()
    return earliest


def live_counts(
    now: datetime,
    using: str = "default",
    by: tuple[str, ...] = (),
    sample: LiveSample | None = None,
):
    """The live jobs counted per state (ready, scheduled, retrying, running, expired), grouped
    `by` queue_name and/or task_path or in all: one dict per group, with "oldest" (its earliest
    due run_after, None if nothing is due) and "capped" (the counts are at least these: a half
    was over LIVE_CAP). Read from `live_sample` (bounded), never a count of every live job."""
    sample = sample or live_sample(now, using)
    states = [s.value for s in WAITING + LEASED]
    field = {"queue_name": "queue", "task_path": "task"}
    groups: dict[tuple, dict] = {}

    def add(part: dict, capped: bool) -> dict:
        key = tuple(part[field[name]] for name in by)
        found = groups.get(key)
        if found is None:
            found = groups[key] = {
                **dict(zip(by, key, strict=True)),
                **dict.fromkeys(states, 0),
                "oldest": None,
                "capped": False,
            }
        for name in states:
            found[name] += part.get(name, 0) or 0
        found["capped"] = found["capped"] or capped
        return found

    for part in sample.ready:
        found = add(part, part["queue"] in sample.capped_queues or sample.keyed_capped)
        if part["oldest"] is not None and (
            found["oldest"] is None or part["oldest"] < found["oldest"]
        ):
            found["oldest"] = part["oldest"]
    for part in sample.running:
        add(part, sample.running_capped)
    if not by:  # in all: the exact oldest of every queue, capped ones included
        whole = groups.get(()) or add({}, False)
        due = [t for t in sample.oldest.values() if t is not None and t <= now]
        whole["oldest"] = min(due, default=None)
        whole["capped"] = bool(sample.capped_queues or sample.keyed_capped or sample.running_capped)
    yield from groups.values()


def state_counts(now: datetime, using: str = "default") -> dict[str, tuple[int, bool]]:
    """How many jobs are in each state that an index reaches (the live ones and the dead), as
    (count, more than that): the jobs browser's tabs. Done and cancelled jobs have no index of
    their own and are not counted (a count would read every finished job)."""
    [found] = live_counts(now, using)
    counted = {s.value: (found[s.value], found["capped"]) for s in WAITING + LEASED}
    dead = Job.objects.using(using).filter(state=JobState.DEAD).order_by("id")[: COUNT_CAP + 1]
    n = dead.count()
    counted[JobState.DEAD] = (min(n, COUNT_CAP), n > COUNT_CAP)
    return counted


def snapshot(
    *, now: datetime | None = None, lost_after: timedelta | None = None, using: str = "default"
) -> Health:
    """The health of the queue in the database `using` (a TASKS backend's OPTIONS["DATABASE"]):
    its jobs, dead letters, counters, workers and paused queues, per (queue, task) and per
    queue. Live jobs are read bounded (live_sample); a paused queue's wait is not the oldest
    ready age of the whole (its jobs wait because an operator said so)."""
    now = now or timezone.now()
    if lost_after is None:
        lost_after = timedelta(seconds=setting("WORKER_LOST_AFTER"))
    rows: dict[tuple[str, str], Row] = {}

    def row(queue, task) -> Row:
        if (queue, task) not in rows:
            rows[queue, task] = Row(queue=queue, task=task)
        return rows[queue, task]

    live = tuple(s.value for s in WAITING + LEASED)
    sample = live_sample(now, using)
    for r in live_counts(now, using, by=("queue_name", "task_path"), sample=sample):
        target = row(r["queue_name"], r["task_path"])
        for name in live:
            setattr(target, name, r[name])
        target.capped = r["capped"]
        if r["oldest"]:
            target.oldest_ready_age = max(0.0, (now - r["oldest"]).total_seconds())
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
                "concurrency": w.concurrency,
                "started_at": w.started_at,
                "last_heartbeat_at": w.last_heartbeat_at,
                "last_claim_at": w.last_claim_at,  # None: it has claimed no job yet
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
    limits = setting("RATE_LIMITS") or {}
    for r in rows.values():
        r.paused = r.queue in paused
        r.rate_limit = limits.get(r.queue)
    ordered = sorted(rows.values(), key=lambda r: (r.queue, r.task))
    # Every figure present even when nothing is live, so `queuehealth --fail-if` can name it.
    totals: dict[str, float] = dict.fromkeys((*SUMMED, "oldest_ready_age"), 0)
    for r in ordered:
        for name in SUMMED:
            totals[name] += getattr(r, name)
        if not r.paused:
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
    # Live counts at least these (1 or 0 so that --fail-if and /metrics can read it).
    totals["live_capped"] = int(any(r.capped for r in ordered))
    totals.update(scheduling(now, using))
    return Health(
        at=now,
        rows=ordered,
        workers=workers,
        totals=totals,
        last_success_at=last_success,
        paused=paused,
        queues=per_queue(ordered, sample, workers, paused, limits, now),
    )


def per_queue(rows, sample, workers, paused, limits, now) -> list[QueueFigures]:
    """The (queue, task) rows added up per queue, with each queue's exact oldest wait, its
    running jobs per worker, the live workers' slots that serve it, and its concurrency keys;
    paused queues with no job are listed too (to be resumed)."""
    found: dict[str, QueueFigures] = {}
    for r in rows:
        q = found.setdefault(r.queue, QueueFigures(queue=r.queue))
        for name in ("ready", "scheduled", "retrying", "running", "expired", "dead_letters"):
            setattr(q, name, getattr(q, name) + getattr(r, name))
        q.capped = q.capped or r.capped
    for name in paused:
        found.setdefault(name, QueueFigures(queue=name))
    keys: dict[str, set[str]] = {}
    for part in sample.running:
        q = found.get(part["queue"])
        if q is None or not part["running"]:
            continue
        worker = part["worker"] or "?"
        q.running_by_worker[worker] = q.running_by_worker.get(worker, 0) + part["running"]
        if part["key"] is not None:
            keys.setdefault(q.queue, set()).add(part["key"])
            q.key_limit = max(q.key_limit or 0, part["limit"] or 1)
    for q in found.values():
        q.paused = q.queue in paused
        q.rate_limit = limits.get(q.queue)
        q.keys_running = len(keys.get(q.queue, ()))
        oldest = sample.oldest.get(q.queue)
        if q.ready and oldest is not None and oldest <= now:
            q.oldest_ready_age = max(0.0, (now - oldest).total_seconds())
        serving = [
            w for w in workers if not w["lost"] and ("*" in w["queues"] or q.queue in w["queues"])
        ]
        q.workers = len(serving)
        q.slots = sum(w["concurrency"] for w in serving)
    return sorted(found.values(), key=lambda q: q.queue)
