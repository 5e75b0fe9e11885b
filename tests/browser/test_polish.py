"""The console's small things, at 1280 and 390 px: fields of a filter bar and of the sign-in
aligned, one empty-state style, required reasons labelled so, sparklines with a scale, one time
format, states in one case, job ids as links, and a run's page that says when it started,
finished, how long it took or has left, and what its pace means."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from deadletters import services
from tests.browser.test_console import login
from tests.browser.util import axe_violations
from tests.factories import DeadLetterFactory, JobFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1280, 390)
RAW_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")

# Each label of a form and the top of its text and of its control.
FIELD_TOPS = """form => Array.from(form.querySelectorAll(":scope > label")).map((label) => {
  const control = label.querySelector("input:not([type=checkbox]), select");
  const range = document.createRange();
  range.selectNodeContents(label.firstChild);
  return [label.firstChild.textContent.trim(), range.getBoundingClientRect().top,
          control ? control.getBoundingClientRect().top : null,
          control ? control.getBoundingClientRect().left : null];
})"""


def rows_of(fields):
    """The fields grouped by the line of the form they are on (their controls' tops)."""
    rows = {}
    for name, text_top, control_top, _ in fields:
        if control_top is not None:
            rows.setdefault(round(control_top / 8), []).append((name, text_top))
    return list(rows.values())


@pytest.mark.parametrize("width", WIDTHS)
def test_fields_are_aligned_in_filter_bars_and_the_sign_in(page, live_server, width):
    DeadLetterFactory()
    login(page, live_server, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    for path in ("/deadletters/list/", "/deadletters/jobs/", "/deadletters/audit/"):
        page.goto(f"{live_server.url}{path}")
        fields = page.locator("form.filters").evaluate(FIELD_TOPS)
        for row in rows_of(fields):
            tops = {round(top) for _, top in row}
            assert max(tops) - min(tops) <= 1, (path, row)
    page.context.clear_cookies()
    page.goto(f"{live_server.url}/accounts/login/")
    fields = (
        page.locator("form").filter(has=page.locator('input[name="password"]')).evaluate(FIELD_TOPS)
    )
    assert [name for name, *_ in fields] == ["Username", "Password"]
    assert fields[0][3] == fields[1][3]  # both inputs start at one x
    assert axe_violations(page) == []


def test_one_empty_state_style(page, live_server):
    letter = DeadLetterFactory()
    login(page, live_server, "operator")
    styles = {}
    for path in (
        f"/deadletters/{letter.pk}/",  # never replayed
        "/deadletters/list/?job_type=nothing.like.this",
        "/deadletters/jobs/?task=nothing.like.this",
        "/deadletters/workflows/",
        "/deadletters/schedules/",
        "/deadletters/tokens/",
    ):
        page.goto(f"{live_server.url}{path}")
        for empty in page.locator(".empty:visible").all():
            styles[empty.inner_text()[:40]] = empty.evaluate(
                "e => { const s = getComputedStyle(e);"
                " return [s.color, s.textAlign, s.fontStyle, s.paddingTop]; }"
            )
    assert "Never replayed or discarded." in styles
    assert len(styles) >= 5 and len(set(map(tuple, styles.values()))) == 1, styles


@pytest.mark.parametrize("width", WIDTHS)
def test_letter_and_job_pages_link_jobs_and_write_times_and_states_alike(page, live_server, width):
    letter = DeadLetterFactory(task_path="shop.send_receipt")
    replay = JobFactory(task_path="shop.send_receipt", replayed_from=letter)
    login(page, live_server, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/deadletters/{letter.pk}/")
    jobs = page.locator("section.card", has=page.get_by_role("heading", name="Jobs"))
    expect(jobs.get_by_role("link", name=str(letter.job_id), exact=True)).to_have_attribute(
        "href", f"/deadletters/jobs/{letter.job_id}/"
    )
    expect(jobs.get_by_role("link", name=str(replay.pk), exact=True)).to_be_visible()
    # Every state badge in one case, whichever model named it.
    for badge in page.locator(".state").all():
        assert badge.inner_text() == badge.inner_text().lower()
    assert axe_violations(page) == []

    page.goto(f"{live_server.url}/deadletters/jobs/{letter.job_id}/")
    page.locator(".attempt").first.locator("summary").click()  # its traceback: no raw times
    assert not RAW_ISO.search(page.locator("main").inner_text())
    expect(page.locator(".attempt h3 time").first).to_be_visible()
    # Job actions need a reason, and say so.
    page.goto(f"{live_server.url}/deadletters/jobs/{replay.pk}/")
    expect(page.locator(".job-actions label")).to_contain_text("Reason (required")


@pytest.mark.parametrize("width", WIDTHS)
def test_sparklines_have_a_scale(page, live_server, width):
    now = timezone.now()
    for hours_ago in (0, 0, 0, 2):
        DeadLetterFactory(
            task_path="shop.send_receipt", dead_lettered_at=now - timedelta(hours=hours_ago)
        )
    login(page, live_server, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/deadletters/")
    spark = page.locator("#groups svg.spark").first
    expect(spark.locator("text.scale").first).to_have_text("3/h")
    expect(spark).to_have_attribute("aria-label", re.compile("4 in all, at most 3 in an hour"))
    expect(spark.locator("text.scale", has_text="now")).to_have_count(1)
    assert spark.locator("rect.bar").count() == 2
    assert axe_violations(page) == []


@pytest.mark.parametrize("width", WIDTHS)
def test_a_run_says_when_it_started_ended_took_or_has_left_and_its_pace(page, live_server, width):
    operator = UserFactory(username="operator")
    login(page, live_server, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    done = [DeadLetterFactory(task_path="shop.send_receipt") for _ in range(2)]
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in done], filter={}
    )
    finished = services.start_run(operator=operator, selection=selection, reason="API back")
    page.goto(f"{live_server.url}/deadletters/runs/{finished.pk}/")
    times = page.locator("#live .run-times")  # refreshed with the progress
    expect(times).to_contain_text("Confirmed")
    expect(times.locator(".finished")).to_contain_text("finished")
    expect(times.locator(".took")).to_have_text(re.compile(r"^\d+\.\d s$"))
    expect(page.locator(".pace")).to_contain_text("as fast as a worker goes")
    # Its ledger links each new job.
    ledger_job = page.locator("table.ledger td.new-job a").first
    expect(ledger_job).to_have_attribute("href", re.compile(r"^/deadletters/jobs/\d+/$"))
    # The preview of two: "All 2", not "The first 2".
    two = [DeadLetterFactory(task_path="shop.send_receipt") for _ in range(2)]
    preview = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in two], filter={}
    )
    page.goto(f"{live_server.url}/deadletters/selections/{preview.pk}/")
    expect(page.get_by_role("heading", name="All 2")).to_be_visible()

    paced = [DeadLetterFactory(task_path="shop.send_receipt") for _ in range(5)]
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in paced], filter={}
    )
    run = services.start_run(
        operator=operator, selection=selection, reason="slowly", rate=0.5, canary_size=2
    )
    page.goto(f"{live_server.url}/deadletters/runs/{run.pk}/")
    expect(page.locator(".pace")).to_contain_text("0.5 items a second")
    expect(page.locator(".pace")).to_contain_text("batches of one or a few")
    # Paced and in the background (no worker here): the items left at its rate.
    expect(page.locator("#live .run-times .eta")).to_have_text(re.compile(r"^\d+(\.\d)? s$"))
    canary = page.locator(".canary")
    expect(canary).to_contain_text("the first 2 items are replayed on their own before the rest")
    expect(canary).not_to_contain_text("not out yet")
    assert axe_violations(page) == []
