"""Acting on queued jobs from the console: one from its page, many through a frozen selection;
permission, CSRF and a reason every time; nothing running is ever touched."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from deadletters.models import Selection
from jobqueue.models import Job, JobState
from tests.audit import audited
from tests.factories import JobFactory

from .conftest import logged_in, messages_of, user_with_role

pytestmark = pytest.mark.django_db
JOBS = "/deadletters/jobs/"


def later():
    return timezone.now() + timedelta(hours=1)


def test_an_operator_runs_a_scheduled_job_now_from_its_page(operator_client):
    job = JobFactory(run_after=later())
    page = operator_client.get(f"{JOBS}{job.pk}/")
    assert b"Run now" in page.content and b"Cancel the job" in page.content
    response = operator_client.post(
        f"{JOBS}{job.pk}/act/", {"action": "run_now", "reason": "customer waiting"}, follow=True
    )
    assert b"is due now" in response.content
    assert Job.objects.get(pk=job.pk).run_after <= timezone.now()
    assert b"customer waiting" in response.content  # the job's own history


def test_a_running_job_offers_no_action_and_refuses_one(operator_client):
    job = JobFactory(running=True)
    assert b"Cancel the job" not in operator_client.get(f"{JOBS}{job.pk}/").content
    response = operator_client.post(
        f"{JOBS}{job.pk}/act/", {"action": "cancel", "reason": "x"}, follow=True
    )
    assert b"Nothing changed" in response.content
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING and not audited("job")


def test_a_viewer_may_not_act_and_a_missing_reason_or_token_changes_nothing(
    viewer_client, operator
):
    job = JobFactory(run_after=later())
    assert b"Cancel the job" not in viewer_client.get(f"{JOBS}{job.pk}/").content
    refused = viewer_client.post(f"{JOBS}{job.pk}/act/", {"action": "cancel", "reason": "x"})
    assert refused.status_code == 403 and b"jobqueue.act_on_job" in refused.content
    operator_client = logged_in(operator)
    operator_client.post(f"{JOBS}{job.pk}/act/", {"action": "cancel", "reason": " "})
    operator_client.post(f"{JOBS}{job.pk}/act/", {"action": "explode", "reason": "x"})
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert (
        strict.post(f"{JOBS}{job.pk}/act/", {"action": "cancel", "reason": "x"}).status_code == 403
    )
    assert Job.objects.get(pk=job.pk).state == JobState.READY and not audited("job")


def test_bulk_cancel_freezes_the_selection_previews_and_acts_once(operator_client, operator):
    waiting = [JobFactory(queue_name="mail", run_after=later()).pk for _ in range(3)]
    started = JobFactory(queue_name="mail", running=True).pk
    JobFactory(queue_name="other")
    response = operator_client.post(
        f"{JOBS}preview/",
        {"action": "cancel", "select_all": "1", "queue": "mail", "ids": [1]},
    )
    selection = Selection.objects.get(kind="jobs")
    assert response.status_code == 302 and response["Location"].endswith(f"{selection.pk}/")
    assert sorted(selection.ids) == sorted([*waiting, started])
    JobFactory(queue_name="mail", run_after=later())  # arrives after the preview: not included
    page = operator_client.get(response["Location"])
    assert page.status_code == 200
    assert b'<strong class="will-act">3</strong> of them are still waiting' in page.content
    assert operator_client.post(response["Location"], {"reason": ""}).status_code == 400
    done = operator_client.post(response["Location"], {"reason": "campaign off"}, follow=True)
    assert b"3 jobs cancelled; 1 skipped" in done.content
    assert b"3 of 4 cancelled" in done.content  # the selection's page says what was done
    assert set(Job.objects.filter(pk__in=waiting).values_list("state", flat=True)) == {
        JobState.CANCELLED
    }
    assert Job.objects.get(pk=started).state == JobState.RUNNING
    assert Job.objects.filter(queue_name="mail", state=JobState.READY).count() == 1
    again = operator_client.post(response["Location"], {"reason": "twice"})
    assert again.status_code == 200 and len(audited("job")) == 3
    # Another operator neither sees nor confirms it.
    second = logged_in(user_with_role("operator", "second-operator"))
    assert second.get(response["Location"]).status_code == 404
    assert second.post(response["Location"], {"reason": "mine now"}).status_code == 404


def test_a_selection_of_ticked_rows_and_bad_input(operator_client):
    a, b = JobFactory(run_after=later()), JobFactory(run_after=later())
    operator_client.post(f"{JOBS}preview/", {"action": "run_now", "ids": [a.pk]})
    assert Selection.objects.get(kind="jobs").ids == [a.pk]
    for data, says in (
        ({"action": "run_now"}, "Select at least one job."),
        ({"action": "run_now", "ids": ["x"]}, "Nothing changed: ids: "),
        ({"action": "nuke", "ids": [b.pk]}, "Nothing changed: the action is run_now or cancel."),
        ({"action": "run_now", "select_all": "1", "state": "exploded"}, "Nothing changed: state: "),
    ):
        response = operator_client.post(f"{JOBS}preview/", data, follow=True)
        assert response.status_code == 200
        assert [m for m in messages_of(response) if m.startswith(says)], (data, says)
    assert Selection.objects.filter(kind="jobs").count() == 1


def test_run_now_in_a_paused_queue_says_the_queue_holds_it(operator_client):
    from jobqueue import store

    job = JobFactory(run_after=later(), queue_name="mail")
    store.queues.pause("mail", actor="ops-lead", reason="SMTP down", channel="code")
    response = operator_client.post(
        f"{JOBS}{job.pk}/act/", {"action": "run_now", "reason": "customer waiting"}, follow=True
    )
    assert messages_of(response) == [
        f"Job {job.pk} is due now, but its queue mail is paused (by ops-lead): it runs once "
        "the queue is resumed."
    ]
    page = response.content.decode()
    assert '<span class="badge warn queue-paused">paused</span> by ops-lead' in page


@pytest.mark.parametrize(
    "state, offered", [("done", False), ("dead", False), ("running", False), ("scheduled", True)]
)
def test_only_tabs_of_jobs_that_can_change_offer_a_selection(operator_client, state, offered):
    JobFactory(run_after=later())
    page = operator_client.get(f"{JOBS}?state={state}").content.decode()
    toolbar = 'name="select_all" value="1"' in page and 'value="cancel" type="submit"' in page
    assert toolbar is offered
