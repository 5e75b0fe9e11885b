"""Issue 32's per-queue rows in Chromium: an operator pauses a queue from its row on the health
page (a reason typed while the page polls is kept), sees it paused there and resumes it from the
same row, and finds both changes in the queue's history on the Audit page. At both widths,
axe-core clean."""

from datetime import timedelta

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone
from playwright.sync_api import expect

from jobqueue.models import PausedQueue, WorkerRecord
from tests.audit import audited
from tests.browser.test_audit_log import row_of
from tests.browser.test_console import login
from tests.factories import JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The poll's request and swap of the health part, now rather than at its next tick (every
# OVERVIEW_POLL_SECONDS): resolves once swapped. A tick of its own only comes that long after a
# swap, so a row's message stays up for the assertions that read it.
POLL_NOW = """() => htmx.ajax("GET", "/deadletters/health/",
  {source: "#health", target: "#health", swap: "outerHTML"}).then(() => true)"""


def serious(page):
    return [
        (v["id"], [n["html"][:200] for n in v["nodes"]])
        for v in Axe().run(page).response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@pytest.mark.parametrize("width", [1280, 390])
def test_operator_pauses_and_resumes_a_queue_from_its_row_and_finds_the_audit_entries(
    page, live_server, settings, screenshot, width
):
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"mail": 5}}
    now = timezone.now()
    JobFactory.create_batch(2, task_path="shop.send_receipt", queue_name="mail")
    JobFactory(task_path="shop.send_receipt", queue_name="mail", running=True, locked_by="web-1:7")
    JobFactory(task_path="shop.sync_stock", queue_name="default", run_after=now - timedelta(1))
    WorkerRecord.objects.create(
        worker_id="web-1:7",
        host="web-1",
        pid=7,
        queues=["mail"],
        concurrency=4,
        started_at=now - timedelta(hours=1),
        last_heartbeat_at=now,
    )
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/deadletters/health/")
    mail = page.locator('table.queue-figures tr[data-queue="mail"]')
    expect(mail.locator("td.queue-state")).to_have_text("running")
    expect(mail.locator("td.rate")).to_have_text("at most 5/s")
    expect(mail.locator("td.running")).to_contain_text("web-1:7 1")
    expect(mail.locator("td.concurrency")).to_have_text("4 slots on 1 worker")
    assert serious(page) == []

    # A reason typed survives the poll's swap of the table, focus and all.
    reason = mail.get_by_label("Reason")
    reason.fill("SMTP provider down")
    before = page.evaluate("document.querySelector('#health table.queue-figures') !== null")
    page.evaluate("document.querySelector('#health').dataset.swapped = 'no'")
    assert before and page.evaluate(POLL_NOW)
    expect(page.locator("#health:not([data-swapped])")).to_be_attached()  # a new part
    expect(reason).to_have_value("SMTP provider down")
    expect(reason).to_be_focused()
    mail.get_by_role("button", name="Pause mail").click()

    health = page.locator("#health")
    expect(health.locator(".messages li")).to_have_text("Queue mail paused.")
    expect(mail.locator("td.queue-state")).to_contain_text("paused by operator")
    expect(mail.locator("td.queue-state")).to_contain_text("SMTP provider down")
    expect(mail.locator("td.oldest")).to_have_text("paused")
    assert PausedQueue.objects.get().queue_name == "mail"
    # The Oldest ready figure is the running queue's, the paused one's wait said apart.
    expect(
        health.locator(".figure", has=page.locator('[data-figure="oldest-ready"]'))
    ).to_contain_text("not counting 2 ready in paused queues")
    screenshot(f"queue-paused-{width}")
    assert serious(page) == []

    # Resumed from the same row: its reason box starts empty (not the pause's reason).
    resume_reason = mail.get_by_label("Reason")
    expect(resume_reason).to_have_value("")
    resume_reason.fill("provider back")
    mail.get_by_role("button", name="Resume mail").click()
    expect(health.locator(".messages li")).to_have_text("Queue mail resumed.")
    expect(mail.locator("td.queue-state")).to_have_text("running")
    assert not PausedQueue.objects.exists()
    assert audited("queue") == [
        ("pause", "mail", "operator", "SMTP provider down"),
        ("resume", "mail", "operator", "provider back"),
    ]

    # The row's history link: the queue's entries on the Audit page.
    mail.get_by_role("link", name="history").click()
    expect(row_of(page, "queue.pause")).to_contain_text("SMTP provider down")
    expect(row_of(page, "queue.resume")).to_contain_text("provider back")
