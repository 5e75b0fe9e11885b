"""Each action of the registry through the API: carried out once, audited under the API channel
and the token; refused without its permission (403 naming it) with nothing written; the bulk
ones in two calls, freeze then confirm."""

from datetime import timedelta

import pytest
from django.utils import timezone

from deadletters import redaction
from deadletters.models import ReplayRun, RunState, Selection
from jobqueue.models import AuditEntry, DeadLetter, Job, PausedQueue, Schedule, Workflow
from tests.factories import DeadLetterFactory, JobFactory, ReplayRunFactory, SelectionFactory

pytestmark = pytest.mark.django_db


def entries(action):
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


def assert_audited_once(action, api, targets=None):
    found = entries(action)
    assert len(found) == 1, [e.action for e in found]
    entry = found[0]
    assert (entry.actor, entry.channel, entry.token) == (
        api.user.username,
        "api",
        api.token.label,
    )
    if targets is not None:
        assert entry.targets == [str(t) for t in targets]
    return entry


def test_the_index_lists_every_action_of_the_registry(viewer_api):
    from deadletters import actions

    listed = viewer_api.get("actions").json()["actions"]
    assert [a["name"] for a in listed] == list(actions.REGISTRY)


def test_pause_and_resume_a_queue(operator_api):
    JobFactory(queue_name="mail")
    body = {"queue": "mail", "reason": "provider down"}
    response = operator_api.post("actions/queue.pause", body)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "changed": True,
        "message": "Queue mail paused.",
        "queue": "mail",
        "state": "paused",
    }
    assert PausedQueue.objects.filter(queue_name="mail").exists()
    assert_audited_once("queue.pause", operator_api, ["mail"])
    again = operator_api.post("actions/queue.pause", body).json()
    assert again == {"changed": False, "message": "Queue mail was already paused: nothing changed."}
    assert operator_api.post("actions/queue.resume", body).json()["changed"] is True
    assert not PausedQueue.objects.exists()
    assert_audited_once("queue.resume", operator_api, ["mail"])


def test_an_unknown_queue_is_409_and_a_missing_reason_400(operator_api):
    response = operator_api.post("actions/queue.pause", {"queue": "nowhere", "reason": "x"})
    assert response.status_code == 409
    assert "nowhere" in response.json()["detail"]
    response = operator_api.post("actions/queue.pause", {"queue": "mail"})
    assert response.status_code == 400
    assert response.json() == {
        "detail": "Nothing changed: reason: This field is required.",
        "errors": {"reason": ["This field is required."]},
    }
    assert not PausedQueue.objects.exists()
    assert not entries("queue.pause")


def test_a_body_that_is_no_json_object_is_400(operator_api):
    for raw in ("[1]", "not json", '"text"'):
        response = operator_api.post("actions/queue.pause", raw=raw)
        assert response.status_code == 400
        assert response.json()["detail"].startswith("Invalid request: the body ")


def test_an_unknown_action_is_404(operator_api):
    response = operator_api.post("actions/queue.explode", {})
    assert response.status_code == 404


def test_schedules_pause_resume_and_run_now(operator_api):
    now = timezone.now()
    Schedule.objects.create(
        name="nightly",
        task_path="tests.tasks.noop",
        cron="0 3 * * *",
        next_run_at=now + timedelta(hours=1),
        created_at=now,
        updated_at=now,
    )
    body = {"schedule": "nightly", "reason": "quiet night"}
    assert operator_api.post("actions/schedule.pause", body).json()["message"] == "nightly paused."
    assert Schedule.objects.get().paused_at is not None
    assert operator_api.post("actions/schedule.resume", body).json()["changed"] is True
    ran = operator_api.post("actions/schedule.run", body).json()
    assert Job.objects.filter(pk=ran["job"], task_path="tests.tasks.noop").exists()
    for action in ("schedule.pause", "schedule.resume"):
        assert_audited_once(action, operator_api, ["nightly"])
    gone = operator_api.post("actions/schedule.pause", {"schedule": "nope", "reason": "x"})
    assert gone.status_code == 404


def test_a_job_run_now_retry_now_and_cancel(operator_api):
    later = timezone.now() + timedelta(hours=1)
    scheduled = JobFactory(run_after=later)
    retrying = JobFactory(run_after=later, attempts=1)
    response = operator_api.post("actions/job.run_now", {"job": scheduled.pk, "reason": "now"})
    assert response.json()["message"] == f"Job {scheduled.pk} is due now."
    assert Job.objects.get(pk=scheduled.pk).run_after <= timezone.now()
    refused = operator_api.post("actions/job.retry_now", {"job": scheduled.pk, "reason": "x"})
    assert refused.status_code == 409
    assert operator_api.post(
        "actions/job.retry_now", {"job": retrying.pk, "reason": "fixed"}
    ).json()["changed"]
    assert operator_api.post("actions/job.cancel", {"job": retrying.pk, "reason": "no"}).json()[
        "changed"
    ]
    assert Job.objects.get(pk=retrying.pk).state == "cancelled"
    assert_audited_once("job.cancel", operator_api, [retrying.pk])
    assert operator_api.post("actions/job.cancel", {"job": 999999, "reason": "x"}).status_code == (
        404
    )


