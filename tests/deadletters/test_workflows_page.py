"""The console's workflow pages: a workflow's timeline (steps in order, what each stored, masked
as payloads are, its last failure, a batch's progress and its items' letters, the signals it
got), the list of recent workflows by state, and the links from a letter's and a job's page."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from jobqueue import store
from jobqueue.models import (
    DeadLetter,
    Job,
    JobState,
    Workflow,
    WorkflowSignal,
    WorkflowState,
    WorkflowStep,
)
from tests.factories import DeadLetterFactory, JobFactory, UserFactory

from .conftest import logged_in

LIST = reverse("deadletters:workflows")
ATTACK = "<script>alert('x')</script>"


def page_of(pk):
    return reverse("deadletters:workflow", args=[pk])


def workflow(*, state=WorkflowState.RUNNING, job=None, ago=0, **fields):
    """A workflow row as the worker writes one: its id is its first job's."""
    job = job or JobFactory(task_path="shop.onboard", state=JobState.READY)
    at = timezone.now() - timedelta(minutes=ago)
    return Workflow.objects.create(
        pk=job.pk,
        task_path=job.task_path,
        job=job,
        state=state,
        started_at=at,
        updated_at=at,
        **fields,
    )


def add_step(wf, name, kind="call", state="done", minute=0, **fields):
    return WorkflowStep.objects.create(
        workflow=wf,
        name=name,
        kind=kind,
        state=state,
        started_at=wf.started_at + timedelta(minutes=minute),
        **fields,
    )


def error(message, attempt=1, cls="builtins.ValueError"):
    return {
        "attempt": attempt,
        "at": timezone.now().isoformat(),
        "worker_id": "w:1",
        "exception_class_path": cls,
        "message": message,
        "traceback": f"Traceback (most recent call last):\n  ...\n{cls}: {message}\n",
    }


def listed(content: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'href="/deadletters/workflows/(\d+)/"', content)]


# --- the workflow page --------------------------------------------------------------------


@pytest.mark.django_db
def test_the_page_shows_each_step_in_order_with_results_errors_waits_and_a_batch(viewer_client):
    wf = workflow(
        state=WorkflowState.WAITING,
        step="wait:setup_done",
        waiting_for="setup_done",
        wake_at=timezone.now() + timedelta(days=7),
    )
    letters = DeadLetterFactory.create_batch(2, task_path="shop.import_item")
    now = timezone.now()
    # Created out of order: the page orders by when each started.
    add_step(
        wf,
        "wait:setup_done",
        kind="wait",
        state="pending",
        minute=4,
        wake_at=now + timedelta(days=7),
    )
    add_step(wf, "charge", minute=0, attempts=1, result={"charge_id": "ch_42"}, finished_at=now)
    add_step(
        wf,
        "provision",
        state="failed",
        minute=1,
        attempts=2,
        errors=[error("first try", 1), error("quota exceeded on eu-west", 2)],
    )
    add_step(wf, "sleep-1", kind="sleep", state="done", minute=2, wake_at=now, finished_at=now)
    add_step(
        wf,
        "import",
        kind="batch",
        state="pending",
        minute=3,
        result={
            "total": 3000,
            "next": 1500,
            "done": 1498,
            "failed": 2,
            "digest": "abc",
            "dead_letters": [letters[0].pk, letters[1].pk],
        },
    )
    WorkflowSignal.objects.create(
        workflow=wf, name="address_changed", payload={"city": "Lyon"}, sent_at=now
    )

    response = viewer_client.get(page_of(wf.pk))
    assert response.status_code == 200
    content = response.content.decode().replace("<wbr>", "")  # identifiers' break points
    heading = re.search(r"<h1>(.*?)</h1>", content)[1]
    assert re.fullmatch(rf'Workflow {wf.pk} <span class="state [^"]*">waiting</span>', heading)
    assert "shop.onboard" in content
    assert "setup_done" in content and "Gives up waiting" in content
    assert "<dt>Times out</dt>" in content and "<dt>Woke</dt>" in content
    assert f'href="/deadletters/jobs/{wf.job_id}/"' in content
    names = re.findall(r'<li id="step-\d+" class="card">\s*<h3><code>([^<]+)</code>', content)
    assert names == ["charge", "provision", "sleep-1", "import", "wait:setup_done"]
    # The step it is at links to its entry.
    at = WorkflowStep.objects.get(workflow=wf, name="wait:setup_done")
    assert f'href="#step-{at.pk}"' in content
    assert "ch_42" in content
    # A failed step: its last error, the attempt it was, and the traceback folded away.
    assert "quota exceeded on eu-west" in content and "(attempt 2)" in content
    assert "2 failures recorded" in content and "first try" not in content
    assert '<details class="traceback-view"><summary>Traceback' in content
    # A batch: its progress, not its raw record, and its items' letters.
    assert "1498 done, 2 failed of 3000; next item 1500" in content
    assert '"digest"' not in content
    for letter in letters:
        assert f'href="/deadletters/{letter.pk}/">dead letter #{letter.pk}</a>' in content
    # Signals received.
    assert "address_changed" in content and "Lyon" in content


