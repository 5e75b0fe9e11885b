"""The console's template helpers: identifiers' break points, durations, sparklines' scale and
a run's times (how long it took, how long it has left)."""

from datetime import timedelta
from types import SimpleNamespace

from django.utils import timezone

from deadletters.selectors import run_times
from deadletters.summaries import spark_bars
from deadletters.templatetags.console import duration, ident


def test_ident_breaks_between_segments_and_escapes():
    assert str(ident("shop.tasks.PermanentError")) == (
        '<code class="ident">shop.<wbr>tasks.<wbr>Permanent<wbr>Error</code>'
    )
    assert str(ident("HTTPError_<b>")) == '<code class="ident">HTTP<wbr>Error_<wbr>&lt;b&gt;</code>'
    assert ident("") == "—" and ident(None) == "—"


def test_duration():
    cases = {0.42: "0.4 s", 42: "42 s", 185: "3 min 5 s", 180: "3 min", 7500: "2 h 5 min"}
    assert {s: duration(s) for s in cases} == cases
    assert duration(3 * 86400 + 4 * 3600) == "3 d 4 h" and duration(None) == "—"


def test_sparkline_scales_to_the_busiest_hour_and_shows_a_quiet_one():
    spark = spark_bars([0] * 20 + [1, 0, 100, 3])
    assert (spark.peak, spark.total, len(spark)) == (100, 104, 24)
    heights = [bar[2] for bar in spark]
    assert heights[22] == 24 and heights[20] == 1.0 and heights[0] == 0
    assert spark_bars([0] * 24).peak == 0


def run(**fields):
    now = timezone.now()
    base = {
        "created_at": now - timedelta(minutes=10),
        "started_at": now - timedelta(minutes=8),
        "finished_at": None,
        "requested": 100,
        "processed": 40,
        "rate": 0,
        "is_active": True,
    }
    return SimpleNamespace(**{**base, **fields}), now


def test_run_times():
    paced, now = run(rate=2.0)
    assert run_times(paced, now).eta == 30.0  # 60 left at 2 a second
    unlimited, now = run()
    assert run_times(unlimited, now).eta == 8 * 60 / 40 * 60  # at the pace so far
    assert run_times(run(processed=0)[0], now).eta is None
    done, now = run(finished_at=timezone.now(), is_active=False)
    assert round(run_times(done, now).took) == 8 * 60 and run_times(done, now).eta is None
    assert run_times(run(is_active=False)[0], now).eta is None  # paused: no estimate
