"""Tables on a phone and identifiers everywhere: at 390 px every table's rows are cards of
"label: value" lines, so no page and no table scrolls sideways; a dotted path or a CamelCase
error class wraps only between whole segments (`PermanentEr|ror` never), at 1280 px too."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_console import login
from tests.browser.test_layout import LONG_TASK, console_pages
from tests.browser.util import axe_violations
from tests.factories import DeadLetterFactory, JobFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1280, 390)

# Where the text of an element wraps: the two characters either side of each line break, found
# from each character's box.
LINE_BREAKS = """el => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  const chars = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rect = range.getClientRects()[0];
      if (rect && rect.width) chars.push([node.data[i], rect.top]);
    }
  }
  const breaks = [];
  for (let i = 1; i < chars.length; i++) {
    if (chars[i][1] > chars[i - 1][1] + 2) breaks.push(chars[i - 1][0] + chars[i][0]);
  }
  return breaks;
}"""

# A break between segments: after a separator, or between the words of a CamelCase name.
SEGMENT_BOUNDARY = re.compile(r"^(?:[./:_@,\- ].|[a-z0-9][A-Z]|[A-Z][A-Z])$")


def mid_word_breaks(page, selector):
    found = []
    for element in page.locator(selector).all():
        if not element.is_visible():
            continue
        for pair in element.evaluate(LINE_BREAKS):
            if not SEGMENT_BOUNDARY.match(pair):
                found.append(f"{element.text_content()!r} broken at {pair!r}")
    return found


def test_identifiers_wrap_between_whole_segments_at_both_widths(page, live_server):
    for _ in range(3):
        DeadLetterFactory(
            task_path=LONG_TASK,
            error_class="shop.integrations.payments.errors.PermanentError",
            last_error="card declined " * 30,
        )
    DeadLetterFactory(task_path="demo.tasks.send_email", error_class="builtins.ConnectionError")
    JobFactory.create_batch(2, task_path=LONG_TASK, queue_name="receipts")
    login(page, live_server, "operator")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for path in ("/deadletters/", "/deadletters/list/", "/deadletters/jobs/"):
            page.goto(f"{live_server.url}{path}")
            idents = page.locator("table.grid code.ident")
            expect(idents.first).to_be_visible()
            assert mid_word_breaks(page, "table.grid code.ident") == [], (path, width)
        # The error class is one unbroken word where it fits: "PermanentError" on one line.
        page.goto(f"{live_server.url}/deadletters/list/")
        cell = page.locator("table.letters code.ident", has_text="PermanentError").first
        assert not any(
            pair in ("tE", "Er", "rr", "ro", "or") for pair in cell.evaluate(LINE_BREAKS)
        )


def test_at_390_px_tables_are_cards_and_nothing_scrolls_sideways(page, live_server, screenshot):
    login(page, live_server, "operator")
    pages = console_pages(live_server, UserFactory(username="operator"))
    page.set_viewport_size({"width": 390, "height": 900})
    overflow = []
    for name, path in pages.items():
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        if scroll > inner:
            overflow.append(f"{name}: page scrollWidth {scroll} > {inner}")
        # No table hides columns behind a sideways scroll of its own either.
        for box in page.locator(".scroll:visible").all():
            wide, client = box.evaluate("b => [b.scrollWidth, b.clientWidth]")
            if wide > client + 1:
                overflow.append(f"{name}: a table box scrolls ({wide} > {client})")
        overflow += [f"{name}: {b}" for b in mid_word_breaks(page, "table.grid code.ident")]
        screenshot(f"narrow-{name}")
    assert overflow == []

    # A row is a card: each cell shows its column's name beside its value.
    page.goto(f"{live_server.url}/deadletters/list/?state=pending")
    row = page.locator("table.letters tbody tr").first
    job_type = row.locator("td").nth(3)
    assert job_type.get_attribute("data-label") == "Job type"
    label = job_type.evaluate("td => getComputedStyle(td, '::before').content")
    assert label == '"Job type"'
    card, cell = row.bounding_box(), job_type.bounding_box()
    assert card["width"] <= 390 and cell["y"] > row.locator("td").nth(2).bounding_box()["y"]
    # The header's "select this page" box stays reachable without the header row.
    expect(page.locator("table.letters .select-page")).to_be_visible()
    # Labels survive an htmx swap of the rows (a page of results loaded in place).
    page.fill('input[name="job_type"]', LONG_TASK)
    page.click('form.filters button[type="submit"]')
    expect(page).to_have_url(re.compile("job_type="))
    expect(page.locator("table.letters tbody tr").first.locator("td").nth(3)).to_have_attribute(
        "data-label", "Job type"
    )
    # Headers spanning columns are joined: the timing table's "Run time p95".
    page.goto(f"{live_server.url}{pages['health']}")
    cells = page.locator("table.timings tbody tr").first.locator("td")
    expect(cells.nth(4)).to_have_attribute("data-label", "Run time p95")
    expect(cells.nth(7)).to_have_attribute("data-label", "Queue wait p95")


def test_card_layout_is_accessible(page, live_server):
    login(page, live_server, "operator")
    pages = console_pages(live_server, UserFactory(username="operator"))
    found = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name in ("list", "overview", "jobs", "health", "run", "detail", "audit", "schedules"):
            page.goto(f"{live_server.url}{pages[name]}")
            page.wait_for_load_state("load")
            found += [f"{name} at {width}px: {v}" for v in axe_violations(page)]
    assert found == []