@pytest.mark.django_db
def test_step_results_and_signals_are_masked_as_payloads_are(viewer_client):
    wf = workflow(state=WorkflowState.DONE)
    now = timezone.now()
    add_step(
        wf,
        "charge",
        result={
            "charge_id": "ch_visible",
            "api_key": "sk_live_HIDDEN",
            "nested": [{"cvv": 987654321}],
        },
        finished_at=now,
    )
    # A step named like a secret: what it returned is masked whole.
    add_step(wf, "fetch_token", minute=1, result="tok_HIDDEN_TOO", finished_at=now)
    add_step(
        wf,
        "wait:go",
        kind="wait",
        minute=2,
        result={"signal": {"password": "hunter2", "plan": "pro"}, "sent_at": now.isoformat()},
        finished_at=now,
    )
    WorkflowSignal.objects.create(
        workflow=wf, name="go", payload={"session_id": "sess_HIDDEN", "plan": "pro"}, sent_at=now
    )
    content = viewer_client.get(page_of(wf.pk)).content.decode()
    # What is not secret is shown: the plan, in the wait's outcome and in the signal.
    assert "ch_visible" in content and content.count("&quot;plan&quot;: &quot;pro&quot;") == 2
    # The card number is long enough that no timestamp on the page (their microseconds printed
    # as digits) can hold it by chance: "123" once matched one.
    for secret in ("sk_live_HIDDEN", "tok_HIDDEN_TOO", "hunter2", "sess_HIDDEN", "987654321"):
        assert secret not in content, secret
    assert content.count("••••") >= 5


@pytest.mark.django_db
def test_html_in_names_results_and_errors_is_escaped(viewer_client):
    wf = workflow(state=WorkflowState.DEAD, step=ATTACK)
    add_step(
        wf,
        ATTACK,
        state="dead",
        attempts=1,
        result=None,
        errors=[error(ATTACK, cls="<b>Bold</b>")],
        finished_at=timezone.now(),
    )
    add_step(wf, "echo", minute=1, result={"note": ATTACK}, finished_at=timezone.now())
    WorkflowSignal.objects.create(
        workflow=wf, name=ATTACK, payload={"x": ATTACK}, sent_at=timezone.now()
    )
    content = viewer_client.get(page_of(wf.pk)).content.decode()
    assert ATTACK not in content and "<b>Bold</b>" not in content
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in content
    assert "&lt;b&gt;Bold&lt;/b&gt;" in content


@pytest.mark.django_db
def test_a_workflow_whose_job_is_dead_is_shown_dead_with_its_letter(viewer_client):
    letter = DeadLetterFactory(task_path="shop.onboard")
    wf = workflow(job=letter.job, state=WorkflowState.RUNNING, step="provision")
    content = viewer_client.get(page_of(wf.pk)).content.decode()
    assert '<span class="state job-dead">dead</span>' in content
    assert "the workflow's record says running" in content
    assert f'href="/deadletters/{letter.pk}/">dead letter #{letter.pk}</a>' in content
    assert "resumes it there" in content


@pytest.mark.django_db
def test_an_unknown_workflow_is_a_404_page_not_a_500(viewer_client):
    response = viewer_client.get(page_of(424242))
    assert response.status_code == 404
    assert b"There is no workflow #424242" in response.content
    # A job that never called a step is no workflow.
    job = JobFactory()
    assert viewer_client.get(page_of(job.pk)).status_code == 404
    # Past bigint, or not a number: no match, the console's 404.
    assert viewer_client.get(f"{LIST}99999999999999999999/").status_code == 404
    assert viewer_client.get(f"{LIST}abc/").status_code == 404


@pytest.mark.django_db
def test_anonymous_users_log_in_first_and_users_without_the_permission_are_refused(viewer):
    wf = workflow()
    add_step(wf, "charge", result={"charge_id": "ch_42"}, finished_at=timezone.now())
    for url in (LIST, page_of(wf.pk)):
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login") + "?next=")
        refused = logged_in(UserFactory(username="nobody")).get(url)
        assert refused.status_code == 403
        assert b"deadletters.view_deadletter" in refused.content
        assert b"ch_42" not in refused.content
        assert logged_in(viewer).get(url).status_code == 200


