"""The console's home: queue health (jobqueue.health) with per-minute charts of the last hour,
and run time and queue wait per queue and task over a chosen window (jobqueue.timing), with a
page per task."""

import hashlib
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Sum
from django.shortcuts import render
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_GET

from deadletters import conf, databases, timefilter
from deadletters.roles import CONTROL_WORKER, PAUSE_QUEUE
from deadletters.views import console_view, render_page, whole_page
from jobqueue import store, timing
from jobqueue.conf import setting
from jobqueue.health import SUMMED, Health, failure_rate, snapshot
from jobqueue.models import DeadLetter, DeadLetterState, JobCounter, JobState

MINUTES = 60
# The SVG's geometry: a value axis on the left, a time axis below, one 5-unit slot a minute.
SLOT, BAR = 5, 4
LEFT, RIGHT, TOP, BOTTOM = 30, 6, 8, 18
PLOT_HEIGHT = 80
CHART_WIDTH = LEFT + SLOT * MINUTES + RIGHT
CHART_HEIGHT = TOP + PLOT_HEIGHT + BOTTOM


def minute_series(
    now, minutes=MINUTES, exclude_queues=(), using="default", only_queues=None
) -> dict[str, list[int]]:
    """Completed, failed and dead-lettered attempts per minute, oldest first (all queues but
    `exclude_queues`, or `only_queues`), of the queue database `using`."""
    start = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    series = {name: [0] * minutes for name in ("succeeded", "failed", "dead")}
    rows = JobCounter.objects.using(using).filter(minute__gte=start)
    if only_queues is not None:
        rows = rows.filter(queue_name__in=only_queues)
    rows = (
        rows.exclude(queue_name__in=exclude_queues)
        .values("minute")
        .annotate(s=Sum("succeeded"), f=Sum("failed"), d=Sum("dead"))
    )
    for row in rows:
        index = int((row["minute"] - start).total_seconds() // 60)
        if 0 <= index < minutes:
            series["succeeded"][index] = row["s"]
            series["failed"][index] = row["f"]
            series["dead"][index] = row["d"]
    return series


def nice_top(peak: int) -> int:
    """The value axis' top: the first of 1, 2, 5, 10, 20, 50, … at or above the peak."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= peak:
                return step * factor
        step *= 10


@dataclass
class Bar:
    x: float  # the minute's slot (for the hover target)
    y: float
    height: float
    value: int
    label: str  # what the hover says


@dataclass
class Chart:
    title: str
    noun: str
    tone: str
    total: int
    bars: list[Bar]
    y_ticks: list[tuple[float, int]]  # (y, value)
    x_ticks: list[tuple[float, str]]  # (x, clock time)
    apart: int = 0  # the replay runner's own, in the hour: not drawn, said in the caption


def chart(title, noun, tone, values, now, apart=0, minutes=MINUTES) -> Chart:
    """One series as an SVG bar chart: bars scaled to a round top value, a value axis (0, the
    middle, the top), clock times every quarter hour below, and each minute's value on hover."""
    top = nice_top(max(values))
    start = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    zone = conf.zone()
    bars, x_ticks = [], []
    for i, value in enumerate(values):
        local = (start + timedelta(minutes=i)).astimezone(zone)
        height = round(PLOT_HEIGHT * value / top, 1)
        bars.append(
            Bar(
                x=LEFT + i * SLOT,
                y=TOP + PLOT_HEIGHT - height,
                height=height,
                value=value,
                label=f"{local:%Y-%m-%d %H:%M} {local.tzname()}: {value} {noun}",
            )
        )
        if local.minute % 15 == 0:
            x_ticks.append((LEFT + i * SLOT + BAR / 2, local.strftime("%H:%M")))
    ticks = [0, top // 2, top] if top % 2 == 0 else [0, top]
    y_ticks = [(TOP + PLOT_HEIGHT - PLOT_HEIGHT * t / top, t) for t in ticks]
    return Chart(title, noun, tone, sum(values), bars, y_ticks, x_ticks, apart)


def minute_marks(now, minutes=MINUTES) -> list[timefilter.DeployMark]:
    """The deploys of a per-minute chart's hour, on its time axis."""
    start = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    return timefilter.deploy_marks(
        start, now, lambda at: LEFT + (at - start).total_seconds() / 60 * SLOT
    )


# A histogram's SVG: one slot per bucket, the bound under every third.
H_SLOT, H_BAR = 14, 11
H_WIDTH = LEFT + H_SLOT * timing.BUCKETS + RIGHT
H_LABEL_EVERY = 3


@dataclass
class HistogramChart:
    title: str
    tone: str
    total: int
    quantiles: list[tuple[str, str]]  # ("p50", "42 ms")
    bars: list[Bar]
    y_ticks: list[tuple[float, int]]
    x_ticks: list[tuple[float, str]]
    bars_svg: str  # the bars' markup, escaped


def histogram_chart(title, tone, histogram: timing.Histogram) -> HistogramChart:
    """One histogram as an SVG bar chart: a bar per bucket scaled to a round top, the bucket's
    bound below every third, its range and count on hover."""
    top = nice_top(max(histogram.counts))
    bars, x_ticks = [], []
    lower = "0"
    for i, (bound, value) in enumerate(
        zip((*timing.BOUNDS, float("inf")), histogram.counts, strict=True)
    ):
        upper = timing.bound_text(bound)
        height = round(PLOT_HEIGHT * value / top, 1)
        span = f"over {lower}" if i == len(timing.BOUNDS) else f"{lower} to {upper}"
        bars.append(
            Bar(
                x=LEFT + i * H_SLOT,
                y=TOP + PLOT_HEIGHT - height,
                height=height,
                value=value,
                label=f"{span}: {value} attempt{'' if value == 1 else 's'}",
            )
        )
        if i % H_LABEL_EVERY == 0:
            x_ticks.append((LEFT + i * H_SLOT + H_BAR / 2, upper))
        lower = upper
    ticks = [0, top // 2, top] if top % 2 == 0 else [0, top]
    y_ticks = [(TOP + PLOT_HEIGHT - PLOT_HEIGHT * t / top, t) for t in ticks]
    # The bars as markup here, escaped by format_html: a page draws a few hundred of them, and
    # the template language took most of a task page's time doing it tag by tag.
    bars_svg = format_html_join(
        "",
        '<g class="bucket"><title>{}</title><rect class="hit" x="{}" y="0" width="{}" '
        'height="{}"/>{}</g>',
        (
            (
                b.label,
                b.x,
                H_SLOT,
                TOP + PLOT_HEIGHT,
                format_html(
                    '<rect class="bar" x="{}" y="{}" width="{}" height="{}"/>',
                    b.x,
                    b.y,
                    H_BAR,
                    b.height,
                )
                if b.value
                else "",
            )
            for b in bars
        ),
    )
    quantiles = [
        (f"p{round(q * 100)}", timing.duration_text(v))
        for q, v in zip(timing.QUANTILES, histogram.quantiles(), strict=True)
    ]
    return HistogramChart(title, tone, histogram.total, quantiles, bars, y_ticks, x_ticks, bars_svg)


@dataclass
class TimingRow:
    queue: str
    task: str
    attempts: int
    run: list[str]  # p50, p95, p99 as text
    wait: list[str]


def timing_row(t: timing.Timing) -> TimingRow:
    return TimingRow(
        queue=t.queue,
        task=t.task,
        attempts=t.run.total,
        run=[timing.duration_text(v) for v in t.run.quantiles()],
        wait=[timing.duration_text(v) for v in t.wait.quantiles()],
    )


@dataclass(frozen=True)
class Window:
    """The timing window: `text` as its links carry it ("1h", "deploy"), `minutes` the whole
    minutes it reads (from the one its start falls in), `label` as captions say it."""

    text: str
    minutes: int
    label: str


def window_of(bound: timefilter.Bound, now) -> Window:
    first = bound.at.replace(second=0, microsecond=0)
    last = now.replace(second=0, microsecond=0)
    minutes = max(1, int((last - first).total_seconds() // 60) + 1)
    label = f"in the last {bound.text}" if bound.span else f"since {bound.label}"
    return Window(bound.text, minutes, label)


def chosen_window(request, now) -> tuple[Window, str]:
    """The window `?window=` names: a span back from now (1h), deploy (since the last one), a
    day or a time (deadletters.timefilter); none, the default; else the default and what to say
    of the text."""
    given = request.GET.get("window", "")
    default = window_of(timefilter.parse(timing.DEFAULT_WINDOW, now=now), now)
    if not given:
        return default, ""
    try:
        bound = timefilter.parse(given, now=now)
    except timefilter.BadBound as exc:
        problem = str(exc)
    else:
        if bound.at < now:
            return window_of(bound, now), ""
        problem = "It starts after now."
    return default, (
        f"There is no window “{given[:40]}”: {problem} Pick one of "
        f"{', '.join(timefilter.SUGGESTED)}. Showing the last {timing.DEFAULT_WINDOW}."
    )


def timings_of(
    now, window: Window, *, task=None, exclude_queues=()
) -> dict[tuple[str, str], timing.Timing]:
    """Every queue database's rollups of the window, added up per queue and task."""
    out: dict[tuple[str, str], timing.Timing] = {}
    for backend in databases.backends():
        found = timing.timings(
            now,
            window.minutes,
            task=task,
            exclude_queues=exclude_queues,
            using=backend.database,
        )
        for key, t in found.items():
            out.setdefault(key, timing.Timing(*key)).add(t)
    return out


def timing_context(request, now, *, task=None, exclude_queues=()) -> dict:
    window, window_error = chosen_window(request, now)
    found = timings_of(now, window, task=task, exclude_queues=exclude_queues)
    whole = timing.overall(found.values())
    start = now - timedelta(minutes=window.minutes)
    return {
        "window": window.text,
        "window_label": window.label,
        # Since the last deploy is offered once there is one.
        "windows": [w for w in timefilter.SUGGESTED if w != "deploy" or timefilter.latest_deploy()],
        "window_error": window_error,
        # A histogram has no time axis: the deploys of its window are named beside it.
        "window_deploys": timefilter.deploys_between(start, now),
        "timing_rows": [timing_row(found[key]) for key in sorted(found)],
        "timing_charts": [
            histogram_chart("Run time", "ok", whole.run),
            histogram_chart("Queue wait", "warn", whole.wait),
        ],
        "per_queue": [
            (
                timing_row(found[key]),
                [
                    histogram_chart("Run time", "ok", found[key].run),
                    histogram_chart("Queue wait", "warn", found[key].wait),
                ],
            )
            for key in sorted(found)
        ]
        if task is not None
        else [],
        "histogram_width": H_WIDTH,
        "h_plot_right": H_WIDTH - RIGHT,
        "h_slot": H_SLOT,
        "h_bar": H_BAR,
    }


def unknown_outcomes(rows, using="default") -> set[str]:
    """Job types whose finished attempts this queue does not count: django-q2's (its cluster
    runs them), seen here only through their dead letters. One index probe per such row."""
    candidates = [
        r.task
        for r in rows
        if r.dead_letters and not any(getattr(r, n) for n in SUMMED if n != "dead_letters")
    ]
    return {
        task
        for task in candidates
        if DeadLetter.objects.using(using)
        .filter(state=DeadLetterState.PENDING, task_path=task)
        # The pending index's order: by id, the probe walked a million letters (17 ms each).
        .order_by("dead_lettered_at")
        .values_list("source", flat=True)
        .first()
        not in (None, "jobqueue", "outbox")
    }


# The Ordering keys blocked figure lists at most this many keys.
BLOCKED_KEYS_SHOWN = 20


def blocked_keys(using="default", limit=BLOCKED_KEYS_SHOWN) -> list[tuple[str, DeadLetter]]:
    """The ordering keys a dead job holds back ("block") while its letter is unresolved, as
    jobqueue.health.scheduling counts them, each with that letter (the oldest, if several)."""
    letters = (
        DeadLetter.objects.using(using)
        .filter(
            state__in=[DeadLetterState.PENDING, DeadLetterState.REPLAYING],
            job__state=JobState.DEAD,
            job__ordering_key__isnull=False,
            job__ordering_on_dead="block",
        )
        .select_related("job")
        .only("id", "task_path", "state", "job__ordering_key")
        .order_by("job__ordering_key", "id")
    )
    found: dict[str, DeadLetter] = {}
    for letter in letters.iterator():
        found.setdefault(letter.job.ordering_key, letter)
        if len(found) > limit:
            break
    return list(found.items())[:limit]


# Totals that are not sums over the backends: a maximum, a minimum, and rates recomputed.
NOT_ADDED = {"oldest_ready_age", "since_last_success", "failure_rate_5m", "failure_rate_60m"}


def combined(healths: list[Health], now) -> Health:
    """One health of several queue databases' snapshots: their rows and workers together (each
    row and worker keeps its `backend`), totals added up, the oldest wait the longest, the
    failure rates of the added counts, the last success the latest. `paused` stays keyed by
    queue name (the page lists each backend's from the rows)."""
    totals: dict = {}
    for health in healths:
        for name, value in health.totals.items():
            if name not in NOT_ADDED:
                totals[name] = totals.get(name, 0) + value
    totals["oldest_ready_age"] = max(h.totals["oldest_ready_age"] for h in healths)
    totals["failure_rate_5m"] = failure_rate(totals["succeeded_5m"], totals["failed_5m"])
    totals["failure_rate_60m"] = failure_rate(totals["succeeded_60m"], totals["failed_60m"])
    # The same REDRIVE["RATE_LIMITS"] applies in every database: not added.
    totals["rate_limited_queues"] = healths[0].totals["rate_limited_queues"]
    successes = [h.last_success_at for h in healths if h.last_success_at]
    last_success = max(successes, default=None)
    totals["since_last_success"] = (
        (now - last_success).total_seconds() if last_success else float("inf")
    )
    paused = {}
    for health in healths:
        paused.update(health.paused)
    return Health(
        at=now,
        rows=[row for h in healths for row in h.rows],
        workers=[worker for h in healths for worker in h.workers],
        totals=totals,
        last_success_at=last_success,
        paused=paused,
        queues=[queue for h in healths for queue in h.queues],
    )


def _snapshots(now) -> tuple[Health, list[tuple]]:
    """The health of every queue database, each row, worker and pause marked with its backend,
    and the whole; one database's snapshot as it is."""
    parts = []
    for backend in databases.backends():
        health = snapshot(now=now, using=backend.database)
        live = [r for r in health.rows if any(getattr(r, name) for name in SUMMED)]
        uncounted = unknown_outcomes(live, using=backend.database)
        for row in health.rows:
            row.backend = backend
            row.uncounted = row.task in uncounted
        for queue in health.queues:
            queue.backend = backend
            queue.pause = health.paused.get(queue.queue)  # by, when, why
            # A stable id for the row's reason box: the poll's swap keeps what is typed in it
            # (hx-preserve), and a queue name may hold any character.
            digest = hashlib.sha256(f"{backend.name}\0{queue.queue}".encode()).hexdigest()
            queue.dom_id = f"queue-{digest[:16]}"
        for worker in health.workers:
            worker["backend"] = backend.name
        parts.append((backend, health))
    if len(parts) == 1:
        return parts[0][1], parts
    return combined([health for _, health in parts], now), parts


CHART_GEOMETRY = {
    "chart_width": CHART_WIDTH,
    "chart_height": CHART_HEIGHT,
    "plot_left": LEFT,
    "plot_right": CHART_WIDTH - RIGHT,
    "plot_bottom": TOP + PLOT_HEIGHT,
    "slot": SLOT,
    "bar": BAR,
}


def _minute_charts(parts, now, internal: str) -> list:
    """The per-minute charts of every queue database, summed."""
    series = {name: [0] * MINUTES for name in ("succeeded", "failed", "dead")}
    # The replay runner's own jobs are left out of the charts, but counted in the workers'
    # Done and Failed: each caption says how many of them it left out, so the two add up.
    apart = {name: 0 for name in series}
    for backend, _ in parts:
        for name, values in minute_series(
            now, exclude_queues=[internal], using=backend.database
        ).items():
            series[name] = [a + b for a, b in zip(series[name], values, strict=True)]
        for name, values in minute_series(
            now, only_queues=[internal], using=backend.database
        ).items():
            apart[name] += sum(values)
    return [
        chart("Completed", "completed", "ok", series["succeeded"], now, apart["succeeded"]),
        chart("Failed attempts", "failed", "warn", series["failed"], now, apart["failed"]),
        # The workers' per-minute counters: jobs of this queue only (see the page's note).
        chart(
            "Jobs dead-lettered",
            "jobs dead-lettered",
            "danger",
            series["dead"],
            now,
            apart["dead"],
        ),
    ]


def _controls(request, health, parts, now) -> dict:
    """What the page's pause and worker forms offer, to those who may use them."""
    return {
        "can_pause": request.user.has_perm(PAUSE_QUEUE),
        "can_control_workers": request.user.has_perm(CONTROL_WORKER),
        # The workers and hosts a quiet or stop may name (a poll does not show the form).
        "worker_choices": health.workers if whole_page(request) else [],
        "host_choices": sorted({w["host"] for w in health.workers}),
        # The queues a pause takes without "no jobs yet" ticked (store.queues.known), offered
        # to those who may pause; a poll of the health figures does not show the form.
        "queue_names": sorted(
            {
                name
                for backend, part in parts
                for name in store.queues.known(
                    backend.database, now, live=[q.queue for q in part.queues]
                )
            }
        )
        if request.user.has_perm(PAUSE_QUEUE) and whole_page(request)
        else [],
    }


@require_GET
@console_view
def dashboard(request):
    now = timezone.now()
    health, parts = _snapshots(now)
    several = len(parts) > 1
    internal = setting("REPLAY_QUEUE")
    # A queue/task with nothing live, nothing dead and nothing finished this hour says nothing.
    rows = [r for r in health.rows if any(getattr(r, name) for name in SUMMED)]
    # A queue is listed with anything to say (a row of its tasks) or paused (to be resumed).
    shown = {(r.backend.name, r.queue) for r in rows}
    queue_rows = [q for q in health.queues if q.paused or (q.backend.name, q.queue) in shown]
    waiting = [q for q in queue_rows if q.ready and q.queue != internal]
    context = {
        "health": health,
        "totals": health.totals,
        "rows": [r for r in rows if r.queue != internal],
        # The replay runner's own jobs, apart: they are the console's work, not the project's.
        "internal_rows": [r for r in rows if r.queue == internal],
        "internal_queue": internal,
        "queues": [q for q in queue_rows if q.queue != internal],
        "internal_queues": [q for q in queue_rows if q.queue == internal],
        # The Oldest ready figure: none when nothing is due outside a paused queue.
        "due_running": any(not q.paused for q in waiting),
        "ready_paused": sum(q.ready for q in waiting if q.paused),
        # Several queue databases: a Backend column, a backend to pause in.
        "several": several,
        "backends": [backend for backend, _ in parts],
        "whole": whole_page(request),
        "charts": _minute_charts(parts, now, internal),
        # The keys the Ordering keys blocked figure counts, each with the letter holding it.
        "blocked_keys": [
            (backend, key, letter)
            for backend, part in parts
            if part.totals.get("blocked_ordering_keys")
            for key, letter in blocked_keys(backend.database)
        ],
        "deploy_marks": minute_marks(now),
        # The Deploys section sits outside the polled part too.
        "deploys": timefilter.recent_deploys(10) if whole_page(request) else [],
        **CHART_GEOMETRY,
        "now": now,
        "poll_seconds": setting("OVERVIEW_POLL_SECONDS"),
        # Timing sits outside the polled part (its window is the page's): not read for a poll.
        **(timing_context(request, now, exclude_queues=[internal]) if whole_page(request) else {}),
        **_controls(request, health, parts, now),
    }
    response = render_page(request, "deadletters/dashboard.html", "health", context)
    if context.get("window_error"):
        response.status_code = 400
    return response


@require_GET
@console_view
def task_timing(request, task):
    """One task's run time and queue wait over the chosen window, per queue, with histograms."""
    now = timezone.now()
    context = {
        "task": task,
        "now": now,
        "chart_height": CHART_HEIGHT,
        "plot_left": LEFT,
        "plot_bottom": TOP + PLOT_HEIGHT,
        **timing_context(request, now, task=task),
    }
    status = 400 if context["window_error"] else 200
    return render(request, "deadletters/timing.html", context, status=status)
