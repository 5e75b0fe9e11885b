"""The console's home: queue health (jobqueue.health) with per-minute charts of the last hour."""

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Sum
from django.utils import timezone
from django.views.decorators.http import require_GET

from deadletters import conf
from deadletters.roles import PAUSE_QUEUE
from deadletters.views import console_view, render_page
from jobqueue.health import SUMMED, snapshot
from jobqueue.models import DeadLetter, DeadLetterState, JobCounter

MINUTES = 60
# The SVG's geometry: a value axis on the left, a time axis below, one 5-unit slot a minute.
SLOT, BAR = 5, 4
LEFT, RIGHT, TOP, BOTTOM = 30, 6, 8, 18
PLOT_HEIGHT = 80
CHART_WIDTH = LEFT + SLOT * MINUTES + RIGHT
CHART_HEIGHT = TOP + PLOT_HEIGHT + BOTTOM


def minute_series(now, minutes=MINUTES, exclude_queues=()) -> dict[str, list[int]]:
    """Completed, failed and dead-lettered attempts per minute, oldest first (all queues but
    `exclude_queues`)."""
    start = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    series = {name: [0] * minutes for name in ("succeeded", "failed", "dead")}
    rows = (
        JobCounter.objects.filter(minute__gte=start)
        .exclude(queue_name__in=exclude_queues)
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


def chart(title, noun, tone, values, now, minutes=MINUTES) -> Chart:
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
    return Chart(title, noun, tone, sum(values), bars, y_ticks, x_ticks)


def unknown_outcomes(rows) -> set[str]:
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
        if DeadLetter.objects.filter(state=DeadLetterState.PENDING, task_path=task)
        .values_list("source", flat=True)
        .first()
        not in (None, "jobqueue", "outbox")
    }


@require_GET
@console_view
def dashboard(request):
    now = timezone.now()
    health = snapshot(now=now)
    internal = conf.get("REPLAY_QUEUE")
    # A queue/task with nothing live, nothing dead and nothing finished this hour says nothing.
    rows = [r for r in health.rows if any(getattr(r, name) for name in SUMMED)]
    series = minute_series(now, exclude_queues=[internal])
    context = {
        "health": health,
        "totals": health.totals,
        "rows": [r for r in rows if r.queue != internal],
        # The replay runner's own jobs, apart: they are the console's work, not the project's.
        "internal_rows": [r for r in rows if r.queue == internal],
        "internal_queue": internal,
        "uncounted": unknown_outcomes(rows),
        "charts": [
            chart("Completed", "completed", "ok", series["succeeded"], now),
            chart("Failed attempts", "failed", "warn", series["failed"], now),
            chart("Dead-lettered", "dead-lettered", "danger", series["dead"], now),
        ],
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "plot_left": LEFT,
        "plot_right": CHART_WIDTH - RIGHT,
        "plot_bottom": TOP + PLOT_HEIGHT,
        "slot": SLOT,
        "bar": BAR,
        "now": now,
        "poll_seconds": conf.get("OVERVIEW_POLL_SECONDS"),
        "can_pause": request.user.has_perm(PAUSE_QUEUE),
        # Queues an operator may pause: those with live work (internal one included) or paused.
        "queue_names": sorted({r.queue for r in health.rows} | set(health.paused)),
    }
    return render_page(request, "deadletters/dashboard.html", "health", context)