@pytest.mark.django_db
def test_the_pages_have_no_write_endpoint(operator_client):
    wf = workflow()
    for url in (LIST, page_of(wf.pk)):
        assert operator_client.post(url).status_code == 405


# --- the list -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_list_is_newest_first_and_filters_by_the_state_shown(viewer_client):
    done = workflow(state=WorkflowState.DONE, ago=30)
    waiting = workflow(state=WorkflowState.WAITING, ago=20, waiting_for="go", step="wait:go")
    dead = workflow(state=WorkflowState.DEAD, ago=10, step="charge")
    # Its record says running, its job is dead: listed as dead, not as running.
    died = workflow(job=JobFactory(dead=True), ago=5)
    running = workflow(ago=1)
    content = viewer_client.get(LIST).content.decode()
    assert listed(content) == [running.pk, died.pk, dead.pk, waiting.pk, done.pk]
    assert f'href="/deadletters/jobs/{running.job_id}/"' in content
    assert listed(viewer_client.get(LIST, {"state": "dead"}).content.decode()) == [
        died.pk,
        dead.pk,
    ]
    assert listed(viewer_client.get(LIST, {"state": "running"}).content.decode()) == [running.pk]
    assert listed(viewer_client.get(LIST, {"state": "waiting"}).content.decode()) == [waiting.pk]
    assert listed(viewer_client.get(LIST, {"state": "done"}).content.decode()) == [done.pk]


@pytest.mark.django_db
def test_a_workflow_whose_job_was_pruned_is_listed_under_its_own_state(viewer_client):
    wf = workflow(state=WorkflowState.SLEEPING, wake_at=timezone.now() + timedelta(hours=1))
    Job.objects.filter(pk=wf.job_id).delete()  # SET_NULL
    content = viewer_client.get(LIST, {"state": "sleeping"}).content.decode()
    assert listed(content) == [wf.pk] and "pruned" in content
    assert viewer_client.get(page_of(wf.pk)).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        {"state": "bogus"},
        {"state": "<script>"},
        {"state": "x" * 5000},
        {"after": "not-a-cursor"},
        {"before": "99999999999999999999999-1"},
    ],
)
def test_a_bad_filter_is_named_and_ignored_never_a_500(viewer_client, query):
    a, b = workflow(state=WorkflowState.DONE, ago=2), workflow(ago=1)
    response = viewer_client.get(LIST, query)
    assert response.status_code == 200
    content = response.content.decode()
    assert "Ignored invalid filter" in content
    assert "<script>" not in content.split("<main>")[1]
    if "state" in query:
        assert listed(content) == [b.pk, a.pk]  # the bad state applies nothing


@pytest.mark.django_db
def test_the_list_pages_by_keyset_both_ways_and_keeps_the_filter(viewer_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "PAGE_SIZE": 2}
    rows = [workflow(state=WorkflowState.DONE, ago=10 - i) for i in range(5)]
    workflow(state=WorkflowState.RUNNING, ago=0)  # filtered out
    newest_first = [w.pk for w in reversed(rows)]
    first = viewer_client.get(LIST, {"state": "done"}).content.decode()
    assert listed(first) == newest_first[:2] and 'rel="prev"' not in first
    query = re.search(r'rel="next" href="\?([^"]+)"', first).group(1).replace("&amp;", "&")
    assert "state=done" in query
    second = viewer_client.get(f"{LIST}?{query}").content.decode()
    assert listed(second) == newest_first[2:4]
    back = re.search(r'rel="prev" href="\?([^"]+)"', second).group(1).replace("&amp;", "&")
    assert listed(viewer_client.get(f"{LIST}?{back}").content.decode()) == newest_first[:2]


@pytest.mark.django_db
def test_htmx_gets_the_results_partial_and_the_nav_links_the_list(viewer_client):
    wf = workflow()
    whole = viewer_client.get(LIST)
    assert b"<html" in whole.content
    assert re.search(rf'<a href="{LIST}"[^>]*>Workflows</a>'.encode(), whole.content)
    partial = viewer_client.get(LIST, headers={"HX-Request": "true"})
    assert b"<html" not in partial.content and b'id="workflow-results"' in partial.content
    assert listed(partial.content.decode()) == [wf.pk]
    assert "HX-Request" in partial["Vary"]


# --- links from the letter's and the job's pages ------------------------------------------


def workflow_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "jobqueue_workflow" in q["sql"]]


