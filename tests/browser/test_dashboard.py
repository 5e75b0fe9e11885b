from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

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
