"""Run time and queue wait on the health page and on a task's page: percentiles from the
rollups, histograms, and the window choice."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobqueue import store, timing
from jobqueue.timing import BOUNDS

pytestmark = pytest.mark.django_db

HEALTH = reverse("deadletters:health")


def rollup(minute, queue, task, runs=(), waits=()):
    t = store.Tally()
    for seconds in runs:
        t.observe(timing.RUN, seconds)
    for seconds in waits:
        t.observe(timing.WAIT, seconds)
    store.record_worker(
        worker_id="w:1",
        host="h",
        pid=1,
        queues=None,
        concurrency=1,
        started_at=minute,
        succeeded=0,
        failed=0,
        current_job_ids=[],
        tallies={(minute, queue, task): t},
    )


@pytest.fixture
def rollups():
    minute = timezone.now().replace(second=0, microsecond=0)
    # This hour: 8 runs in (50, 100] ms and 2 in (0.5, 1] s; waits of 3 s.
    rollup(minute, "default", "shop.send_receipt", runs=[0.08] * 8 + [0.9] * 2, waits=[3.0] * 10)
    # Three hours ago: one run over an hour, in the 6 h window only.
    rollup(minute - timedelta(hours=3), "default", "shop.send_receipt", runs=[4000.0])
    rollup(minute, "mail", "shop.newsletter", runs=[0.002], waits=[0.0])
    return minute


def row_of(html, task):
    found = re.search(
        rf'<tr data-queue="[^"]*" data-task="{re.escape(task)}">(.*?)</tr>', html, re.S
    )
    assert found, task
    cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', found.group(1))
    return cells


def test_the_health_page_shows_each_tasks_percentiles_of_the_last_hour(viewer_client, rollups):
    html = viewer_client.get(HEALTH).content.decode()
    section = html.split('<section id="timing"')[1].split("</section>")[0]
    # p50: rank 5 of 10, 5/8 into (0.05, 0.1]; p95 and p99 in (0.5, 1]: ranks 9.5 and 9.9;
    # the waits all in (2.5, 5].
    assert row_of(section, "shop.send_receipt") == [
        "10", "81 ms", "875 ms", "975 ms", "3.8 s", "4.9 s", "5.0 s",
    ]  # fmt: skip
    assert row_of(section, "shop.newsletter") == [
        "1", "1.8 ms", "2.4 ms", "2.5 ms", "0.5 ms", "0.9 ms", "1.0 ms",
    ]  # fmt: skip
    link = reverse("deadletters:task-timing", args=["shop.send_receipt"])
    code = '<code class="ident">shop.<wbr>send_<wbr>receipt</code>'
    assert f'<a href="{link}?window=1h">{code}</a>' in section
    assert '<strong aria-current="true">1h</strong>' in section
    run = re.search(r'data-kind="run-time">(.*?)</figure>', section, re.S).group(1)
    assert '<strong class="attempts">11</strong>' in run
    bars = re.findall(r'<g class="bucket"><title>([^<]+)</title>', run)
    assert len(bars) == len(BOUNDS) + 1
    assert bars[BOUNDS.index(0.1)] == "50ms to 100ms: 8 attempts"
    assert bars[BOUNDS.index(0.0025)] == "1ms to 2.5ms: 1 attempt"
    assert bars[-1] == "over 1h: 0 attempts"


def test_a_wider_window_takes_the_older_minutes_in(viewer_client, rollups):
    html = viewer_client.get(HEALTH, {"window": "6h"}).content.decode()
    section = html.split('<section id="timing"')[1].split("</section>")[0]
    assert '<strong aria-current="true">6h</strong>' in section
    # 11 runs now, the slowest beyond every bound: p95 (rank 10.45 of 11) in the last bucket.
    assert row_of(section, "shop.send_receipt")[:4] == ["11", "84 ms", "&gt; 1 h", "&gt; 1 h"]
    assert "<strong>6h</strong>" not in section  # only the chosen one is marked


def test_an_unknown_window_is_refused_with_the_choices_and_the_default_shown(
    viewer_client, rollups
):
    response = viewer_client.get(HEALTH, {"window": "<b>1y</b>"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "There is no window “&lt;b&gt;1y&lt;/b&gt;”: Not a time: " in html
    assert "Pick one of 15m, 1h, 6h, 24h, 7d, deploy. Showing the last 1h." in html
    assert '<strong aria-current="true">1h</strong>' in html
    assert row_of(html, "shop.send_receipt")[0] == "10"


def test_a_poll_of_the_health_figures_does_not_read_the_timings(viewer_client, rollups):
    html = viewer_client.get(HEALTH, headers={"HX-Request": "true"}).content.decode()
    assert 'id="timing"' not in html and 'id="health"' in html


def test_a_tasks_page_shows_its_histograms_per_queue(viewer_client, rollups):
    rollup(rollups, "bulk", "shop.send_receipt", runs=[20.0], waits=[400.0])
    url = reverse("deadletters:task-timing", args=["shop.send_receipt"])
    response = viewer_client.get(url, {"window": "24h"})
    assert response.status_code == 200
    html = response.content.decode()
    assert '<h1>Timing of <code class="ident">shop.<wbr>send_<wbr>receipt</code></h1>' in html
    queues = re.findall(r'<section class="queue-timing" data-queue="([^"]+)">', html)
    assert queues == ["bulk", "default"]
    default = html.split('data-queue="default">')[-1]
    wait = re.search(r'data-kind="queue-wait">(.*?)</figure>', default, re.S).group(1)
    assert '<strong class="attempts">10</strong>' in wait
    assert re.findall(r"<title>([^<]*: [1-9]\d* attempts?)</title>", wait) == [
        "2.5s to 5s: 10 attempts"
    ]
    assert '<strong data-quantile="p50">3.8 s</strong>' in wait
    assert "shop.newsletter" not in html
    bulk = row_of(html, "shop.send_receipt")  # the first row: bulk
    assert bulk == ["1", "20.0 s", "29.0 s", "29.8 s", "7.5 min", "9.8 min", "9.9 min"]


def test_a_task_with_nothing_finished_in_the_window_says_so(viewer_client, rollups):
    url = reverse("deadletters:task-timing", args=["shop.unknown"])
    html = viewer_client.get(url).content.decode()
    assert "No attempt of this task finished in the last 1h." in html
    assert viewer_client.get(url, {"window": "1y"}).status_code == 400


def test_the_timing_pages_need_a_login(client):
    url = reverse("deadletters:task-timing", args=["shop.send_receipt"])
    assert client.get(url).status_code == 302
