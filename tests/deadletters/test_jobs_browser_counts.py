"""The jobs browser's state tabs count the rows each tab lists, under the same filters (issue
47 item 7): every state, the All tab, filtered and not; a count past its cap says "1,000+", and
one not made says so, never a number that disagrees with the rows."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from deadletters import jobs, search
from jobqueue.models import JobStatus
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
URL = "/deadletters/jobs/"
COUNTS = "/deadletters/jobs/counts/"

# Distinct numbers per state and per task/queue, so a count of the wrong jobs cannot match.
BUILT = {
    ("shop.send_receipt", "mail"): {
        JobStatus.READY: 1,
        JobStatus.SCHEDULED: 2,
        JobStatus.RETRYING: 3,
        JobStatus.RUNNING: 1,
        JobStatus.EXPIRED: 2,
        JobStatus.DONE: 4,
        JobStatus.DEAD: 5,
        JobStatus.CANCELLED: 1,
    },
    ("shop.sync_stock", "default"): {
        JobStatus.READY: 3,
        JobStatus.SCHEDULED: 1,
        JobStatus.RETRYING: 1,
        JobStatus.RUNNING: 2,
        JobStatus.EXPIRED: 1,
        JobStatus.DONE: 2,
        JobStatus.DEAD: 3,
        JobStatus.CANCELLED: 2,
    },
    ("shop.sync_stock", "mail"): {JobStatus.DEAD: 1, JobStatus.DONE: 1},
}


@pytest.fixture
def every_state(settings):
    settings.REDRIVE = {**settings.REDRIVE, "PAGE_SIZE": 100}  # every row on one page
    now = timezone.now()
    hour = timedelta(hours=1)
    make = {
        JobStatus.READY: dict(run_after=now - hour),
        JobStatus.SCHEDULED: dict(run_after=now + hour),
        JobStatus.RETRYING: dict(run_after=now + hour, attempts=2),
        JobStatus.RUNNING: dict(running=True, locked_until=now + hour),
        JobStatus.EXPIRED: dict(running=True, attempts=2, locked_until=now - hour),
        JobStatus.DONE: dict(done=True),
        JobStatus.DEAD: dict(dead=True),
        JobStatus.CANCELLED: dict(state="cancelled", finished_at=now),
    }
    for (task, queue), states in BUILT.items():
        for status, n in states.items():
            JobFactory.create_batch(n, task_path=task, queue_name=queue, **make[status])


def tabs_of(client, params) -> dict[str, str]:
    """The counted tabs as the page fetches them: {state ("" for All): the count's text}."""
    page = client.get(URL, params).content.decode()
    nav = page.split('<nav class="state-tabs" aria-label="Jobs by state"', 1)[1]
    asked = re.search(r'hx-get="([^"]+)"', nav.split(">", 1)[0]).group(1)
    response = client.get(asked.replace("&amp;", "&"), headers={"HX-Request": "true"})
    nav = response.content.decode().split('aria-label="Jobs by state"', 1)[1].split("</nav>")[0]
    assert "hx-get" not in nav  # counted: it asks no more
    found = re.findall(
        r'data-state="(\w*)"[^>]*>[^<]*(?:<span class="count[^"]*"[^>]*>([^<]*)<)?', nav
    )
    assert len(found) == len(JobStatus) + 1
    return dict(found)


def rows_of(client, params) -> int:
    return len(client.get(URL, params).context["page"].rows)


FILTERS = [
    {},
    {"task": "shop.send_receipt"},
    {"task": "shop.sync_stock"},
    {"queue": "mail"},
    {"task": "shop.sync_stock", "queue": "mail"},
    {"task": "no.such_task"},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: "&".join(f.values()) or "none")
def test_every_tab_counts_the_rows_it_lists_under_the_same_filters(
    viewer_client, every_state, filters
):
    tabs = tabs_of(viewer_client, filters)
    expected_all = 0
    for status in JobStatus:
        n = rows_of(viewer_client, {**filters, "state": status.value})
        expected = sum(
            states.get(status, 0)
            for (task, queue), states in BUILT.items()
            if filters.get("task", task) == task and filters.get("queue", queue) == queue
        )
        assert n == expected, status  # the rows are what the test built
        assert tabs[status.value] == str(n), (status, filters)
        expected_all += n
    assert rows_of(viewer_client, filters) == expected_all
    assert tabs[""] == str(expected_all)


def test_the_counts_are_asked_for_with_the_filters_and_each_tab_keeps_them(
    viewer_client, every_state
):
    page = viewer_client.get(URL, {"task": "shop.send_receipt", "state": "dead"}).content.decode()
    assert 'hx-get="/deadletters/jobs/counts/?task=shop.send_receipt&amp;state=dead"' in page
    assert 'href="?task=shop.send_receipt&amp;state=ready" data-state="ready"' in page
    assert 'href="/deadletters/jobs/?task=shop.send_receipt" data-state=""' in page


def test_a_count_past_its_cap_says_so(viewer_client, every_state, monkeypatch):
    monkeypatch.setattr(jobs, "TAB_CAP", 2)
    tabs = tabs_of(viewer_client, {"queue": "mail"})
    # mail: done 4 + 1, dead 5 + 1: past the cap of 2; ready 1: exact.
    assert tabs["done"] == "2+"
    assert tabs["dead"] == "2+"
    assert tabs["ready"] == "1"
    assert tabs[""].endswith("+")


def test_a_count_past_its_cap_reads_with_a_thousands_separator():
    assert jobs.TabCount(1000, True).text == "1,000+"
    assert jobs.TabCount(24).text == "24"
    assert jobs.TabCount(None, why="not counted").text == ""


def test_a_count_that_took_too_long_is_not_a_number(viewer_client, every_state, monkeypatch):
    def stopped(using="default", seconds=None):
        raise search.SearchTimedOut(1.0)

    monkeypatch.setattr(search, "time_limit", stopped)
    nav = (
        viewer_client.get(COUNTS, {"task": "shop.sync_stock"}, headers={"HX-Request": "true"})
        .content.decode()
        .split("</nav>")[0]
    )
    # Not one number: no tab shows a count, and the page says once why.
    assert '<span class="count' not in nav
    assert nav.count("Not counted: it took over 1 s.") == 1


def test_a_count_that_took_too_long_beside_others_made_is_marked_and_all_is_at_least(
    viewer_client, every_state, monkeypatch
):
    bounded = jobs._bounded_count

    def slow_done(f, now, using):
        if f.state == "done":
            return jobs.TabCount(None, why="not counted: it took over 1 s")
        return bounded(f, now, using)

    monkeypatch.setattr(jobs, "_bounded_count", slow_done)
    tabs = tabs_of(viewer_client, {"task": "shop.send_receipt"})
    assert tabs["done"] == "?"
    assert tabs["dead"] == "5"
    # 1 + 2 + 3 + 1 + 2 + 5 + 1 counted, done not: at least 15.
    assert tabs[""] == "15+"


def test_a_text_search_is_not_counted_and_says_so_once(viewer_client, every_state):
    nav = (
        viewer_client.get(COUNTS, {"q": "SMTP"}, headers={"HX-Request": "true"})
        .content.decode()
        .split("</nav>")[0]
    )
    assert '<span class="count' not in nav.replace('<span class="muted uncounted">', "")
    assert nav.count("Not counted: a text search is not counted.") == 1