def test_jobs_freeze_then_confirm(operator_api):
    later = timezone.now() + timedelta(hours=1)
    waiting = [JobFactory(run_after=later, queue_name="bulk") for _ in range(3)]
    JobFactory(queue_name="other")
    frozen = operator_api.post("actions/jobs.cancel", {"select_all": "1", "queue": "bulk"})
    assert frozen.status_code == 201, frozen.content
    preview = frozen.json()
    assert (preview["count"], preview["will_act"], preview["confirmed"]) == (3, 3, False)
    assert preview["sample"] == sorted((j.pk for j in waiting), reverse=True)
    assert not entries("job.cancel")  # frozen, not carried out
    shown = operator_api.get(f"selections/{preview['selection']}").json()
    assert shown["count"] == 3
    done = operator_api.post(
        f"selections/{preview['selection']}/confirm", {"reason": "campaign off"}
    )
    assert done.status_code == 200, done.content
    assert sorted(done.json()["changed_ids"]) == sorted(j.pk for j in waiting)
    assert Job.objects.filter(state="cancelled").count() == 3
    entry = entries("job.cancel")[0]
    assert (entry.channel, entry.token) == ("api", operator_api.token.label)
    again = operator_api.post(f"selections/{preview['selection']}/confirm", {"reason": "x"})
    assert again.status_code == 409
    assert again.json() == {"detail": "This selection was already confirmed."}


def test_letters_replay_freeze_confirm_and_the_run(operator_api):
    letters = [DeadLetterFactory(task_path="app.a", last_error="boom") for _ in range(2)]
    DeadLetterFactory(task_path="app.a", last_error="other")
    DeadLetterFactory(task_path="app.b")
    frozen = operator_api.post(
        "actions/letters.replay", {"select_all": "1", "job_type": "app.a"}
    ).json()
    assert frozen["count"] == 3
    assert frozen["by_type"] == [{"task_path": "app.a", "count": 3}]
    assert [(c["error_class"], c["count"]) for c in frozen["by_cause"]] == [
        ("builtins.ConnectionError", 2),
        ("builtins.ConnectionError", 1),
    ]
    assert frozen["by_cause"][0]["fingerprint"] == letters[0].fingerprint
    confirmed = operator_api.post(
        f"selections/{frozen['selection']}/confirm", {"reason": "receipt API fixed"}
    )
    assert confirmed.status_code == 200, confirmed.content
    run = ReplayRun.objects.get(pk=confirmed.json()["run"])
    assert run.operator_name == "operator"
    polled = operator_api.get(f"runs/{run.pk}").json()
    assert (polled["state"], polled["done"]) == ("finished", 3)
    assert DeadLetter.objects.filter(task_path="app.a", state="replaying").count() == 3
    started = AuditEntry.objects.filter(action="letters.replay").get()
    assert (started.actor, started.channel, started.token) == (
        "operator",
        "api",
        operator_api.token.label,
    )


def test_the_discard_permission_is_named_when_missing(viewer_api):
    letter = DeadLetterFactory()
    response = viewer_api.post("actions/letters.discard", {"ids": [letter.pk]})
    assert response.status_code == 403
    assert "deadletters.discard_deadletter" in response.json()["detail"]
    assert not Selection.objects.exists()


def test_reveal_shows_the_payload_unmasked_and_is_recorded(admin_api, operator_api):
    letter = DeadLetterFactory(kwargs={"password": "hunter2"})
    refused = operator_api.post("actions/letter.reveal", {"letter": letter.pk})
    assert refused.status_code == 403
    assert redaction.REVEAL_PERMISSION in refused.json()["detail"]
    shown = admin_api.post("actions/letter.reveal", {"letter": letter.pk}).json()
    assert shown["kwargs"] == {"password": "hunter2"}


def test_edit_and_replay(admin_api):
    letter = DeadLetterFactory(task_path="tests.tasks.noop", args=[1], kwargs={})
    response = admin_api.post(
        "actions/letter.edit_replay",
        {"letter": letter.pk, "args": [2], "kwargs": {}, "reason": "typo"},
    )
    assert response.status_code == 200, response.content
    job = Job.objects.get(pk=response.json()["job"])
    assert job.args == [2]


def test_export_streams_the_file(operator_api):
    DeadLetterFactory(task_path="app.x")
    response = operator_api.post("actions/letters.export", {"format": "jsonl"})
    assert response.status_code == 200
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert len(lines) == 1 and '"app.x"' in lines[0]


