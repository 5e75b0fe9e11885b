"""The jobs browser: every job by state and filter, newest first, keyset-paged; a job's page
with its attempts and links; payloads redacted and escaped; hostile parameters refused."""

import contextlib
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from deadletters import jobs, search
from jobqueue.models import JobState
from tests.conftest import database_url
from tests.factories import DeadLetterFactory, JobFactory

from .conftest import logged_in

pytestmark = pytest.mark.django_db
URL = "/deadletters/jobs/"


def ids(response):
    return [row.job.pk for row in response.context["page"].rows]


@pytest.fixture
def mix():
    now = timezone.now()
    return {
        "ready": JobFactory(run_after=now - timedelta(seconds=5)),
        "scheduled": JobFactory(run_after=now + timedelta(hours=1)),
        "retrying": JobFactory(
            run_after=now + timedelta(minutes=1),
            attempts=2,
            errors=[{"attempt": 2, "message": "SMTP 421 try later", "worker_id": "w:1"}],
        ),
        "running": JobFactory(running=True, task_path="tests.tasks.add", queue_name="mail"),
        "done": JobFactory(done=True, idempotency_key="order:7"),
        "dead": DeadLetterFactory().job,
    }


def test_each_state_lists_its_jobs_and_only_them(viewer_client, mix):
    for state, job in mix.items():
        response = viewer_client.get(URL, {"state": state})
        assert response.status_code == 200
        assert ids(response) == [job.pk], state
    assert sorted(ids(viewer_client.get(URL))) == sorted(j.pk for j in mix.values())


def test_filters_by_task_queue_key_and_text(viewer_client, mix):
    assert ids(viewer_client.get(URL, {"task": "tests.tasks.add"})) == [mix["running"].pk]
    assert ids(viewer_client.get(URL, {"queue": "mail"})) == [mix["running"].pk]
    assert ids(viewer_client.get(URL, {"key": "order:7"})) == [mix["done"].pk]
    assert ids(viewer_client.get(URL, {"q": "smtp 421"})) == [mix["retrying"].pk]


def test_pages_newest_first_forward_and_back(viewer_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "PAGE_SIZE": 2}
    made = [JobFactory().pk for _ in range(5)]
    first = viewer_client.get(URL)
    assert ids(first) == made[:-3:-1]
    page = first.context["page"]
    second = viewer_client.get(URL, {"after": page.next_cursor})
    assert ids(second) == [made[2], made[1]]
    back = viewer_client.get(URL, {"before": second.context["page"].prev_cursor})
    assert ids(back) == made[:-3:-1]
    last = viewer_client.get(URL, {"after": second.context["page"].next_cursor})
    assert ids(last) == [made[0]] and last.context["page"].next_cursor is None


@pytest.mark.parametrize(
    "params",
    [{"state": "exploded"}, {"after": "x"}, {"after": "-1"}, {"before": "9" * 40},
     {"task": "t" * 300}, {"q": "\x00"}],
)  # fmt: skip
def test_bad_filters_are_named_and_ignored_never_a_500(viewer_client, mix, params):
    response = viewer_client.get(URL, params)
    assert response.status_code == 200
    assert b"Ignored invalid filter" in response.content


def test_the_job_page_shows_attempts_links_and_a_redacted_escaped_payload(viewer_client):
    letter = DeadLetterFactory()
    job = letter.job
    job.kwargs = {"password": "hunter2", "note": "<b>bold</b>"}
    job.errors = [
        {"attempt": 1, "worker_id": "host:1", "at": "2026-11-30T10:00:00+00:00",
         "exception_class_path": "builtins.ConnectionError", "message": "<script>x</script>",
         "traceback": "Traceback ..."},
    ]  # fmt: skip
    job.save()
    replay = JobFactory(replayed_from=letter)
    page = viewer_client.get(f"{URL}{job.pk}/")
    body = page.content.decode().replace("<wbr>", "")  # identifiers' break points
    assert page.status_code == 200
    assert "hunter2" not in body and "&lt;b&gt;bold&lt;/b&gt;" in body
    assert "&lt;script&gt;x&lt;/script&gt;" in body and "<script>x" not in body
    assert "host:1" in body and "builtins.ConnectionError" in body
    assert f"/deadletters/{letter.pk}/" in body and f"{URL}{replay.pk}/" in body
    replay_page = viewer_client.get(f"{URL}{replay.pk}/").content.decode()
    assert f">dead letter #{letter.pk}</a>" in replay_page  # not #12 for #1


def test_a_missing_job_is_a_404_that_says_so_and_anonymous_users_log_in_first(
    client, viewer_client
):
    response = viewer_client.get(f"{URL}999999/")
    assert response.status_code == 404 and b"There is no job #999999" in response.content
    assert viewer_client.get(f"{URL}99999999999999999999999/").status_code == 404
    assert client.get(URL).status_code == 302


def test_browser_state_splits_ready_rows_by_what_they_wait_for():
    now = timezone.now()
    assert jobs.browser_state(JobFactory.build(run_after=now), now) == "ready"
    later = now + timedelta(seconds=1)
    assert jobs.browser_state(JobFactory.build(run_after=later), now) == "scheduled"
    assert jobs.browser_state(JobFactory.build(run_after=later, attempts=1), now) == "retrying"
    assert jobs.browser_state(JobFactory.build(state=JobState.DEAD), now) == "dead"


