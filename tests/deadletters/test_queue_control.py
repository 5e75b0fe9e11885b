"""Pausing and resuming a queue from the health page: permission, CSRF, a reason, the audit."""

import re

import pytest
from django.test import Client

from jobqueue import store
from jobqueue.models import PausedQueue
from tests.audit import audited
from tests.factories import JobFactory

from .conftest import logged_in

URL = "/deadletters/health/queues/"
HEALTH = "/deadletters/health/"


@pytest.mark.django_db
def test_an_operator_pauses_and_resumes_a_queue_and_the_audit_names_them(operator_client):
    JobFactory(queue_name="mail")
    page = operator_client.get(HEALTH)
    assert b"Pause or resume a queue" in page.content
    response = operator_client.post(
        URL, {"action": "pause", "queue": "mail", "reason": "SMTP down"}
    )
    assert response.status_code == 302 and response["Location"] == HEALTH + "#queue-control"
    paused = PausedQueue.objects.get()
    assert (paused.queue_name, paused.paused_by, paused.reason) == ("mail", "operator", "SMTP down")
    page = operator_client.get(HEALTH)
    assert b"Queue mail paused." in page.content and b"SMTP down" in page.content
    operator_client.post(URL, {"action": "resume", "queue": "mail", "reason": "back"})
    assert not PausedQueue.objects.exists()
    assert audited("queue") == [
        ("pause", "mail", "operator", "SMTP down"),
        ("resume", "mail", "operator", "back"),
    ]


@pytest.mark.django_db
def test_a_viewer_sees_paused_queues_but_may_not_pause_one(viewer_client):
    store.queues.pause("mail", actor="ana", reason="<script>alert(1)</script>", allow_unknown=True)
    page = viewer_client.get(HEALTH)
    assert b"Pause or resume a queue" not in page.content
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in page.content
    assert b"<script>alert(1)" not in page.content
    response = viewer_client.post(URL, {"action": "resume", "queue": "mail", "reason": "x"})
    assert response.status_code == 403 and b"jobqueue.pause_queue" in response.content
    assert PausedQueue.objects.exists() and len(audited("queue")) == 1


@pytest.mark.django_db
def test_queue_control_needs_the_csrf_token_and_a_post(operator):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(URL, {"action": "pause", "queue": "mail", "reason": "x"})
    assert response.status_code == 403
    assert logged_in(operator).get(URL).status_code == 405
    assert not PausedQueue.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "data",
    [
        {"action": "pause", "queue": "mail"},
        {"action": "pause", "queue": "mail", "reason": "   "},
        {"action": "pause", "queue": " ", "reason": "x"},
        {"action": "pause", "queue": "q" * 101, "reason": "x"},
        {"action": "explode", "queue": "mail", "reason": "x"},
        {"action": "pause", "queue": "mail", "reason": "x" * 2001},
        {"action": "pause", "queue": "ma\x00il", "reason": "x"},
    ],
)
def test_bad_input_changes_nothing_and_says_why(operator_client, data):
    response = operator_client.post(URL, data, follow=True)
    assert response.status_code == 200 and b"Nothing changed" in response.content
    assert not PausedQueue.objects.exists() and not audited("queue")


@pytest.mark.django_db
def test_the_form_offers_known_queues_and_refuses_another_unless_it_has_no_jobs_yet(
    operator_client,
):
    JobFactory(queue_name="mail")
    page = operator_client.get(HEALTH).content.decode()
    assert '<option value="mail">' in page and '<option value="default">' in page
    assert 'name="allow_unknown"' in page
    typo = operator_client.post(
        URL, {"action": "pause", "queue": "mial", "reason": "x"}, follow=True
    )
    body = typo.content.decode()
    assert "Nothing changed: no queue &#x27;mial&#x27; has jobs" in body
    assert "did you mean &#x27;mail&#x27;?" in body and "has no jobs yet" in body
    assert not PausedQueue.objects.exists() and not audited("queue")
    meant = {"action": "pause", "queue": "mial", "reason": "x", "allow_unknown": "1"}
    assert operator_client.post(URL, meant).status_code == 302
    assert PausedQueue.objects.get().queue_name == "mial"
    operator_client.post(URL, {"action": "resume", "queue": "mial", "reason": "undo"})
    assert not PausedQueue.objects.exists()


def queue_row(html: str, queue: str) -> str:
    """The per-queue table's row of `queue`."""
    start = html.index(f'data-queue="{queue}"')
    return html[start : html.index("</tr>", start)]


@pytest.mark.django_db
def test_each_queue_row_pauses_and_resumes_its_queue_through_htmx(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"mail": 2}}
    JobFactory(queue_name="mail")
    JobFactory(queue_name="mail", running=True, locked_by="web-1:42")
    html = operator_client.get(HEALTH).content.decode()
    row = queue_row(html, "mail")
    assert 'name="queue" value="mail"' in row and 'name="action" value="pause"' in row
    assert 'aria-label="Pause mail"' in row and "at most 2/s" in row
    assert '<code class="ident">web-1:<wbr>42</code> 1' in row  # running now, per worker
    # The row's form posts through htmx; the redirect it follows brings the health part back,
    # saying what happened inside it (the page's own message list is not swapped).
    htmx = {"HX-Request": "true"}
    response = operator_client.post(
        URL,
        {"action": "pause", "queue": "mail", "reason": "SMTP down"},
        headers=htmx,
        follow=True,
    )
    part = response.content.decode()
    assert part.lstrip().startswith('<div id="health"')  # the part alone, not a page
    assert "Queue mail paused." in part
    row = queue_row(part, "mail")
    assert 'name="action" value="resume"' in row and "SMTP down" in row and "by operator" in row
    operator_client.post(
        URL, {"action": "resume", "queue": "mail", "reason": "back"}, headers=htmx, follow=True
    )
    assert not PausedQueue.objects.exists()
    assert audited("queue") == [
        ("pause", "mail", "operator", "SMTP down"),
        ("resume", "mail", "operator", "back"),
    ]


