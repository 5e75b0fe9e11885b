"""The schedules page in Chromium: an operator pauses a periodic job with a reason, resumes
it and runs it now; the page shows the state, the run's job and the audit."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobqueue import store
from jobqueue.models import Job, Schedule
from tests.audit import audited
from tests.browser.test_console import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_pauses_resumes_and_runs_a_schedule(page, live_server, readme_screenshot):
    now = timezone.now()
    for name, cron, overlap in (
        ("refresh-rates", "*/5 * * * *", False),
        ("weekly-digest", "0 9 * * mon", True),
        ("nightly-cleanup", "30 2 * * *", True),
    ):
        store.schedules.upsert(
            name,
            {"task_path": "tests.tasks.noop", "cron": cron, "timezone": "UTC", "overlap": overlap},
            first_tick=now + timedelta(minutes=5),
            now=now,
        )
    login(page, live_server, "operator")
    page.get_by_role("navigation").get_by_role("link", name="Schedules", exact=True).click()
    row = page.locator("#schedule-table tr", has_text="weekly-digest")
    row.locator('input[name="reason"]').fill("digest provider down")
    row.locator('button[value="pause"]').click()
    expect(page.locator(".messages")).to_contain_text("weekly-digest paused.")
    row = page.locator("#schedule-table tr", has_text="weekly-digest")
    expect(row).to_contain_text("digest provider down")
    assert Schedule.objects.get(name="weekly-digest").paused_by == "operator"

    row = page.locator("#schedule-table tr", has_text="refresh-rates")
    row.locator('input[name="reason"]').fill("rates are stale")
    row.locator('button[value="run"]').click()
    job = Job.objects.get()
    expect(page.locator(".messages")).to_contain_text(f"refresh-rates: job {job.pk} enqueued.")
    row = page.locator("#schedule-table tr", has_text="refresh-rates")
    expect(row.locator(f'a[href="/deadletters/jobs/{job.pk}/"]')).to_have_text(f"job {job.pk}")
    readme_screenshot("schedules")

    row = page.locator("#schedule-table tr", has_text="refresh-rates")
    row.locator('input[name="reason"]').fill("again")
    row.locator('button[value="run"]').click()  # it does not overlap: refused, with why
    expect(page.locator(".messages")).to_contain_text("still ready or running")
    assert Job.objects.count() == 1
    assert [verb for verb, *_ in audited("schedule")] == [
        "pause",
        "run",
    ]