def test_a_dead_job_links_its_letter_and_a_failed_attempt_shows_how_long_it_ran(viewer_client):
    letter = DeadLetterFactory()
    job = letter.job
    job.errors = [{"attempt": 1, "message": "boom", "duration_ms": 12.5, "worker_id": "w:1"}]
    job.save()
    listing = viewer_client.get(URL, {"state": "dead"}).content.decode()
    assert f'href="/deadletters/{letter.pk}/"' in listing
    assert "after 12.5 ms" in viewer_client.get(f"{URL}{job.pk}/").content.decode()


def test_a_text_search_reads_only_the_newest_jobs_of_its_filter_and_says_so(
    viewer_client, monkeypatch
):
    monkeypatch.setattr(search, "JOB_SCAN", 2)
    old = JobFactory(task_path="shop.invoice", errors=[{"message": "SMTP 421 busy"}])
    newer = [JobFactory(errors=[{"message": "bounced"}]).pk for _ in range(2)]
    response = viewer_client.get(URL, {"q": "smtp 421"})
    body = response.content.decode()
    assert response.status_code == 200 and ids(response) == []
    assert "reads the newest 2 jobs the other filters leave" in body
    assert f"Job #{old.pk} and older ones were not searched" in body
    assert response.context["page"].search_left_out == old.pk < min(newer)
    # A narrower filter reaches further back: the newest 2 of that task hold it.
    narrowed = viewer_client.get(URL, {"q": "smtp 421", "task": "shop.invoice"})
    assert ids(narrowed) == [old.pk] and narrowed.context["page"].search_left_out is None
    assert "were not searched" not in narrowed.content.decode()
    # "Select all matching" takes the jobs the page says it searched, and no others.
    assert jobs.matching_ids(jobs.JobFilter(q="bounced"), cap=10) == newer[::-1]
    assert jobs.matching_ids(jobs.JobFilter(q="smtp"), cap=10) == []


@pytest.fixture
def stalled_search(request, monkeypatch):
    """A jobs search that cannot finish within its time limit: on PostgreSQL another session
    holds the jobs table locked (a wait statement_timeout counts); on SQLite the limit is zero,
    so the progress handler stops the first statement that reads a few hundred rows."""
    JobFactory.create_batch(300, errors=[{"message": "bounced"}])
    if connection.vendor != "postgresql":
        monkeypatch.setattr(search, "TIME_LIMIT", 0)
        yield
        return
    monkeypatch.setattr(search, "TIME_LIMIT", 0.2)
    with psycopg.connect(database_url(connection)) as other:
        other.execute("LOCK TABLE jobqueue_job IN ACCESS EXCLUSIVE MODE")
        yield
        other.rollback()


@pytest.mark.django_db(transaction=True)
def test_a_search_past_its_time_limit_is_a_message_on_the_page_not_an_error(
    viewer, operator, stalled_search
):
    response = logged_in(viewer).get(URL, {"q": "smtp"})
    body = response.content.decode()
    assert response.status_code == 200 and ids(response) == []
    assert "The search took longer than" in body and "Narrow it by state, task or queue" in body
    assert "No jobs match this filter" not in body
    selecting = logged_in(operator).post(
        "/deadletters/jobs/preview/",
        {"action": "cancel", "select_all": "1", "q": "smtp"},
        follow=True,
    )
    assert selecting.status_code == 200
    assert "Nothing selected: The search took longer than" in selecting.content.decode()


@pytest.mark.parametrize("nested", [False, True])
def test_the_time_limit_stops_a_long_statement_and_leaves_no_setting_behind(nested):
    slow = (
        "SELECT pg_sleep(30)"
        if connection.vendor == "postgresql"
        else "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
        "SELECT count(*) FROM (SELECT i FROM n LIMIT 1000000000)"
    )
    outer = transaction.atomic() if nested else contextlib.nullcontext()
    with outer:
        with pytest.raises(search.SearchTimedOut), search.time_limit(seconds=0.05):
            connection.cursor().execute(slow)
        with search.time_limit(seconds=7), connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SHOW statement_timeout")
                assert cursor.fetchone()[0] == "0"
        else:
            # The handler is gone: a statement longer than the limit runs on.
            with connection.cursor() as cursor:
                cursor.execute(slow.replace("1000000000", "300000"))
                assert cursor.fetchone()[0] == 300000


def test_each_tab_counts_its_jobs(operator_client):
    import re
    from datetime import timedelta

    from django.utils import timezone

    from jobqueue.models import JobState

    now = timezone.now()
    JobFactory.create_batch(2)  # ready
    JobFactory(run_after=now + timedelta(hours=1))  # scheduled
    JobFactory(run_after=now + timedelta(hours=1), attempts=1)  # retrying
    JobFactory.create_batch(3, state=JobState.DEAD, finished_at=now)
    JobFactory(state=JobState.DONE, finished_at=now)
    page = operator_client.get("/deadletters/jobs/").content.decode()
    # The page shows the tabs at once and asks for their counts once it is shown.
    assert 'hx-get="/deadletters/jobs/counts/?state=" hx-trigger="load"' in page
    counts = operator_client.get(
        "/deadletters/jobs/counts/", {"state": ""}, headers={"HX-Request": "true"}
    )
    nav = counts.content.decode().split('<nav class="state-tabs"', 1)[1].split("</nav>", 1)[0]
    assert "hx-get" not in nav  # counted: it asks no more
    tabs = dict(
        re.findall(r'state=(\w+)"[^>]*>[^<]*(?:<span class="count">([0-9]+\+?)</span>)?', nav)
    )
    assert tabs == {
        "ready": "2",
        "scheduled": "1",
        "retrying": "1",
        "running": "0",
        "expired": "0",
        "done": "1",  # a count bounded in jobs and time (jobs.tab_counts)
        "dead": "3",
        "cancelled": "0",
    }