def test_run_pause_resume_cancel_and_approve(operator_api, admin_api, settings):
    selection = SelectionFactory(operator=operator_api.user, ids=[1, 2])
    run = ReplayRunFactory(selection=selection, state=RunState.RUNNING)
    assert operator_api.post("actions/run.pause", {"run": run.pk}).json()["changed"] is True
    assert ReplayRun.objects.get(pk=run.pk).state == RunState.PAUSED
    assert operator_api.post("actions/run.cancel", {"run": run.pk}).json()["changed"] is True
    nothing = operator_api.post("actions/run.resume", {"run": run.pk}).json()
    assert nothing["changed"] is False
    awaiting = ReplayRunFactory(
        selection=SelectionFactory(operator=operator_api.user, ids=[3]), state=RunState.AWAITING
    )
    own = operator_api.post("actions/run.approve", {"run": awaiting.pk})
    assert own.status_code == 409
    assert ReplayRun.objects.get(pk=awaiting.pk).state == RunState.AWAITING
    approved = admin_api.post("actions/run.approve", {"run": awaiting.pk})
    assert approved.status_code == 200, approved.content
    halted = operator_api.post("actions/run.resume_past_canary", {"run": run.pk})
    assert halted.status_code == 409


def test_signal_a_workflow(operator_api):
    job = JobFactory()
    now = timezone.now()
    Workflow.objects.create(
        id=job.pk, task_path="app.flow", job=job, state="waiting", started_at=now, updated_at=now
    )
    body = {"workflow": job.pk, "event": "approved", "payload": {"by": "ann"}, "reason": "ok"}
    response = operator_api.post("actions/workflow.signal", body)
    assert response.status_code == 200, response.content
    assert Workflow.objects.get(pk=job.pk).signals.get().payload == {"by": "ann"}
    assert_audited_once("workflow.signal", operator_api, [job.pk])


def test_the_readmes_replay_script_step_by_step(operator_api):
    """The README's shell script, call by call: freeze, confirm with a rate, poll the run."""
    letters = DeadLetterFactory.create_batch(2, task_path="billing.tasks.send_receipt")
    freeze = {"select_all": "1", "job_type": "billing.tasks.send_receipt", "state": "pending"}
    selection = operator_api.post("actions/letters.replay", freeze, key="deploy-7-freeze").json()
    assert selection["count"] == 2
    confirm = {"reason": "receipt API fixed in deploy 7", "rate": 50}
    path = f"selections/{selection['selection']}/confirm"
    run = operator_api.post(path, confirm, key="deploy-7-confirm").json()["run"]
    polled = operator_api.get(f"runs/{run}").json()
    # Paced: the runner carries it on in the background.
    assert polled["state"] == ReplayRun.objects.get(pk=run).state == "running"
    assert ReplayRun.objects.get(pk=run).requested == len(letters)


def test_a_reveal_is_kept_by_no_cache_and_by_no_idempotency_key(admin_api):
    from deadletters.models import IdempotentRequest

    letter = DeadLetterFactory(kwargs={"password": "hunter2"})
    response = admin_api.post("actions/letter.reveal", {"letter": letter.pk}, key="reveal-1")
    assert response.status_code == 200, response.content
    assert response.json()["kwargs"] == {"password": "hunter2"}
    assert "no-store" in response["Cache-Control"]
    assert not IdempotentRequest.objects.exists()  # the unmasked answer is stored nowhere
    assert "no-store" not in (admin_api.get(f"letters/{letter.pk}").get("Cache-Control") or "")


def test_every_revealing_action_the_api_offers_answers_no_store(admin_api):
    from deadletters import actions

    revealing = [a.name for a in actions.REGISTRY.values() if a.reveals and a.api]
    assert revealing == ["letter.reveal"]
    letter = DeadLetterFactory()
    for name in revealing:
        response = admin_api.post(f"actions/{name}", {"letter": letter.pk})
        assert "no-store" in response["Cache-Control"], name


def test_a_preview_lists_the_filters_it_applied(operator_api):
    letter = DeadLetterFactory(task_path="app.a", queue_name="mail")
    frozen = operator_api.post(
        "actions/letters.replay",
        {"select_all": "1", "job_type": "app.a", "queue": "mail", "order": "oldest"},
    ).json()
    assert frozen["filters"] == {"job_type": "app.a", "queue": "mail"}
    assert (
        operator_api.get(f"selections/{frozen['selection']}").json()["filters"]
        == (frozen["filters"])
    )
    ticked = operator_api.post("actions/letters.replay", {"ids": [letter.pk]}).json()
    assert ticked["filters"] == {}
    JobFactory(queue_name="bulk", run_after=timezone.now() + timedelta(hours=1))
    jobs = operator_api.post(
        "actions/jobs.cancel", {"select_all": "1", "queue": "bulk", "since": "1h"}
    ).json()
    assert jobs["filters"]["queue"] == "bulk"
    assert set(jobs["filters"]) == {"queue", "since"}
