"""The jobs browser with several TASKS backends, each on its own queue database: `?backend=NAME`
picks the database its rows, filters, pages and job pages are read from; run now and cancel
(one job, or a frozen selection) change that database's jobs only, permission-checked and
CSRF-protected; a name that is no backend is the console's 404, never a server error.

The second database, `queues_b`, is added by tests/conftest.py. Ids repeat across the two
databases; the tests below give jobs in both the same ids to show that the right one is read
and changed.
"""

from datetime import timedelta

import factory
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from deadletters.models import Selection
from jobqueue import store
from jobqueue.models import Job, JobState
from tests.audit import audited
from tests.conftest import SECOND_DATABASE
from tests.factories import TWO_BACKENDS, DeadLetterFactory, JobB, JobFactory, LetterB

from .conftest import logged_in, user_with_role

B = SECOND_DATABASE
pytestmark = pytest.mark.django_db(databases=["default", B])

JOBS = reverse("deadletters:jobs")
PREVIEW = reverse("deadletters:job-preview")
# Explicit ids, the same in both databases (far above what a sequence hands out in a test).
FIRST_ID = 7_000_000


@pytest.fixture
def two_backends(settings):
    settings.TASKS = TWO_BACKENDS


@pytest.fixture
def operator(db):
    return user_with_role("operator", "op")


@pytest.fixture
def client(operator):
    return logged_in(operator)


def later():
    return timezone.now() + timedelta(hours=1)


def twins(n=1, **fields):
    """`n` pairs of waiting jobs with the same ids: one in default (task home.*), one in B
    (task away.*)."""
    pairs = []
    for i in range(n):
        pk = FIRST_ID + i
        here = JobFactory(pk=pk, task_path="home.task", run_after=later(), **fields)
        there = JobB(pk=pk, task_path="away.task", run_after=later(), **fields)
        pairs.append((here, there))
    return pairs


def job_url(pk, backend=None, suffix=""):
    url = reverse("deadletters:job", args=[pk]) + suffix
    return f"{url}?{urlencode({'backend': backend})}" if backend else url


def ids(response):
    return [row.job.pk for row in response.context["page"].rows]


def unchanged(job, using="default") -> bool:
    fresh = Job.objects.using(using).get(pk=job.pk)
    return (
        fresh.state == JobState.READY
        and fresh.run_after == job.run_after
        and not store.audit.history("job", job.pk, using=using)
    )


# --- reading ---------------------------------------------------------------------------------


def test_the_jobs_of_backend_b_are_read_from_its_database(two_backends, client):
    [(here, there)] = twins()
    JobB(task_path="away.task", queue_name="mail", done=True)
    page = client.get(JOBS, {"backend": "b"})
    assert page.status_code == 200
    rows = page.context["page"].rows
    assert {r.job.task_path for r in rows} == {"away.task"} and len(rows) == 2
    assert all(r.job._state.db == B for r in rows)
    # Each row's link names the backend; the filter keeps it; every backend a link away.
    assert f'href="{job_url(there.pk, "b")}"'.encode() in page.content
    assert (
        b'href="/deadletters/jobs/?backend=b" data-backend="b" aria-current="page"' in page.content
    )
    assert b'href="/deadletters/jobs/" data-backend="default">' in page.content
    # Its state tabs, pager and selection stay on b.
    assert b'href="?backend=b&amp;state=scheduled"' in page.content
    # The filter form and the selection form both keep it.
    assert page.content.count(b'<input type="hidden" name="backend" value="b">') == 2
    default = client.get(JOBS)
    assert [r.job.task_path for r in default.context["page"].rows] == ["home.task"]
    assert f'href="{job_url(here.pk)}"'.encode() in default.content


def test_filters_and_pages_of_backend_b_stay_on_b(two_backends, client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "PAGE_SIZE": 2}
    made = [JobB(queue_name="mail").pk for _ in range(3)]
    JobB(queue_name="other")
    JobFactory.create_batch(3, queue_name="mail")
    first = client.get(JOBS, {"backend": "b", "queue": "mail"})
    assert ids(first) == made[:0:-1]
    nxt = first.context["page"].next_cursor
    assert f'?backend=b&amp;queue=mail&amp;after={nxt}"'.encode() in first.content
    second = client.get(JOBS, {"backend": "b", "queue": "mail", "after": nxt})
    assert ids(second) == [made[0]]
    due = client.get(JOBS, {"backend": "b", "state": "ready", "queue": "other"})
    assert [r.job.queue_name for r in due.context["page"].rows] == ["other"]


