"""The workflow pages in Chromium: an operator finds the demo's onboardings, opens the one
whose card was refused (dead at its first step, the letter linked), and a sleeping one with its
wake-up time; the contacts import shows its batch's progress and its bad rows' letters; a
workflow's timeline at 1280 and 390 px, axe-core clean."""

import re

import pytest
from playwright.sync_api import expect

from demo import onboarding
from jobqueue.models import DeadLetter, WorkflowStep
from tests.browser.test_console import login
from tests.browser.test_layout import workflow_page
from tests.browser.util import axe_violations
from tests.factories import DeadLetterFactory
from tests.jobqueue.test_worker import burst

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_reads_a_dead_and_a_sleeping_onboarding_and_a_batch(
    page, live_server, readme_screenshot
):
    *customers, contacts = onboarding.seed(customers=3)
    burst()
    login(page, live_server, "viewer")
    page.get_by_role("navigation").get_by_role("link", name="Workflows", exact=True).click()
    # The row is found by its id, never by a digit its timestamps might contain.
    row = page.locator(f'table.workflows tr[data-workflow-id="{customers[-1]}"]')
    expect(row.locator("td")).to_have_count(8)
    expect(row.locator("td").nth(2)).to_have_text("dead")
    expect(row.locator("td").nth(3)).to_have_text("charge_card")

    page.goto(f"{live_server.url}/deadletters/workflows/{customers[-1]}/")
    expect(page.locator("main")).to_contain_text("refuses payment method 'tok_expired'")
    letter = DeadLetter.objects.get(original_job_id=customers[-1])
    page.click(f"a[href$='/deadletters/{letter.pk}/']")
    expect(page).to_have_url(re.compile(rf"/deadletters/{letter.pk}/$"))

    page.goto(f"{live_server.url}/deadletters/workflows/{customers[0]}/")
    expect(page.locator("h1 .state")).to_have_text("sleeping")
    expect(page.locator("ol.steps > li h3 code")).to_have_text(
        ["charge_card", "provision_account", "send_welcome_email", "setup_grace"]
    )
    readme_screenshot("workflow")

    page.goto(f"{live_server.url}/deadletters/workflows/{contacts}/")
    progress = page.locator('ol.steps dt:text-is("Progress") + dd')
    expect(progress).to_have_text(re.compile(r"^14 done, 6 failed of 20; next item 20$"))
    buried = DeadLetter.objects.filter(task_path="demo.onboarding.import_contact")
    assert buried.count() == 6
    links = page.locator("ul.letters-of-batch a")
    expect(links).to_have_count(6)
    hrefs = {links.nth(i).get_attribute("href") for i in range(6)}
    assert hrefs == {f"/deadletters/{item.pk}/" for item in buried}


def test_the_timeline_reads_at_a_glance_at_both_widths(page, live_server, screenshot):
    """Each step a row with its start, its length and a bar on one scale: waits hollow, work
    solid, a tick per failed attempt; at 390 px a card per step, its figures labelled."""
    pk = workflow_page([DeadLetterFactory(), DeadLetterFactory()])
    dead = WorkflowStep.objects.get(workflow_id=pk, state="dead")
    ticks = sum(1 for e in dead.errors if isinstance(e, dict) and e.get("at"))
    assert ticks >= 1
    login(page, live_server, "viewer")
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/deadletters/workflows/{pk}/")
        rows = page.locator("table.timeline-steps tbody tr")
        expect(rows.locator("td.kind")).to_have_text(
            ["Step", "Wait for a signal", "Sleep", "Batch", "Step"]
        )
        expect(page.locator(".timeline-total")).to_contain_text("Took 1 h")
        expect(rows.nth(0).locator("td.offset")).to_have_text("+0.0 s")
        expect(rows.nth(2).locator("td.took")).to_have_text(re.compile(r"^waited \d+ min$"))
        expect(rows.nth(4).locator(".failed-attempts")).to_have_text(f"{len(dead.errors)} failed")
        expect(rows.nth(4).locator("line.failure")).to_have_count(ticks)
        # A wait's bar is drawn unlike work's (hollow, dashed), whatever the colours.
        fill = "r => [getComputedStyle(r).fill, getComputedStyle(r).strokeDasharray]"
        assert rows.nth(2).locator("rect.span").evaluate(fill) != rows.nth(0).locator(
            "rect.span"
        ).evaluate(fill)
        bar = rows.nth(0).locator("svg.timeline-bar").bounding_box()
        assert bar and bar["width"] >= 100, bar
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert scroll <= inner, (width, scroll)
        assert axe_violations(page) == [], width
        screenshot(f"workflow-timeline-{width}")
    # At 390 px each step is a card: its cells labelled from the header, one under another.
    took = rows.nth(0).locator("td.took")
    expect(took).to_have_attribute("data-label", "Took")
    assert took.evaluate("td => getComputedStyle(td, '::before').content") == '"Took"'
    cells = rows.nth(0).locator("td")
    assert cells.nth(3).bounding_box()["y"] > cells.nth(2).bounding_box()["y"]
    # Dark mode: the bars take the dark scheme's colours (console.css's custom properties).
    light = rows.nth(0).locator("rect.span").evaluate("r => getComputedStyle(r).fill")
    page.emulate_media(color_scheme="dark")
    expect(rows.nth(0).locator("rect.span")).not_to_have_css("fill", light)
    assert axe_violations(page) == []
