"""Issue 31's walk in Chromium: an operator pauses a queue and cancels jobs through "select all
matching", and finds both on the Audit page under the console; a replay a script drives with an
API token (the requests curl would send) shows up there under the API and its token;
the page axe-core clean at 1280 and 390 px."""

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import expect

from deadletters import tokens
from deadletters.roles import assign
from jobqueue.models import Job, JobState
from tests.browser.test_console import login
from tests.browser.util import axe_violations
from tests.factories import DeadLetterFactory, JobFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def row_of(page, action):
    """The Audit page's row of the one entry of `action` (its code cell, exactly)."""
    rows = page.locator("table.audit.entries tbody tr").filter(
        has=page.locator("td.action code", has_text=action)
    )
    expect(rows).to_have_count(1)
    return rows


def test_console_and_token_driven_actions_are_found_on_the_audit_page(
    page, live_server, screenshot
):
    later = timezone.now() + timedelta(hours=2)
    promos = [
        JobFactory(task_path="shop.send_promo", queue_name="mail", run_after=later)
        for _ in range(3)
    ]
    JobFactory(task_path="shop.sync_stock", queue_name="mail", run_after=later)
    login(page, live_server, "operator")

    # A queue paused from the health page.
    page.goto(f"{live_server.url}/deadletters/health/")
    page.fill('#queue-control input[name="queue"]', "mail")
    page.fill('#queue-control input[name="reason"]', "SMTP provider down")
    page.click('#queue-control button[value="pause"]')
    expect(page.locator(".messages li")).to_have_text("Queue mail paused.")

    # Every scheduled promo cancelled through "select all matching".
    page.goto(f"{live_server.url}/deadletters/jobs/?state=scheduled&task=shop.send_promo")
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    page.check('input[name="select_all"]')
    page.click('button[value="cancel"]')
    expect(page.locator("h1")).to_have_text("Cancel 3 jobs?")
    page.fill('textarea[name="reason"]', "campaign called off")
    page.click("form.confirm button[type=submit]")
    expect(page.locator(".messages li")).to_have_text("3 jobs cancelled.")
    states = set(Job.objects.filter(pk__in=[j.pk for j in promos]).values_list("state", flat=True))
    assert states == {JobState.CANCELLED}

    # A replay a script carries out with a token, call by call, as curl would send it.
    letter = DeadLetterFactory(task_path="shop.send_receipt")
    scripted = UserFactory(username="deploy-bot")
    assign(scripted, "operator")
    made = tokens.create(scripted, name="post-deploy replay", scopes="read,act", channel="code")
    api = Client()
    bearer = {"Authorization": f"Bearer {made.text}"}
    frozen = api.post(
        "/api/actions/letters.replay",
        json.dumps({"ids": [letter.pk]}),
        content_type="application/json",
        headers=bearer,
    )
    assert frozen.status_code == 201, frozen.content
    confirmed = api.post(
        f"/api/selections/{frozen.json()['selection']}/confirm",
        json.dumps({"reason": "receipt API fixed"}),
        content_type="application/json",
        headers={**bearer, "Idempotency-Key": "replay-after-deploy-1"},
    )
    assert confirmed.status_code == 200, confirmed.content

    page.get_by_role("navigation").get_by_role("link", name="Audit log", exact=True).click()
    paused = row_of(page, "queue.pause")
    expect(paused.locator("td.actor")).to_have_text("operator")
    expect(paused.locator("td.channel")).to_have_text("Console")
    expect(paused.locator("td.reason")).to_have_text("SMTP provider down")
    cancelled = row_of(page, "job.cancel")
    expect(cancelled.locator("td.channel")).to_have_text("Console")
    expect(cancelled.locator("td.reason")).to_have_text("campaign called off")
    for job in promos:
        expect(cancelled.locator("td.targets a", has_text=str(job.pk))).to_have_count(1)
    replayed = row_of(page, "letters.replay")
    expect(replayed.locator("td.actor")).to_have_text("deploy-bot")
    expect(replayed.locator("td.channel")).to_have_text(f"API token {made.token.label}")
    expect(replayed.locator("td.reason")).to_have_text("receipt API fixed")
    screenshot("audit-log")
    # Its entries' links (the queue's, the jobs') are told from the text around them by more
    # than colour, at both widths: axe-core finds nothing serious.
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.reload()
        expect(paused.locator("td.targets a", has_text="mail")).to_have_count(1)
        assert axe_violations(page) == [], width
    page.set_viewport_size({"width": 1280, "height": 900})

    # Filtered to the API channel, only the scripted replay is left.
    page.select_option('select[name="channel"]', "api")
    page.click('form.filters button[type="submit"]')
    expect(page.locator("table.audit.entries tbody tr")).to_have_count(1)
    expect(page.locator("table.audit.entries td.action code")).to_have_text("letters.replay")
