from datetime import timedelta

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone
from playwright.sync_api import expect

from jobqueue import store
from jobqueue.models import JobCounter, WorkerRecord
from tests.browser.test_console import login
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_health_dashboard_renders_figures_charts_and_workers(
    page, live_server, screenshot, readme_screenshot
):
    now = timezone.now()
    JobFactory.create_batch(3, task_path="shop.send_receipt")
    JobFactory(task_path="shop.send_receipt", running=True)
    DeadLetterFactory.create_batch(2, task_path="shop.send_receipt")
    for minutes in range(0, 50, 5):
        JobCounter.objects.create(
            minute=(now - timedelta(minutes=minutes)).replace(second=0, microsecond=0),
            queue_name="default",
            task_path="shop.send_receipt",
            succeeded=20 + minutes,
            failed=minutes % 3,
            last_success_at=now,
        )
    WorkerRecord.objects.create(
        worker_id="web-1:4242:abc123",
        host="web-1",
        pid=4242,
        started_at=now - timedelta(hours=2),
        last_heartbeat_at=now,
    )
    WorkerRecord.objects.create(
        worker_id="web-2:77:def456",
        host="web-2",
        pid=77,
        started_at=now - timedelta(hours=5),
        last_heartbeat_at=now - timedelta(minutes=20),
    )
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/")
    health = page.locator("#health")
    expect(health.locator('[data-figure="ready"]')).to_have_text("3")
    expect(health.locator("tr.lost")).to_contain_text("web-2:77:def456")
    expect(health.locator("figure.chart.ok svg rect").first).to_be_attached()
    health.locator(".figure a", has_text="Dead letters").click()
    expect(page).to_have_url(f"{live_server.url}/deadletters/")
    page.goto(f"{live_server.url}/")
    expect(page.locator("figure.chart.ok .tick").first).to_be_visible()
    screenshot("dashboard")
    readme_screenshot("health")


def rollups(now, queue, task, runs, waits):
    tally = store.Tally()
    for seconds in runs:
        tally.observe("run", seconds)
    for seconds in waits:
        tally.observe("wait", seconds)
    store.record_worker(
        worker_id="web-1:4242:abc123",
        host="web-1",
        pid=4242,
        queues=None,
        concurrency=1,
        started_at=now,
        succeeded=len(runs),
        failed=0,
        current_job_ids=[],
        tallies={(now.replace(second=0, microsecond=0), queue, task): tally},
        now=now,
    )


@pytest.mark.parametrize("width", [1280, 390])
def test_run_time_and_queue_wait_by_window_and_a_tasks_histograms(page, live_server, width):
    now = timezone.now()
    rollups(now, "default", "shop.send_receipt", [0.08] * 8 + [0.9] * 2, [3.0] * 10)
    rollups(now - timedelta(hours=3), "default", "shop.send_receipt", [4000.0], [])
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/")
    timing = page.locator("#timing")
    row = timing.locator('tr[data-task="shop.send_receipt"]')
    expect(row.locator("td.run")).to_have_text(["81 ms", "875 ms", "975 ms"])
    expect(row.locator("td.wait")).to_have_text(["3.8 s", "4.9 s", "5.0 s"])
    expect(timing.locator('[aria-current="true"]')).to_have_text("1h")
    # A wider window takes the run of three hours ago in: the slowest now beyond an hour.
    timing.get_by_role("link", name="6h").click()
    expect(page).to_have_url(f"{live_server.url}/?window=6h#timing")
    expect(row.locator("td.run")).to_have_text(["84 ms", "> 1 h", "> 1 h"])
    expect(row.locator("td.num").first).to_have_text("11")
    # The task's page keeps the window and draws its histograms, a bar per bucket.
    row.get_by_role("link", name="shop.send_receipt").click()
    expect(page.locator("h1")).to_have_text("Timing of shop.send_receipt")
    expect(page.locator('[aria-current="true"]')).to_have_text("6h")
    section = page.locator('section.queue-timing[data-queue="default"]')
    run = section.locator('figure[data-kind="run-time"]')
    expect(run.locator("g.bucket")).to_have_count(21)
    expect(run.locator("rect.bar")).to_have_count(3)  # (50, 100] ms, (0.5, 1] s, over 1 h
    expect(run.locator('[data-quantile="p50"]')).to_have_text("84 ms")
    expect(section.locator('figure[data-kind="queue-wait"] .attempts')).to_have_text("10")
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner
    violations = [
        v["id"]
        for v in Axe().run(page).response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert violations == []
