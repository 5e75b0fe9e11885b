"""What the console shows is exact (issue 47 item 7), in a browser: at 390 px no two labels of
the timing table's or the health tables' cards overlap (their boxes compared), every control on
Health is reached by Tab, the jobs browser's tabs count what they list under a filter applied
in place, and identifiers break only between segments at both widths."""

import re
from datetime import timedelta
from itertools import pairwise

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobqueue import store
from jobqueue.models import JobCounter
from tests import tasks
from tests.browser.test_console import login
from tests.browser.test_narrow import LINE_BREAKS, SEGMENT_BOUNDARY
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1280, 390)


def worker(now, worker_id="web-1:4242:abc123", queue="receipts", task="demo.tasks.send_receipt"):
    tally = store.Tally()
    tally.succeeded = 3
    for seconds in (0.08, 0.09, 0.9):
        tally.observe("run", seconds)
        tally.observe("wait", 3.0)
    store.record_worker(
        worker_id=worker_id,
        host="web-1",
        pid=4242,
        queues=None,
        concurrency=2,
        started_at=now - timedelta(minutes=30),
        succeeded=3,
        failed=0,
        current_job_ids=[],
        tallies={(now.replace(second=0, microsecond=0), queue, task): tally},
        last_claim_at=now - timedelta(seconds=40),
        now=now,
    )


def health_data():
    """A health page with every kind of control: queue rows (Pause), tasks, a worker, a
    deploy, blocked ordering keys, the timing table."""
    now = timezone.now()
    JobFactory.create_batch(2, task_path="demo.tasks.refresh_search_index", queue_name="search")
    JobFactory(task_path="demo.tasks.send_receipt", queue_name="receipts", running=True)
    DeadLetterFactory(task_path="demo.tasks.send_receipt", queue_name="receipts")
    for key in ("acct:1", "acct:1"):
        tasks.noop.using(ordering_key=key).enqueue(1)
    for job in store.claim(worker_id="w", queues=["default"], limit=1, lease_seconds=60):
        entry = store.error_entry(
            job, class_path="builtins.ValueError", message="x", traceback="", now=now
        )
        store.fail(job, entry, retry_at=None)
    JobCounter.objects.create(
        minute=now.replace(second=0, microsecond=0),
        queue_name="search",
        task_path="demo.tasks.refresh_search_index",
        succeeded=4,
        failed=1,
        last_success_at=now,
    )
    worker(now)
    store.deploys.mark(
        "2026.12.7", actor="ci", note="exact console", at=now - timedelta(minutes=10)
    )


FOCUSABLE = """() => Array.from(document.querySelectorAll(
  'a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]'
)).filter(el => !el.disabled && el.tabIndex >= 0 && el.getClientRects().length
  && getComputedStyle(el).visibility !== 'hidden').map(el => el.outerHTML.slice(0, 160))"""


def refresh_health(page):
    """One live refresh of the health part, as the poll sends it, and its swap waited for."""
    page.evaluate(
        """() => { document.getElementById('health').dataset.old = 'yes';
                   htmx.trigger(document.getElementById('health'), 'redrive:refresh'); }"""
    )
    page.wait_for_function(
        "() => { const h = document.getElementById('health');"
        " return h && h.dataset.old !== 'yes' && !h.classList.contains('htmx-settling'); }"
    )


