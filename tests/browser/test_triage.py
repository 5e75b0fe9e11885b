"""Triage in Chromium: an operator drills from a job type's causes to exactly one cause's
letters, and reads a replay run that its canary halted (docs/triage.png)."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from deadletters.models import RunState
from jobqueue import store
from jobqueue.models import DeadLetter, JobState
from tests.browser.test_console import login
from tests.deadletters.test_canary import FakeClock, canary_jobs, settle, start, work_runner_jobs
from tests.factories import JobFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def die(task_path, message, at):
    job = JobFactory(running=True, task_path=task_path)
    entry = store.error_entry(job, class_path="shop.Refused", message=message, traceback="", now=at)
    assert store.fail(job, entry, retry_at=None, now=at)


def test_operator_drills_into_a_cause_and_reads_a_halted_canary(
    page, live_server, readme_screenshot
):
    now = timezone.now()
    for n in range(6):
        die("shop.charge", f"order {1000 + n} not found", now - timedelta(hours=n))
    for n in range(3):
        die("shop.charge", f"card 'tok_{n}x9' declined by the issuer", now - timedelta(minutes=n))
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/deadletters/list/?job_type=shop.charge")
    causes = page.locator("section.causes")
    expect(causes).to_contain_text("Pending by cause")
    expect(causes.locator("tbody tr")).to_have_count(2)
    readme_screenshot("triage")
    causes.locator("a", has_text="declined by the issuer").click()
    expect(page).to_have_url(re.compile(r"fingerprint=[0-9a-f]{16}"))
    rows = page.locator("#results tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#results")).not_to_contain_text("not found")
    # Exactly this cause's letters, exported (the buttons submit a form of their own).
    with page.expect_download() as download:
        page.click("button[form=export][value=csv]")
    exported = Path(download.value.path()).read_text().splitlines()
    assert len(exported) == 1 + 3 and all("declined by the issuer" in r for r in exported[1:])

    # A run whose canary died again: halted by itself, said so on its page.
    clock = FakeClock()
    operator = UserFactory(username="canary-owner")
    letters = list(DeadLetter.objects.filter(last_error__contains="not found"))
    run = start(operator, letters, canary=3, clock=clock)
    jobs = canary_jobs(run)
    settle(jobs, JobState.DEAD)
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert run.state == RunState.HALTED
    page.goto(f"{live_server.url}/deadletters/runs/{run.pk}/")
    expect(page.locator("main")).to_contain_text("Halted by canary")
    expect(page.locator("main")).to_contain_text("Resume despite the canary")