def test_a_dead_job_of_b_links_to_its_letter_in_b(two_backends, client):
    JobFactory.create_batch(3, dead=True)  # default's jobs and letters, other ids
    DeadLetterFactory.create_batch(2, id=factory.Sequence(lambda n: 9_000_000 + n))
    letter = LetterB(task_path="away.task")
    page = client.get(JOBS, {"backend": "b", "state": "dead"})
    [row] = page.context["page"].rows
    assert row.job.pk == letter.job_id and row.letter_id == letter.pk
    letter_url = reverse("deadletters:detail", args=[letter.pk]) + "?backend=b"
    assert f'href="{letter_url}"'.encode() in page.content


def test_a_jobs_page_of_b_reads_the_job_its_letter_and_its_history_from_b(two_backends, client):
    [(here, there)] = twins()
    store.audit.record(
        "job.run_now",
        actor="ana",
        channel="code",
        target_kind="job",
        targets=[there.pk],
        reason="from b",
        using=B,
    )
    page = client.get(job_url(there.pk, "b"))
    assert page.status_code == 200
    assert page.context["job"]._state.db == B and page.context["job"].task_path == "away.task"
    # Identifiers carry <wbr> break points (the ident filter).
    content = page.content.replace(b"<wbr>", b"")
    assert b"away.task" in content and b"home.task" not in content
    assert b"from b" in page.content
    assert b'<input type="hidden" name="backend" value="b">' in page.content
    assert f'href="{JOBS}?backend=b"'.encode() in page.content
    mine = client.get(job_url(here.pk))
    assert b"home.<wbr>task" in mine.content and b"from b" not in mine.content
    only_b = JobB(task_path="away.task")
    assert client.get(job_url(only_b.pk, "b")).status_code == 200
    if not Job.objects.filter(pk=only_b.pk).exists():
        assert client.get(job_url(only_b.pk)).status_code == 404


# --- acting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["run_now", "cancel"])
def test_acting_on_a_job_of_b_changes_bs_job_only(two_backends, client, action):
    [(here, there)] = twins()
    response = client.post(
        reverse("deadletters:job-act", args=[there.pk]),
        {"action": action, "reason": "customer waiting", "backend": "b"},
    )
    assert response.status_code == 302
    assert response["Location"] == job_url(there.pk, "b") + "#history"
    changed = Job.objects.using(B).get(pk=there.pk)
    if action == "cancel":
        assert changed.state == JobState.CANCELLED
    else:
        assert changed.state == JobState.READY and changed.run_after <= timezone.now()
    [audit] = store.audit.history("job", there.pk, using=B)
    assert (audit.action, audit.actor, audit.reason, audit.channel) == (
        f"job.{action}",
        "op",
        "customer waiting",
        "console",
    )
    assert unchanged(here)  # the default job with the same id
    assert b"customer waiting" in client.get(response["Location"]).content


def test_acting_on_b_needs_the_permission_and_the_csrf_token(two_backends, operator):
    [(here, there)] = twins()
    act = reverse("deadletters:job-act", args=[there.pk])
    viewer = logged_in(user_with_role("viewer"))
    assert b"Cancel the job" not in viewer.get(job_url(there.pk, "b")).content
    refused = viewer.post(act, {"action": "cancel", "reason": "x", "backend": "b"})
    assert refused.status_code == 403
    preview = viewer.post(PREVIEW, {"action": "cancel", "ids": [there.pk], "backend": "b"})
    assert preview.status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(act, {"action": "cancel", "reason": "x", "backend": "b"}).status_code == 403
    assert (
        strict.post(PREVIEW, {"action": "cancel", "ids": [there.pk], "backend": "b"}).status_code
        == 403
    )
    assert unchanged(there, B) and unchanged(here)
    assert not Selection.objects.filter(kind="jobs").exists()


