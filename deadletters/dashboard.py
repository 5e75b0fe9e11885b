"""The console's home: queue health (jobqueue.health) with per-minute charts of the last hour."""

from datetime import timedelta

from django.db.models import Sum
from django.utils import timezone
from django.views.decorators.http import require_GET

from deadletters import conf
from deadletters.views import console_view, render_page
from jobqueue.health import snapshot
from jobqueue.models import JobCounter

CHART_WIDTH, CHART_HEIGHT, BAR = 240, 40, 4


def minute_series(now, minutes=60) -> dict[str, list[int]]:
    """Completed, failed and dead-lettered attempts per minute, oldest first (all queues)."""
    start = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    series = {name: [0] * minutes for name in ("succeeded", "failed", "dead")}
    rows = (
        JobCounter.objects.filter(minute__gte=start)
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


def bars(values: list[int]) -> list[tuple[int, float, float, int, int]]:
    """SVG bars (x, y, height, value, minutes ago) scaled to the chart's tallest minute."""
    top = max(values) or 1
    count = len(values)
    return [
        (i * BAR, CHART_HEIGHT - h, h, v, count - 1 - i)
        for i, v in enumerate(values)
        for h in [round(CHART_HEIGHT * v / top, 1)]
    ]


@require_GET
@console_view
def dashboard(request):
    now = timezone.now()
    health = snapshot(now=now)
    series = minute_series(now)
    context = {
        "health": health,
        "totals": health.totals,
        "charts": [
            ("Completed", "ok", bars(series["succeeded"]), sum(series["succeeded"])),
            ("Failed attempts", "warn", bars(series["failed"]), sum(series["failed"])),
            ("Dead-lettered", "danger", bars(series["dead"]), sum(series["dead"])),
        ],
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "now": now,
        "poll_seconds": conf.get("OVERVIEW_POLL_SECONDS"),
    }
    return render_page(request, "deadletters/dashboard.html", "health", context)
