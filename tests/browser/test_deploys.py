"""Deploy markers in the browser (issue 32): a deploy recorded as a pipeline records it is drawn
on the health page's charts with its version, listed under Deploys, and "since deploy" filters
the dead letters to those that died after it; at 1280 and 390 px, axe-core clean."""

import re
from datetime import timedelta

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone
from playwright.sync_api import expect

from jobqueue.models import JobCounter
from tests.browser.test_console import login
from tests.cli import run
from tests.factories import DeadLetterFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def serious(page) -> list[str]:
    return [
        f"{v['id']} {[node['target'] for node in v['nodes']][:3]}"
        for v in Axe().run(page).response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def no_sideways_scroll(page):
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner


@pytest.mark.parametrize("width", [1280, 390])
def test_a_deploy_is_marked_on_the_charts_and_filters_since_it(
    page, live_server, screenshot, width
):
    now = timezone.now()
    for minutes in range(0, 55, 5):
        JobCounter.objects.create(
            minute=(now - timedelta(minutes=minutes)).replace(second=0, microsecond=0),
            queue_name="default",
            task_path="shop.send_receipt",
            succeeded=10 + minutes,
            failed=minutes % 4,
            dead=1 if minutes < 20 else 0,
        )
    before = DeadLetterFactory(
        task_path="shop.send_receipt",
        last_error="died before the deploy",
        dead_lettered_at=now - timedelta(minutes=40),
    )
    assert run("deploy", "mark", "--version", "2026.12.4", "--note", "receipt fix").code == 0
    after = DeadLetterFactory(
        task_path="shop.send_receipt",
        last_error="died after the deploy",
        dead_lettered_at=timezone.now() + timedelta(seconds=1),
    )
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/")

    # Each of the three minute charts draws the mark, the version written beside it.
    marks = page.locator("#health figure.chart .deploy-mark")
    expect(marks).to_have_count(3)
    expect(marks.first.locator("text")).to_have_text("2026.12.4")
    expect(marks.first.locator("text")).to_be_visible()
    title = marks.first.locator("title").text_content()
    assert title.startswith("Deploy 2026.12.4 at ") and title.endswith("receipt fix")
    # The line is drawn where the deploy falls: the last minutes of the hour, at the right.
    line = marks.first.locator("line").bounding_box()  # a vertical line: no width
    svg = page.locator("#health figure.chart svg").first.bounding_box()
    assert line["x"] > svg["x"] + svg["width"] * 0.8 and line["height"] > svg["height"] * 0.6
    # The Deploys section lists it, and the timing window offers "since deploy".
    deploys = page.locator("#deploys")
    expect(deploys.locator('tr[data-version="2026.12.4"]')).to_contain_text("receipt fix")
    expect(page.locator("#timing nav.windows")).to_contain_text("since deploy")
    no_sideways_scroll(page)
    assert serious(page) == []
    screenshot(f"deploy-marks-{width}")

    # "since deploy" in the letters list's From: only the letter that died after it.
    page.goto(f"{live_server.url}/deadletters/list/")
    since = page.locator('form.filters input[name="since"]')
    since.fill("deploy")
    since.press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]since=deploy(&|$)"))
    rows = page.locator("table.letters tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(after.last_error)
    expect(page.locator("table.letters")).not_to_contain_text(before.last_error)
    expect(page.locator(".applied")).to_contain_text("since=deploy")
    no_sideways_scroll(page)
    assert serious(page) == []

    # A bad bound is named beside its field; the page still answers.
    page.goto(f"{live_server.url}/deadletters/list/?since=whenever")
    expect(page.locator("p.error")).to_contain_text("Not a time: 'whenever'")
    expect(page.locator("table.letters tbody tr")).to_have_count(2)
    assert serious(page) == []
