"""Dark mode: a browser that prefers a dark colour scheme gets dark pages (the console's colours
are custom properties set once per scheme), with every text readable: axe-core finds no
contrast or other serious violation on any page, at 1280 and 390 px, light or dark."""

import pytest

from tests.browser.test_console import login
from tests.browser.test_layout import console_pages
from tests.browser.util import axe_violations
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LUMINANCE = """el => {
  const rgb = getComputedStyle(el).backgroundColor.match(/[0-9.]+/g).map(Number);
  return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255;
}"""


@pytest.fixture
def dark_page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="dark")
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


def test_dark_scheme_pages_are_dark_and_readable_at_both_widths(
    dark_page, live_server, screenshot_dir
):
    page = dark_page
    login(page, live_server, "operator")
    pages = console_pages(live_server, UserFactory(username="operator"))
    found = []
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            page.goto(f"{live_server.url}{path}")
            page.wait_for_load_state("load")
            if page.locator("body").evaluate(LUMINANCE) > 0.2:
                found.append(f"{name} at {width}px: the page is not dark")
            card = page.locator(".card, table.grid tbody tr, .figure").first
            if card.count() and card.evaluate(LUMINANCE) > 0.2:
                found.append(f"{name} at {width}px: a card or row is not dark")
            found += [f"{name} at {width}px: {v}" for v in axe_violations(page)]
            page.screenshot(path=str(screenshot_dir / f"dark-{name}-{width}.png"), full_page=True)
    page.context.clear_cookies()
    page.goto(f"{live_server.url}/accounts/login/")
    found += [f"login: {v}" for v in axe_violations(page)]
    assert found == []


def test_light_scheme_is_unchanged(page, live_server):
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/deadletters/")
    assert page.locator("body").evaluate(LUMINANCE) > 0.9