@pytest.mark.django_db
def test_a_row_pause_without_a_reason_changes_nothing_and_says_why(operator_client):
    JobFactory(queue_name="mail")
    response = operator_client.post(
        URL,
        {"action": "pause", "queue": "mail", "reason": " "},
        headers={"HX-Request": "true"},
        follow=True,
    )
    assert response.status_code == 200 and not PausedQueue.objects.exists()
    assert b'<li class="error">Nothing changed: reason: This field is required.</li>' in (
        response.content
    )


@pytest.mark.django_db
def test_a_viewer_sees_each_queue_but_no_buttons(viewer_client):
    JobFactory(queue_name="mail")
    row = queue_row(viewer_client.get(HEALTH).content.decode(), "mail")
    assert "<form" not in row and "running" in row


@pytest.mark.django_db
def test_the_oldest_ready_figure_leaves_out_paused_queues_and_says_none_when_nothing_is_due(
    operator_client,
):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    JobFactory(queue_name="mail", run_after=now - timedelta(minutes=5))
    JobFactory(queue_name="later", run_after=now + timedelta(hours=1))
    store.queues.pause("mail", actor="ana", reason="outage")
    html = operator_client.get(HEALTH).content.decode()
    figure = html[html.index('data-figure="oldest-ready"') :]
    assert figure.split("</span>")[0].endswith(">—")
    assert "not counting 1 ready in paused queues" in figure
    assert ">paused</span>" in queue_row(html, "mail")
    assert 'data-label="Oldest ready">—</td>' in queue_row(html, "later")
    store.queues.resume("mail", actor="ana", reason="back")
    html = operator_client.get(HEALTH).content.decode()
    figure = html[html.index('data-figure="oldest-ready"') :]
    # Five minutes and the seconds the test took: a human duration, not "300 s".
    assert re.search(r">5 min( \d+ s)?$", figure.split("</span>")[0])
    assert "paused queues" not in figure.split("</div>")[0]


@pytest.mark.django_db
def test_oldest_ready_ages_read_as_durations_in_the_figure_and_both_queue_tables(
    operator_client,
):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    JobFactory(queue_name="mail", task_path="shop.mail", run_after=now - timedelta(seconds=86403))
    JobFactory(queue_name="sms", task_path="shop.sms", run_after=now - timedelta(seconds=192))
    html = operator_client.get(HEALTH).content.decode()
    figure = html[html.index('data-figure="oldest-ready"') :].split("</span>")[0]
    assert figure.endswith(">1 d")
    assert 'data-label="Oldest ready">1 d</td>' in queue_row(html, "mail")
    # The test's own seconds may pass between the enqueue and the read.
    assert re.search(r'data-label="Oldest ready">3 min 1[2-5] s</td>', queue_row(html, "sms"))
    by_task = html[html.index('class="grid queues"') :]
    mail = by_task[by_task.index('<code class="ident">shop.<wbr>mail</code>') :].split("</tr>")[0]
    assert '<td class="num">1 d</td>' in mail
    assert "86403" not in html and "86402" not in html


@pytest.mark.django_db
def test_the_dead_letters_card_and_chart_say_what_each_counts(operator_client):
    from tests.factories import DeadLetterFactory

    DeadLetterFactory(source="django_q2", task_path="q2.task", idempotency_key="q2:1")
    html = operator_client.get(HEALTH).content.decode()
    card = html[html.index('data-figure="dead-letters"') :].split("</div>")[0]
    assert ">1<" in card and "every source" in card
    assert "Jobs dead-lettered per minute" in html
    assert "django-q2 tasks, broker messages, outbox messages and workflow batch items" in html


@pytest.mark.django_db
def test_the_health_page_s_reasons_are_labelled_required(operator_client):
    """Each reason the health page's forms require says so in its label, as the job actions'
    do: the queue control's, the worker control's and each queue row's."""
    from django.utils import timezone

    from jobqueue.models import WorkerRecord

    now = timezone.now()
    WorkerRecord.objects.create(
        worker_id="web-1:1", host="web-1", pid=1, started_at=now, last_heartbeat_at=now
    )
    JobFactory(queue_name="mail")
    html = operator_client.get(HEALTH).content.decode()
    for section in ('id="queue-control"', 'id="worker-control"'):
        form = html[html.index(section) :].split("</form>")[0]
        assert re.search(r"<label>Reason \(required[^<]*<input name=\"reason\" required", form)
    assert "<label>Reason (required) <input " in queue_row(html, "mail")
    assert not re.search(r"<label>Reason <input", html)
