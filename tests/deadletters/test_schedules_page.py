"""The schedules page: what an operator sees of each periodic job, and pause, resume and run
now from it (permission, CSRF, a reason, the audit)."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from jobqueue import schedules, store
from jobqueue.models import Job, Schedule, ScheduleRun
from tests.audit import audited

from .conftest import logged_in

pytestmark = pytest.mark.django_db

PAGE = "/deadletters/schedules/"
ACT = "/deadletters/schedules/act/"


def nightly(**row):
    now = timezone.now()
    store.schedules.upsert(
        "nightly <b>report</b>",
        {"task_path": "tests.tasks.noop", "cron": "0 3 * * *", "timezone": "UTC", **row},
        first_tick=now + timedelta(hours=1),
        now=now,
    )
    return Schedule.objects.get()


def test_the_page_lists_each_schedule_with_its_cron_next_and_last_run_escaped(viewer_client):
    schedule = nightly(overlap=False)
    job = schedules.run_now(schedule.name, actor="ana", reason="<script>x</script>")
    page = viewer_client.get(PAGE).content.decode()
    assert "nightly &lt;b&gt;report&lt;/b&gt;" in page and "<b>report</b>" not in page
    assert "0 3 * * *" in page and "never overlaps" in page
    assert f'href="/deadletters/jobs/{job.pk}/"' in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>x" not in page
    assert 'name="action" value="pause"' not in page  # a viewer sees no form
    assert "Run now by an operator" in page  # the manual run, among the ticks not run


def test_an_operator_pauses_resumes_and_runs_a_schedule_and_the_audit_names_them(
    operator_client,
):
    schedule = nightly()
    page = operator_client.get(PAGE).content.decode()
    assert 'name="action" value="pause"' in page
    response = operator_client.post(
        ACT, {"action": "pause", "schedule": schedule.name, "reason": "provider down"}
    )
    assert response.status_code == 302
    assert response["Location"] == f"{PAGE}#schedule-{schedule.pk}"
    schedule.refresh_from_db()
    assert schedule.paused_by == "operator" and schedule.pause_reason == "provider down"
    page = operator_client.get(PAGE).content.decode()
    # Its State cell (the page's own text says "paused" anyway).
    assert '<span class="badge warn">paused</span> by operator ' in page
    assert ": provider down</td>" in page and 'value="resume"' in page
    again = operator_client.post(
        ACT, {"action": "pause", "schedule": schedule.name, "reason": "again"}
    )
    assert again.status_code == 302 and again["Location"] == PAGE  # nothing changed
    operator_client.post(ACT, {"action": "resume", "schedule": schedule.name, "reason": "back"})
    operator_client.post(ACT, {"action": "run", "schedule": schedule.name, "reason": "now"})
    job = Job.objects.get()
    assert ScheduleRun.objects.get().job_id == job.pk
    assert [(verb, actor) for verb, _, actor, _ in audited("schedule")] == [
        ("pause", "operator"),
        ("resume", "operator"),
        ("run", "operator"),
    ]


def test_a_viewer_may_not_act_and_nothing_is_written(viewer_client):
    schedule = nightly()
    response = viewer_client.post(ACT, {"action": "run", "schedule": schedule.name, "reason": "x"})
    assert response.status_code == 403 and b"jobqueue.manage_schedule" in response.content
    assert not Job.objects.exists() and not audited("schedule")


def test_acting_needs_the_csrf_token_and_a_post(operator):
    schedule = nightly()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(ACT, {"action": "pause", "schedule": schedule.name, "reason": "x"})
    assert response.status_code == 403
    assert logged_in(operator).get(ACT).status_code == 405
    assert Schedule.objects.get().paused_at is None


@pytest.mark.parametrize(
    "data, says",
    [
        ({"action": "pause", "schedule": "nope", "reason": "x"}, "no schedule named"),
        ({"action": "explode", "schedule": "nightly <b>report</b>", "reason": "x"}, "action"),
        ({"action": "pause", "schedule": "nightly <b>report</b>", "reason": ""}, "reason"),
        ({"action": "pause", "schedule": "x" * 201, "reason": "x"}, "schedule"),
    ],
)
def test_a_bad_request_changes_nothing_and_says_why(operator_client, data, says):
    nightly()
    response = operator_client.post(ACT, data, follow=True)
    assert response.status_code == 200
    assert "Nothing changed" in response.content.decode() and says in response.content.decode()
    assert not audited("schedule") and Schedule.objects.get().paused_at is None