def test_a_selection_of_bs_jobs_previews_and_acts_in_b(two_backends, client):
    pairs = twins(3, queue_name="mail")
    started = JobB(queue_name="mail", running=True)
    JobB(queue_name="other", run_after=later())
    response = client.post(
        PREVIEW, {"action": "cancel", "select_all": "1", "queue": "mail", "backend": "b"}
    )
    assert response.status_code == 302
    selection = Selection.objects.get(kind="jobs")
    assert sorted(selection.ids) == sorted([*(t.pk for _, t in pairs), started.pk])
    page = client.get(response["Location"])
    assert page.status_code == 200
    assert b'<strong class="will-act">3</strong> of them are still waiting' in page.content
    assert f'href="{job_url(pairs[0][1].pk, "b")}"'.encode() in page.content
    assert f'href="{JOBS}?backend=b&amp;queue=mail"'.encode() in page.content  # the way back
    done = client.post(response["Location"], {"reason": "campaign called off"}, follow=True)
    assert b"3 jobs cancelled; 1 skipped" in done.content
    for here, there in pairs:
        assert Job.objects.using(B).get(pk=there.pk).state == JobState.CANCELLED
        assert unchanged(here)
    assert len(audited("job", B)) == 3 and not audited("job")
    assert Job.objects.using(B).get(pk=started.pk).state == JobState.RUNNING


def test_hand_picked_jobs_of_b_are_run_now_in_b(two_backends, client):
    [(here, there), (here2, there2)] = twins(2)
    response = client.post(
        PREVIEW, {"action": "run_now", "ids": [there.pk, there2.pk], "backend": "b"}
    )
    assert response.status_code == 302
    client.post(response["Location"], {"reason": "now please"})
    for job in (there, there2):
        assert Job.objects.using(B).get(pk=job.pk).run_after <= timezone.now()
    assert unchanged(here) and unchanged(here2)


def test_a_selection_of_a_backend_that_is_gone_acts_nowhere(two_backends, client, settings):
    [(here, there)] = twins()
    response = client.post(PREVIEW, {"action": "cancel", "ids": [there.pk], "backend": "b"})
    settings.TASKS = {"default": TWO_BACKENDS["default"]}
    assert client.get(response["Location"]).status_code == 404
    assert client.post(response["Location"], {"reason": "x"}).status_code == 404
    assert unchanged(here) and unchanged(there, B)


HOSTILE = ["../x", "b/../default", "x" * 5000, "nope", "immediate", "\x00", "b\x00", " b", "é"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_backend_is_a_clean_refusal_never_a_server_error(
    two_backends, settings, client, value
):
    settings.TASKS = {
        **TWO_BACKENDS,
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    }
    [(here, there)] = twins()
    assert client.get(JOBS, {"backend": value}).status_code == 404
    assert client.get(JOBS, {"backend": value}, headers={"HX-Request": "true"}).status_code == 404
    assert (
        client.get(reverse("deadletters:job", args=[there.pk]), {"backend": value}).status_code
        == 404
    )
    act = client.post(
        reverse("deadletters:job-act", args=[there.pk]),
        {"action": "cancel", "reason": "x", "backend": value},
    )
    assert act.status_code == 404
    preview = client.post(
        PREVIEW, {"action": "cancel", "select_all": "1", "ids": [there.pk], "backend": value}
    )
    assert preview.status_code == 404
    assert (
        unchanged(here)
        and unchanged(there, B)
        and not Selection.objects.filter(kind="jobs").exists()
    )


def test_one_backend_looks_as_before(client):
    [(here, _)] = twins()
    page = client.get(JOBS)
    assert page.status_code == 200
    assert b'name="backend"' not in page.content and b"backend=" not in page.content
    assert b"backend-tabs" not in page.content
    detail = client.get(job_url(here.pk))
    assert b'name="backend"' not in detail.content and b"backend=" not in detail.content
    response = client.post(PREVIEW, {"action": "cancel", "ids": [here.pk]})
    assert Selection.objects.get(kind="jobs").filter == {}
    client.post(response["Location"], {"reason": "x"})
    assert Job.objects.get(pk=here.pk).state == JobState.CANCELLED
