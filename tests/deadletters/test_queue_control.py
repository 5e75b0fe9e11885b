"""Pausing and resuming a queue from the health page: permission, CSRF, a reason, the audit."""

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
