"""Idempotency-Key on the API's POSTs: a retry of the same request gets the first answer and acts
no second time; the same key on another request is refused; two concurrent requests with one
key act once (real threads, on SQLite and PostgreSQL)."""

import threading
from datetime import timedelta
from unittest import mock

import pytest
from django.db import connections
from django.utils import timezone

from deadletters import services
from deadletters.models import IdempotentRequest, Selection
from jobqueue.models import AuditEntry, PausedQueue
from tests.deadletters.conftest import user_with_role
from tests.factories import DeadLetterFactory, JobFactory

from .conftest import api_as

pytestmark = pytest.mark.django_db


def test_a_retry_gets_the_first_answer_and_acts_once(operator_api):
    letters = DeadLetterFactory.create_batch(2)
    body = {"ids": [letter.pk for letter in letters]}
    first = operator_api.post("actions/letters.replay", body, key="deploy-42")
    again = operator_api.post("actions/letters.replay", body, key="deploy-42")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Selection.objects.count() == 1
    confirm = {"reason": "fixed"}
    path = f"selections/{first.json()['selection']}/confirm"
    ran = operator_api.post(path, confirm, key="confirm-42")
    retried = operator_api.post(path, confirm, key="confirm-42")
    assert retried.status_code == 200 and retried.json() == ran.json()
    from deadletters.models import ReplayRun

    assert ReplayRun.objects.count() == 1


def test_without_a_key_each_call_acts(operator_api):
    letter = DeadLetterFactory()
    operator_api.post("actions/letters.replay", {"ids": [letter.pk]})
    operator_api.post("actions/letters.replay", {"ids": [letter.pk]})
    assert Selection.objects.count() == 2
    assert not IdempotentRequest.objects.exists()


def test_the_same_key_on_another_request_is_refused_and_does_nothing(operator_api):
    JobFactory(queue_name="a")
    JobFactory(queue_name="b")
    operator_api.post("actions/queue.pause", {"queue": "a", "reason": "x"}, key="k1")
    response = operator_api.post("actions/queue.pause", {"queue": "b", "reason": "x"}, key="k1")
    assert response.status_code == 422
    assert response.json()["detail"].startswith(
        "This Idempotency-Key was used for a different request"
    )
    assert list(PausedQueue.objects.values_list("queue_name", flat=True)) == ["a"]
    other_path = operator_api.post("actions/queue.resume", {"queue": "a", "reason": "x"}, key="k1")
    assert other_path.status_code == 422


def test_keys_are_per_token(operator_api):
    JobFactory(queue_name="a")
    other = api_as(user_with_role("operator", "second"))
    operator_api.post("actions/queue.pause", {"queue": "a", "reason": "x"}, key="same")
    response = other.post("actions/queue.resume", {"queue": "a", "reason": "x"}, key="same")
    assert response.status_code == 200
    assert response.json()["changed"] is True


def test_a_refused_request_keeps_no_key_and_a_retry_acts(operator_api):
    JobFactory(queue_name="a")
    refused = operator_api.post("actions/queue.pause", {"queue": "a"}, key="k")
    assert refused.status_code == 400
    assert not IdempotentRequest.objects.exists()
    fixed = operator_api.post("actions/queue.pause", {"queue": "a", "reason": "x"}, key="k2")
    assert fixed.json()["changed"] is True


def test_a_key_expires_after_a_day(operator_api):
    JobFactory(queue_name="a")
    body = {"queue": "a", "reason": "x"}
    operator_api.post("actions/queue.pause", body, key="old")
    IdempotentRequest.objects.update(created_at=timezone.now() - timedelta(hours=25))
    operator_api.post("actions/queue.resume", body)
    again = operator_api.post("actions/queue.pause", body, key="old")
    assert again.json()["changed"] is True  # acted anew: the old key was pruned
    assert IdempotentRequest.objects.count() == 1


@pytest.mark.parametrize("key", ["", "has space", "é", "x" * 256])
def test_a_malformed_key_is_400(operator_api, key):
    response = operator_api.post("actions/queue.pause", {"queue": "a", "reason": "x"}, key=key)
    assert response.status_code == 400
    assert "Idempotency-Key is 1 to 255 printable ASCII" in response.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_requests_with_one_key_act_once():
    api = api_as(user_with_role("operator"))
    letter = DeadLetterFactory()
    body = {"ids": [letter.pk]}
    second_sent = threading.Event()
    first_acting = threading.Event()
    freeze = services.freeze_selection

    def slow_freeze(**kwargs):
        # The first request holds its claim while the second one arrives and waits on it.
        first_acting.set()
        second_sent.wait(10)
        threading.Event().wait(0.3)  # the second request reaches its claim meanwhile
        return freeze(**kwargs)

    answers = {}

    def call(name, wait_for=None):
        try:
            if wait_for is not None:
                wait_for.wait(10)
                second_sent.set()
            answers[name] = api.post("actions/letters.replay", body, key="once")
        finally:
            connections.close_all()

    with mock.patch.object(services, "freeze_selection", side_effect=slow_freeze):
        threads = [
            threading.Thread(target=call, args=("first",)),
            threading.Thread(target=call, args=("second", first_acting)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert set(answers) == {"first", "second"}
    assert answers["first"].status_code == answers["second"].status_code == 201
    assert answers["first"].json() == answers["second"].json()
    assert Selection.objects.count() == 1
    assert IdempotentRequest.objects.count() == 1
    assert not AuditEntry.objects.filter(channel="api").exists()  # a freeze records nothing