def tab_through(page, refresh_between=False, limit=400) -> list[str]:
    """Each element Tab reaches from the top of the page, in order, until it wraps; with
    `refresh_between`, the health part is refreshed (swapped) between every two Tabs, as a
    fast poll does to an operator tabbing through it."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.evaluate("window.scrollTo(0, 0)")
    reached = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        html = page.evaluate(
            "document.activeElement === document.body ? null"
            " : document.activeElement.outerHTML.slice(0, 160)"
        )
        if html is None or (reached and html == reached[0]):
            break
        reached.append(html)
        if refresh_between:
            refresh_health(page)
    return reached


@pytest.mark.parametrize("width", WIDTHS)
def test_every_control_on_health_is_reached_by_tab_through_its_live_refreshes(
    page, live_server, width
):
    health_data()
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_server, "admin")
    page.goto(f"{live_server.url}/")
    # The timer's own refreshes off: this test sends each one itself, between every two Tabs.
    page.select_option("select.live-refresh-choice", "off")
    expect(page.locator("#health .figure").first).to_be_visible()
    expect(page.locator("table.timings")).to_be_visible()
    # No link without a name: each has text or a label.
    empty = page.evaluate(
        """() => Array.from(document.querySelectorAll('a')).filter(a =>
             !(a.textContent.trim() || a.getAttribute('aria-label'))).map(a => a.outerHTML)"""
    )
    assert empty == []
    focusable = page.evaluate(FOCUSABLE)
    # The page has its controls, inside the polled part and after it: the test reads something.
    assert len(focusable) > 30
    assert any('aria-label="Pause search"' in html for html in focusable)
    assert any('value="stop"' in html for html in focusable)
    reached = tab_through(page, refresh_between=True)
    missed = [html for html in focusable if html not in reached]
    assert missed == []
    # In order, once each: the refresh neither skipped nor repeated a control.
    assert reached == focusable


def test_a_refresh_keeps_the_focused_control_focused(page, live_server):
    health_data()
    login(page, live_server, "admin")
    page.goto(f"{live_server.url}/")
    page.select_option("select.live-refresh-choice", "off")
    focusable = page.evaluate(FOCUSABLE)
    pause = page.get_by_role("button", name="Pause search")
    after = focusable[focusable.index(pause.evaluate("el => el.outerHTML.slice(0, 160)")) + 1]
    pause.focus()
    refresh_health(page)
    # The new part's button, not the old one (gone with the swap).
    expect(page.get_by_role("button", name="Pause search")).to_be_focused()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.outerHTML.slice(0, 160)") == after


# A card's labels are its cells' ::before, which no API measures: each is drawn again as a
# span with the same computed style, width and text at the same place (the cell's top, inside
# its padding), and the spans' boxes are compared. A label taller than its cell ran into the
# next cell's label (labels positioned absolutely, in a cell one line high).
LABEL_BOXES = """table => Array.from(table.querySelectorAll('tbody tr')).map(tr =>
  Array.from(tr.querySelectorAll('td[data-label]')).filter(td => td.dataset.label).map(td => {
    const style = getComputedStyle(td, '::before');
    if (style.content === 'none' || style.display === 'none') return null;
    const probe = document.createElement('span');
    for (const name of ['font-family', 'font-size', 'font-weight', 'line-height', 'width',
                        'letter-spacing', 'overflow-wrap', 'word-break'])
      probe.style.setProperty(name, style.getPropertyValue(name));
    probe.style.display = 'block';
    probe.style.position = 'absolute';
    probe.style.visibility = 'hidden';
    probe.textContent = td.dataset.label;
    document.body.appendChild(probe);
    const height = probe.getBoundingClientRect().height;
    probe.remove();
    const cell = td.getBoundingClientRect();
    const top = cell.top + parseFloat(getComputedStyle(td).paddingTop);
    return {label: td.dataset.label, top: top, bottom: top + height, cellBottom: cell.bottom};
  }).filter(Boolean))"""


def overlapping_labels(page, selector) -> list[str]:
    found = []
    for table in page.locator(selector).all():
        for card in table.evaluate(LABEL_BOXES):
            assert card, "a card with no labels: the test reads nothing"
            for label in card:
                if label["bottom"] > label["cellBottom"] + 0.5:
                    found.append(f"{label['label']!r} runs out of its cell")
            for a, b in pairwise(card):
                if a["bottom"] > b["top"] + 0.5:
                    found.append(f"{a['label']!r} overlaps {b['label']!r}")
    return found


def boxes_overlap(a, b) -> bool:
    return (
        a["x"] < b["x"] + b["width"] - 0.5
        and b["x"] < a["x"] + a["width"] - 0.5
        and a["y"] < b["y"] + b["height"] - 0.5
        and b["y"] < a["y"] + a["height"] - 0.5
    )


def test_at_390_px_no_two_labels_of_the_health_cards_overlap(page, live_server):
    health_data()
    page.set_viewport_size({"width": 390, "height": 900})
    login(page, live_server, "admin")
    page.goto(f"{live_server.url}/")
    for selector in ("table.timings", "table.queues", "table.workers", "table.deploys"):
        expect(page.locator(selector)).to_be_visible()
    # The long labels the page has: a spanned header joined, and a figure's heading.
    cells = page.locator("table.timings tbody tr").first.locator("td")
    expect(cells.nth(8)).to_have_attribute("data-label", "Queue wait p99")
    by_task = page.locator("table.queues tbody tr").first.locator("td")
    expect(by_task.nth(9)).to_have_attribute("data-label", "Done / failed, 5 min")
    expect(by_task.nth(10)).to_have_attribute("data-label", "Audit")
    found = []
    for selector in ("table.timings", "table.queues", "table.workers", "table.deploys"):
        found += [f"{selector}: {o}" for o in overlapping_labels(page, selector)]
    # The figures' cards: no two of a card's parts (label, value, notes) overlap.
    for figure in page.locator("#health .figure").all():
        parts = [p.bounding_box() for p in figure.locator(":scope > span").all()]
        for i, a in enumerate(parts):
            found += [
                f"figure {figure.text_content()!r}" for b in parts[i + 1 :] if boxes_overlap(a, b)
            ]
    assert found == []


def mid_word(page, selector) -> list[str]:
    found = []
    for element in page.locator(selector).all():
        if not element.is_visible():
            continue
        for pair in element.evaluate(LINE_BREAKS):
            if not SEGMENT_BOUNDARY.match(pair):
                found.append(f"{element.text_content()!r} broken at {pair!r}")
    return found


def test_identifiers_break_only_between_segments_on_health_and_the_audit_at_both_widths(
    page, live_server
):
    health_data()
    store.queues.pause("search", actor="ana", reason="index rebuild")
    store.queues.resume("search", actor="ana", reason="index rebuilt")
    login(page, live_server, "admin")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for path in ("/", "/deadletters/audit/"):
            page.goto(f"{live_server.url}{path}")
            expect(page.locator(".ident").first).to_be_visible()
            assert mid_word(page, ".ident") == [], (path, width)
        # The names the issue saw broken are identifiers there.
        page.goto(f"{live_server.url}/deadletters/audit/")
        expect(page.locator("td.action code.ident", has_text="queue.resume")).to_have_count(1)
        page.goto(f"{live_server.url}/")
        expect(
            page.locator("table.queues code.ident", has_text="demo.tasks.refresh_search_index")
        ).to_have_count(1)


def test_the_jobs_tabs_count_what_a_filter_applied_in_place_lists(page, live_server):
    now = timezone.now()
    for task, n in (("shop.send_receipt", 3), ("shop.sync_stock", 5)):
        JobFactory.create_batch(n, task_path=task, dead=True)
        JobFactory.create_batch(n + 1, task_path=task, done=True)
        JobFactory(task_path=task, run_after=now + timedelta(hours=1))
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/deadletters/jobs/")
    tabs = page.locator('nav.state-tabs[aria-label="Jobs by state"]')
    expect(tabs.locator('a[data-state="dead"] .count')).to_have_text("8")
    expect(tabs.locator('a[data-state="done"] .count')).to_have_text("10")
    expect(tabs.locator('a[data-state=""] .count')).to_have_text("20")
    # A filter applied by htmx (the page is not reloaded): the tabs are counted again under it.
    page.fill('input[name="task"]', "shop.send_receipt")
    page.click('form.filters button[type="submit"]')
    expect(page).to_have_url(re.compile(r"task=shop.send_receipt"))
    expect(tabs.locator('a[data-state="dead"] .count')).to_have_text("3")
    expect(tabs.locator('a[data-state="done"] .count')).to_have_text("4")
    expect(tabs.locator('a[data-state="scheduled"] .count')).to_have_text("1")
    expect(tabs.locator('a[data-state=""] .count')).to_have_text("8")
    # Its tab keeps the filter, and lists as many rows as it counted.
    tabs.locator('a[data-state="dead"]').click()
    expect(page).to_have_url(re.compile(r"task=shop.send_receipt.*state=dead"))
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
