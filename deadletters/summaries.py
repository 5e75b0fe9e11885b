"""The letters' overview: pending dead letters by job type with their sparklines, and a job
type's causes (error fingerprints)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connections
from django.db.models import Sum
from django.utils import timezone

from . import timefilter
from .models import HourlyCount, PendingCount


@dataclass
class TypeSummary:
    task_path: str
    source: str
    count: int
    oldest: datetime
    newest: datetime
    died_again: int
    top_errors: list[tuple[str, int]] = field(default_factory=list)
    hourly: list[int] = field(default_factory=lambda: [0] * 24)

    @property
    def chart(self):
        return spark_bars(self.hourly)


@dataclass
class Spark:
    """A 24-hour sparkline (deadletters/sparkline.html): a bar per hour, oldest first, as
    (x, y, height, count, hours_ago), scaled to the busiest hour, whose count labels the
    scale; a bar with any letters is at least a pixel tall, so a quiet hour beside a busy one
    still shows."""

    bars: list[tuple]
    peak: int
    total: int

    def __len__(self):
        return len(self.bars)

    def __iter__(self):
        return iter(self.bars)


SPARK_SLOT, SPARK_BAR, SPARK_TOP, SPARK_BOTTOM = 5, 4, 2, 26


def spark_bars(hourly: list[int]) -> Spark:
    peak = max(hourly, default=0)
    bars = []
    for i, n in enumerate(hourly):
        height = max(1.0, round((SPARK_BOTTOM - SPARK_TOP) * n / peak, 1)) if n else 0
        bars.append((i * SPARK_SLOT, SPARK_BOTTOM - height, height, n, len(hourly) - 1 - i))
    return Spark(bars=bars, peak=peak, total=sum(hourly))


def spark_marks(now=None) -> list:
    """The deploys of the 24 hours a sparkline draws (deadletters.timefilter.deploy_marks), on
    its axis of one 5-unit slot an hour."""
    now = now or timezone.now()
    start = _day_start(now)
    return timefilter.deploy_marks(start, now, lambda at: (at - start).total_seconds() / 3600 * 5)


def _day_start(now) -> datetime:
    """The first of the 24 hourly slots that end with the current hour."""
    return (now - timedelta(hours=23)).replace(minute=0, second=0, microsecond=0)


@dataclass
class Cause:
    """One error fingerprint of a job type: what its letters died of, how many are pending,
    when it was first and last seen, and its dead-letterings hour by hour over the last day."""

    fingerprint: str
    error_class: str
    pending: int
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    sample: str = ""
    hourly: list[int] = field(default_factory=lambda: [0] * 24)

    @property
    def chart(self):
        return spark_bars(self.hourly)


# A job type's causes from the counters, most pending first, then for each (at most `limit`)
# its first and last letter from either end of the (fingerprint, dead_lettered_at) index: one
# statement.
CAUSES_SQL = """
SELECT t.fingerprint, t.error_class, t.pending,
    (SELECT d.dead_lettered_at FROM jobqueue_deadletter d
     WHERE d.fingerprint = t.fingerprint AND d.task_path = %(task)s
     ORDER BY d.dead_lettered_at, d.id LIMIT 1),
    (SELECT d.dead_lettered_at FROM jobqueue_deadletter d
     WHERE d.fingerprint = t.fingerprint AND d.task_path = %(task)s
     ORDER BY d.dead_lettered_at DESC, d.id DESC LIMIT 1),
    (SELECT d.last_error FROM jobqueue_deadletter d
     WHERE d.fingerprint = t.fingerprint AND d.task_path = %(task)s
     ORDER BY d.dead_lettered_at DESC, d.id DESC LIMIT 1)
