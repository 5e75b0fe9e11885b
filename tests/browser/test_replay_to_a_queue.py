"""Issue 32's replay to another queue in Chromium: an operator ticks dead letters, types a queue
on the confirm page, is refused a typo beside the field (with the queue meant), corrects it and
confirms; the run page says where the jobs went, and they are there. A selection holding letters
that replay only where they came from offers no queue and says why. At both widths, axe-core
clean."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from deadletters.models import ReplayRun
from jobqueue.models import Job, WorkerRecord
from tests.browser.test_console import login
from tests.browser.util import axe_violations
from tests.factories import DeadLetterFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = [1280, 390]


def a_worker_of(queue):
    now = timezone.now()
    WorkerRecord.objects.create(
        worker_id="web-1:7", host="web-1", pid=7, queues=[queue], concurrency=2,
        started_at=now, last_heartbeat_at=now,
    )  # fmt: skip


def confirm_page(page, live_server, letters):
    page.goto(f"{live_server.url}/deadletters/list/")
    # The count arrives after the page; ticking before it lands raced its swap (CI, 390 px).
    expect(page.locator(".select-all")).to_contain_text(f"Select all {len(letters)} matching")
    for letter in letters:
        page.check(f'input[name="ids"][value="{letter.pk}"]')
    page.click('button[value="replay"]')
    expect(page.locator("h1")).to_have_text(f"Replay {len(letters)} dead letters?")


@pytest.mark.parametrize("width", WIDTHS)
def test_operator_replays_to_another_queue_after_a_typo_is_refused(
    page, live_server, screenshot, width
):
    a_worker_of("receipts-slow")
    letters = DeadLetterFactory.create_batch(2, task_path="shop.send_receipt", queue_name="mail")
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_server, "operator")
    confirm_page(page, live_server, letters)
    expect(page.locator(".own-queues")).to_have_text("Each to its own queue: mail (2).")

    page.get_by_label("Reason (required, kept in the audit log)").fill("slow lane for receipts")
    page.get_by_label("To queue (optional)").fill("receipts-slwo")
    page.get_by_role("button", name="Confirm replay", exact=True).click()
    refusal = page.locator("form.confirm .errorlist")
    expect(refusal).to_contain_text("no queue 'receipts-slwo' has jobs or is configured")
    expect(refusal).to_contain_text("did you mean 'receipts-slow'?")
    expect(refusal).to_contain_text("tick “Send them to a new queue”")
    expect(page.locator(".lead")).to_contain_text("replayed to queue receipts-slwo (refused")
    expect(page.get_by_label("Reason (required, kept in the audit log)")).to_have_value(
        "slow lane for receipts"
    )
    assert not ReplayRun.objects.exists()
    screenshot(f"replay-to-queue-refused-{width}")
    assert axe_violations(page) == []

    page.get_by_label("To queue (optional)").fill("receipts-slow")
    page.get_by_role("button", name="Confirm replay", exact=True).click()
    expect(page).to_have_url(re.compile(r"/deadletters/runs/\d+/"))
    expect(page.locator("dd.destination")).to_have_text("to queue receipts-slow")
    expect(page.locator("#progress")).to_contain_text("Finished")
    run = ReplayRun.objects.get()
    assert run.to_queue == "receipts-slow"
    assert set(
        Job.objects.filter(replayed_from__in=letters).values_list("queue_name", flat=True)
    ) == {"receipts-slow"}
    screenshot(f"replay-to-queue-run-{width}")
    assert axe_violations(page) == []


@pytest.mark.parametrize("width", WIDTHS)
def test_a_selection_with_letters_that_cannot_move_offers_no_queue(page, live_server, width):
    letters = [
        DeadLetterFactory(task_path="shop.send_receipt"),
        DeadLetterFactory(task_path="legacy.q2_task", source="django_q2"),
    ]
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_server, "operator")
    confirm_page(page, live_server, letters)
    expect(page.locator(".fixed-queue")).to_contain_text(
        "1 of these letters is replayed where it came from"
    )
    expect(page.locator('input[name="to_queue"]')).to_have_count(0)
    assert axe_violations(page) == []
