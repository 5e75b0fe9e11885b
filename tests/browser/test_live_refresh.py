"""The live-refresh control that replaces fixed polling: off, every 1, 2, 5 or 15 s, or the
page's own pace; the choice is kept (localStorage) for every page. Timed with Playwright's
clock, not by waiting: the page's timers run only when the test moves the clock."""

import pytest
from playwright.sync_api import expect

from tests.browser.test_console import login
from tests.browser.util import axe_violations
from tests.factories import DeadLetterFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Counts, inside the page, the refreshes sent and the answers swapped in.
COUNT_POLLS = """() => {
  window.__polls = 0; window.__settled = 0;
  document.addEventListener("htmx:beforeRequest", (e) => {
    if (e.detail.elt.matches("[data-poll]")) window.__polls++;
  });
  document.addEventListener("htmx:afterSettle", (e) => {
    if (e.detail.elt.matches("[data-poll]")) window.__settled++;
  });
}"""


def polls(page):
    return page.evaluate("window.__polls")


def settle(page, count):
    """Let the answer of refresh number `count` arrive (real time: the server's) and be swapped
    in (htmx settles it on a page timer, which only the test's clock moves)."""
    for _ in range(400):
        if page.evaluate("window.__settled") >= count:
            return
        page.clock.run_for(50)
        page.wait_for_timeout(25)  # Playwright's own wait, in real time: the answer's journey
    raise AssertionError(f"refresh {count} was not swapped in")


@pytest.mark.parametrize("width", [1280, 390])
def test_refresh_follows_the_chosen_pace_and_is_remembered(page, live_server, settings, width):
    settings.REDRIVE = {**settings.REDRIVE, "OVERVIEW_POLL_SECONDS": 10}
    DeadLetterFactory()
    login(page, live_server, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    page.clock.install()
    page.goto(f"{live_server.url}/deadletters/")
    page.evaluate(COUNT_POLLS)
    control = page.get_by_label("Live refresh")
    expect(control).to_have_value("auto")
    expect(control.locator("option:checked")).to_have_text("every 10 s (default)")

    # The page's own pace.
    page.clock.run_for(9_500)
    assert polls(page) == 0
    page.clock.run_for(1_000)
    assert polls(page) == 1
    settle(page, 1)

    # Every 5 s: one refresh at once, the next 5 s after it was swapped in.
    control.select_option("5")
    assert polls(page) == 2
    settle(page, 2)
    page.clock.run_for(4_800)
    assert polls(page) == 2
    page.clock.run_for(400)
    assert polls(page) == 3
    settle(page, 3)

    # Off: nothing more, however long.
    control.select_option("off")
    page.clock.run_for(120_000)
    assert polls(page) == 3
    assert axe_violations(page) == []

    # Kept for every page: the health page starts with it off too.
    page.goto(f"{live_server.url}/deadletters/health/")
    page.evaluate(COUNT_POLLS)
    expect(page.get_by_label("Live refresh")).to_have_value("off")
    page.clock.run_for(120_000)
    assert polls(page) == 0
    page.get_by_label("Live refresh").select_option("15")
    page.goto(f"{live_server.url}/deadletters/")
    expect(page.get_by_label("Live refresh")).to_have_value("15")


def test_no_fixed_polling_is_left(page, live_server):
    DeadLetterFactory()
    login(page, live_server, "operator")
    for path in ("/deadletters/", "/deadletters/health/"):
        page.goto(f"{live_server.url}{path}")
        expect(page.locator("[data-poll]")).to_have_count(1)
        assert page.locator('[hx-trigger*="every"]').count() == 0
