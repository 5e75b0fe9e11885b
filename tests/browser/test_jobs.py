"""The jobs browser in Chromium: an operator filters waiting jobs, cancels two through the
frozen-selection preview, and pauses a queue from the health page."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobqueue.models import Job, JobState, PausedQueue
from tests.audit import audited
from tests.browser.test_console import login
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_cancels_scheduled_jobs_and_pauses_a_queue(
    page, live_server, screenshot, readme_screenshot
):
    later = timezone.now() + timedelta(hours=2)
    newsletters = [
        JobFactory(
            task_path="shop.send_newsletter",
            queue_name="mail",
            run_after=later + timedelta(minutes=i),
            kwargs={"segment": i, "api_key": "sk-live-123"},
        )
        for i in range(3)
    ]
    JobFactory(task_path="shop.sync_stock", done=True)
    JobFactory(task_path="shop.charge", running=True)
    DeadLetterFactory(task_path="shop.send_receipt")
    login(page, live_server, "operator")

    page.get_by_role("navigation").get_by_role("link", name="Jobs", exact=True).click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(6)
    page.locator('.state-tabs a[href$="state=scheduled"]').click()
    expect(page).to_have_url(re.compile(r"state=scheduled"))
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(3)
    readme_screenshot("jobs")

    for job in newsletters[:2]:
        page.check(f'input[name="ids"][value="{job.pk}"]')
    page.click('button[value="cancel"]')
    expect(page.locator("h1")).to_have_text("Cancel 2 jobs?")
    page.fill('textarea[name="reason"]', "campaign called off")
    page.click("form.confirm button[type=submit]")
    expect(page.locator(".messages li")).to_have_text("2 jobs cancelled.")
    screenshot("jobs-cancelled")
    states = dict(Job.objects.filter(pk__in=[j.pk for j in newsletters]).values_list("pk", "state"))
    assert [states[j.pk] for j in newsletters] == [
        JobState.CANCELLED,
        JobState.CANCELLED,
        JobState.READY,
    ]
    assert [reason for *_, reason in audited("job")].count("campaign called off") == 2

    page.goto(f"{live_server.url}/deadletters/jobs/{newsletters[0].pk}/")
    expect(page.locator("#history + ul")).to_contain_text("campaign called off")
    expect(page.locator("pre.payload")).not_to_contain_text("sk-live-123")

    page.get_by_role("navigation").get_by_role("link", name="Health", exact=True).click()
    page.fill('#queue-control input[name="queue"]', "mail")
    page.fill('#queue-control input[name="reason"]', "SMTP provider down")
    page.click('#queue-control button[value="pause"]')
    expect(page.locator(".messages li")).to_have_text("Queue mail paused.")
    expect(page.locator('tr[data-queue="mail"] td.queue-state')).to_contain_text(
        "SMTP provider down"
    )
    assert PausedQueue.objects.get().paused_by == "operator"
