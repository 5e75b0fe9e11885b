"""Run time and queue wait: log-spaced histogram buckets, kept per minute, queue and task.

A worker sorts each finished attempt's run time (its handler's duration) and queue wait (from
the job being due, `run_after`, to its claim) into BOUNDS and adds the counts to its per-minute
tallies; the store writes them with the counters on the worker's heartbeat, per minute and per
hour (jobqueue_jobtiming, pruned with the counters). Reading a window sums the rows of its whole
hours and of the minutes at its ends, whatever the number of jobs, and percentiles come from the
buckets, as Prometheus' histogram_quantile computes them.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Q, Sum

RUN, WAIT = "run", "wait"
KINDS = (RUN, WAIT)

# Upper bounds in seconds, 1 ms to 1 h; bucket i counts values in (BOUNDS[i-1], BOUNDS[i]] and
# the last one, len(BOUNDS), whatever took longer than an hour. Stored by index: changing these
# needs the table emptied (old counts would land in the wrong buckets).
BOUNDS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
BUCKETS = len(BOUNDS) + 1

# The windows an operator picks from, in minutes, the first the default.
WINDOWS = {"1h": 60, "6h": 6 * 60, "24h": 24 * 60, "7d": 7 * 24 * 60}
DEFAULT_WINDOW = "1h"
QUANTILES = (0.5, 0.95, 0.99)


def bucket_of(seconds: float) -> int:
    """The bucket a value falls in (a negative one, from clocks apart, in the first)."""
    return bisect.bisect_left(BOUNDS, seconds)


def queue_wait(job) -> float | None:
    """Seconds from a claimed job being due to its claim, or None if it was never claimed.
    Clocks of different hosts may put the claim a little before the due time: no wait then."""
    if job.last_attempted_at is None or job.run_after is None:
        return None
    return max(0.0, (job.last_attempted_at - job.run_after).total_seconds())


@dataclass
class Histogram:
    """Counts per bucket and the sum of the values counted."""

    counts: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts)

    def add(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.seconds += other.seconds

    def quantile(self, q: float) -> float | None:
        """The q-quantile, interpolated linearly inside its bucket (the first bucket from 0);
        math.inf if it falls in the last, unbounded one; None with nothing counted."""
        total = self.total
        if not total:
            return None
        rank = q * total
        below = 0
        for index, count in enumerate(self.counts):
            if count and below + count >= rank:
                if index == len(BOUNDS):
                    return math.inf
                lower = BOUNDS[index - 1] if index else 0.0
                return lower + (BOUNDS[index] - lower) * (rank - below) / count
            below += count
        return math.inf  # not reached: the counts add up to total

    def quantiles(self) -> list[float | None]:
        return [self.quantile(q) for q in QUANTILES]

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, values at or below it), math.inf last: Prometheus' `le` buckets."""
        out, running = [], 0
        for bound, count in zip((*BOUNDS, math.inf), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


@dataclass
class Timing:
    """A queue and task's run time and queue wait over a window."""

    queue: str
    task: str
    run: Histogram = field(default_factory=Histogram)
    wait: Histogram = field(default_factory=Histogram)

    def add(self, other: Timing) -> None:
        self.run.add(other.run)
        self.wait.add(other.wait)


def window_start(now: datetime, minutes: int) -> datetime:
    """The first minute of a window of `minutes` ending with the current one."""
    return (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)


def spans(start: datetime, now: datetime) -> Q:
    """The rollup rows that cover the minutes from `start` to now's, each once: the hours
    wholly inside from the hourly rows, the minutes before the first and since the last
    whole hour from the per-minute ones. A week reads 168 hours and at most 119 minutes."""
    first_hour = start.replace(minute=0)
    if first_hour < start:
        first_hour += timedelta(hours=1)
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    if first_hour >= this_hour:
        return Q(span=1, minute__gte=start)
    return (
        Q(span=60, minute__gte=first_hour, minute__lt=this_hour)
        | Q(span=1, minute__gte=start, minute__lt=first_hour)
        | Q(span=1, minute__gte=this_hour)
    )


def timings(
    now: datetime,
    minutes: int,
    *,
    task: str | None = None,
    exclude_queues=(),
    using: str = "default",
) -> dict[tuple[str, str], Timing]:
    """Each (queue, task)'s histograms over the last `minutes` (of one task if given): one
    grouped read of the rollups, whole hours from the hourly rows."""
    from jobqueue.models import JobTiming

    now = now.astimezone(UTC)  # the hourly rows are whole UTC hours
    start = window_start(now, minutes)
    rows = JobTiming.objects.using(using).filter(spans(start, now))
    if task is not None:
        rows = rows.filter(task_path=task)
    if exclude_queues:
        rows = rows.exclude(queue_name__in=exclude_queues)
    out: dict[tuple[str, str], Timing] = {}
    for row in rows.values("queue_name", "task_path", "kind", "bucket").annotate(
        n=Sum("count"), s=Sum("seconds")
    ):
        key = (row["queue_name"], row["task_path"])
        timing = out.setdefault(key, Timing(*key))
        histogram = timing.run if row["kind"] == RUN else timing.wait
        if 0 <= row["bucket"] < BUCKETS:
            histogram.counts[row["bucket"]] += row["n"]
            histogram.seconds += row["s"]
    return out


def overall(items) -> Timing:
    """All of `items` (Timing) together."""
    whole = Timing("", "")
    for timing in items:
        whole.add(timing)
    return whole


def duration_text(seconds: float | None) -> str:
    """A percentile as the console shows it: 0.8 ms, 42 ms, 1.3 s, 4.5 min, > 1 h."""
    if seconds is None:
        return "—"
    if math.isinf(seconds):
        return "> 1 h"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def bound_text(bound: float) -> str:
    """A bucket's upper bound, short: 1ms, 250ms, 2.5s, 5m, 1h, +Inf."""
    if math.isinf(bound):
        return "+Inf"
    if bound < 1:
        return f"{bound * 1000:g}ms"
    if bound < 60:
        return f"{bound:g}s"
    if bound < 3600:
        return f"{bound / 60:g}m"
    return f"{bound / 3600:g}h"