@pytest.mark.django_db
def test_the_letter_page_links_to_its_workflow_in_one_query(viewer_client, admin_client_):
    letter = DeadLetterFactory(task_path="shop.onboard")
    wf = workflow(job=letter.job, state=WorkflowState.DEAD, step="provision")
    with CaptureQueriesContext(connection) as captured:
        content = viewer_client.get(reverse("deadletters:detail", args=[letter.pk])).content
    assert f'href="/deadletters/workflows/{wf.pk}/">workflow {wf.pk}</a>'.encode() in content
    assert len(workflow_queries(captured)) == 1
    # ...and so does the page that reveals its masked values.
    revealed = admin_client_.post(reverse("deadletters:reveal", args=[letter.pk])).content
    assert f'href="/deadletters/workflows/{wf.pk}/"'.encode() in revealed
    # A letter of no workflow links to none.
    other = DeadLetterFactory()
    content = viewer_client.get(reverse("deadletters:detail", args=[other.pk])).content
    assert b"/deadletters/workflows/" not in content.split(b"<main>")[1]


@pytest.mark.django_db
def test_the_job_page_links_to_the_workflow_it_began_or_carries_now(viewer_client):
    first = JobFactory(dead=True, task_path="shop.onboard")
    replay = JobFactory(running=True, task_path="shop.onboard")
    wf = workflow(job=first)
    Workflow.objects.filter(pk=wf.pk).update(job=replay)  # a replay carries it now
    link = f'href="/deadletters/workflows/{wf.pk}/">workflow {wf.pk}</a>'.encode()
    for job in (first, replay):
        with CaptureQueriesContext(connection) as captured:
            content = viewer_client.get(reverse("deadletters:job", args=[job.pk])).content
        assert link in content
        assert len(workflow_queries(captured)) == 1
    plain = JobFactory()
    content = viewer_client.get(reverse("deadletters:job", args=[plain.pk])).content
    assert b"/deadletters/workflows/" not in content.split(b"<main>")[1]


# --- workflows a worker ran ---------------------------------------------------------------


@pytest.fixture
def sink(tmp_path, monkeypatch):
    from tests import workflow_tasks as wf

    monkeypatch.setenv("REDRIVE_TEST_SINK", str(tmp_path / "sink.log"))
    monkeypatch.setitem(wf.BROKEN, "step", True)
    monkeypatch.setitem(wf.BROKEN, "items", True)
    return wf


@pytest.mark.django_db(transaction=True)
def test_a_workflow_dead_at_a_step_as_the_worker_left_it(sink, viewer_client):
    from tests.jobqueue.test_worker import burst

    result_id = int(sink.breaks_at_second.enqueue("y", permanent=True).id)
    burst()
    letter = DeadLetter.objects.get(original_job_id=result_id)
    content = viewer_client.get(page_of(result_id)).content.decode()
    assert '<span class="state job-dead">dead</span>' in content
    assert "Dead at step <code>second</code>" in content
    names = re.findall(r'<li id="step-\d+" class="card">\s*<h3><code>([^<]+)</code>', content)
    assert names == ["first", "second"]
    assert "&quot;Y&quot;" in content  # what the first step returned, as JSON
    assert "jobqueue.errors.PermanentError" in content and "y refused" in content
    letter_page = viewer_client.get(reverse("deadletters:detail", args=[letter.pk])).content
    assert f'href="/deadletters/workflows/{result_id}/"'.encode() in letter_page
    # Replayed (the step refuses again): the replay's job carries it now, and links back.
    replayed = store.replay([letter.pk]).done[letter.pk]
    burst()
    content = viewer_client.get(page_of(result_id)).content.decode()
    assert f'href="/deadletters/jobs/{replayed.pk}/">job {replayed.pk}</a>' in content
    assert f"a replay; the first was job {result_id}</span>" in content
    assert '<span class="state job-dead">dead</span>' in content
    job_page = viewer_client.get(reverse("deadletters:job", args=[replayed.pk])).content
    assert f'href="/deadletters/workflows/{result_id}/"'.encode() in job_page


@pytest.mark.django_db(transaction=True)
def test_a_batch_as_the_worker_left_it_links_its_bad_items_letters(sink, viewer_client):
    from tests.jobqueue.test_worker import burst

    result_id = int(sink.importer.enqueue(800, chunk=300).id)
    burst()
    letter = DeadLetter.objects.get(task_path="tests.workflow_tasks.item")
    assert letter.args[0]["n"] == 700
    content = viewer_client.get(page_of(result_id)).content.decode()
    assert "799 done, 1 failed of 800; next item 800" in content
    assert f'href="/deadletters/{letter.pk}/">dead letter #{letter.pk}</a>' in content
    listing = viewer_client.get(LIST, {"state": "done"}).content.decode()
    assert listed(listing) == [result_id]