FROM (
    SELECT fingerprint, MIN(error_class) AS error_class, SUM(pending) AS pending
    FROM deadletters_pendingcount WHERE task_path = %(task)s AND pending > 0
    GROUP BY fingerprint ORDER BY SUM(pending) DESC, fingerprint LIMIT %(limit)s
) AS t
ORDER BY t.pending DESC, t.fingerprint
"""


def causes(task_path: str, *, now=None, limit: int = 20, using: str = "default") -> list[Cause]:
    """A job type's pending dead letters grouped by cause, most first: the counts from the
    trigger-kept counters (no count of the big table), each cause's first and last letter by
    two index probes in the same statement, and one read of the hourly counters for the
    trends."""
    now = now or timezone.now()
    with connections[using].cursor() as cursor:
        cursor.execute(CAUSES_SQL, {"task": task_path, "limit": limit})
        rows = cursor.fetchall()
    found = {
        fp: Cause(
            fp,
            error_class or "(none)",
            int(pending),
            first_seen=_datetime(first),
            last_seen=_datetime(last),
            sample=sample or "",
        )
        for fp, error_class, pending, first, last, sample in rows
    }
    start = _day_start(now)
    for fp, hour, n in (
        HourlyCount.objects.using(using)
        .filter(task_path=task_path, fingerprint__in=list(found), hour__gte=start)
        .values_list("fingerprint", "hour", "dead_lettered")
    ):
        slot = int((hour - start) // timedelta(hours=1))
        if 0 <= slot < 24:
            found[fp].hourly[slot] += n
    return list(found.values())


# The counters grouped per job type first, then three probes of the pending partial index per
# type. (With the counters kept per queue, error class and fingerprint, an ORM annotation put
# the probes in the GROUP BY: once per counter row, thousands of them, not once per type.)
OVERVIEW_SQL = """
SELECT t.task_path, t.pending, t.died_again,
    (SELECT d.source FROM jobqueue_deadletter d
     WHERE d.state = 'pending' AND d.task_path = t.task_path LIMIT 1),
    (SELECT d.dead_lettered_at FROM jobqueue_deadletter d
     WHERE d.state = 'pending' AND d.task_path = t.task_path
     ORDER BY d.dead_lettered_at LIMIT 1),
    (SELECT d.dead_lettered_at FROM jobqueue_deadletter d
     WHERE d.state = 'pending' AND d.task_path = t.task_path
     ORDER BY d.dead_lettered_at DESC LIMIT 1)
FROM (
    SELECT task_path, SUM(pending) AS pending, SUM(died_again) AS died_again
    FROM deadletters_pendingcount WHERE pending > 0 GROUP BY task_path
) AS t
ORDER BY t.task_path
"""


def _datetime(value):
    """A datetime from a raw query: SQLite gives text (UTC, naive), PostgreSQL a datetime."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def by_type(*, now=None, top=3, using: str = "default") -> list[TypeSummary]:
    """One summary per job type with pending dead letters, without counting the big table.

    Two small reads of the trigger-kept counters (deadletters.counters) and one statement
    whose per-type subqueries each probe the pending partial index once for oldest and newest.
    """
    now = now or timezone.now()
    with connections[using].cursor() as cursor:
        cursor.execute(OVERVIEW_SQL)
        rows = cursor.fetchall()
    summaries = {
        path: TypeSummary(
            task_path=path,
            count=int(count),
            died_again=int(died_again or 0),
            source=source,
            oldest=_datetime(oldest),
            newest=_datetime(newest),
        )
        for path, count, died_again, source, oldest, newest in rows
        if source is not None  # counted, and gone meanwhile
    }
    errors = defaultdict(list)
    for path, error_class, n in (
        PendingCount.objects.using(using)
        .filter(task_path__in=list(summaries), pending__gt=0)
        .values_list("task_path", "error_class")
        .annotate(n=Sum("pending"))
        .order_by()
    ):
        errors[path].append((error_class or "(none)", n))
    for path, counts in errors.items():
        summaries[path].top_errors = sorted(counts, key=lambda c: (-c[1], c[0]))[:top]
    start = _day_start(now)
    # Summed per type and hour by the database: the counters are per fingerprint too.
    for path, hour, n in (
        HourlyCount.objects.using(using)
        .filter(task_path__in=list(summaries), hour__gte=start)
        .values_list("task_path", "hour")
        .annotate(n=Sum("dead_lettered"))
        .order_by()
    ):
        slot = int((hour - start) // timedelta(hours=1))
        if 0 <= slot < 24:
            summaries[path].hourly[slot] += n
    return sorted(summaries.values(), key=lambda s: (-s.count, s.task_path))
