"""Queue pause and resume: claims skip a paused queue at once, on every worker; running jobs
finish; each change is audited; the CLI, health figures and metrics say so."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from jobqueue import store
from jobqueue.health import snapshot
from jobqueue.models import Job, JobCounter, JobState, PausedQueue, WorkerRecord
from tests import tasks
from tests.audit import audited
from tests.cli import run
from tests.conftest import wait_until
from tests.deadletters.conftest import user_with_role
from tests.factories import DeadLetterFactory, JobFactory, UserFactory

T0 = timezone.now().replace(microsecond=0)


def enqueue(queue, n=1):
    return [
        store.enqueue(store.NewJob(task_path="tests.tasks.noop", queue_name=queue), now=T0)[0]
        for _ in range(n)
    ]


def claim(queues=None, limit=10, at=T0):
    return store.claim(worker_id="w", queues=queues, limit=limit, lease_seconds=30, now=at)


@pytest.mark.django_db
def test_a_paused_queue_is_skipped_by_every_claim_until_it_is_resumed():
    enqueue("mail", 2)
    billing = enqueue("billing", 1)
    assert store.queues.pause("mail", actor="ana", reason="provider down", now=T0) is True
    assert [j.pk for j in claim()] == [billing[0].pk]
    assert claim(queues=["mail"]) == []  # also for a worker bound to that queue
    assert store.queues.resume("mail", actor="ana", reason="provider back", now=T0) is True
    assert {j.queue_name for j in claim()} == {"mail"}
    assert audited("queue") == [
        ("pause", "mail", "ana", "provider down"),
        ("resume", "mail", "ana", "provider back"),
    ]


@pytest.mark.django_db
def test_a_job_already_running_in_a_paused_queue_still_finishes():
    enqueue("mail")
    [job] = claim()
    store.queues.pause("mail", actor="ana", reason="stop new ones", now=T0)
    assert store.acknowledge([(job, None)], now=T0 + timedelta(seconds=1)) == {job.pk}
    assert Job.objects.get(pk=job.pk).state == JobState.DONE


@pytest.mark.django_db
def test_pausing_twice_or_resuming_a_running_queue_changes_and_records_nothing():
    enqueue("mail")
    assert store.queues.pause("mail", actor="ana", reason="x", now=T0)
    assert store.queues.pause("mail", actor="bo", reason="y", now=T0) is False
    assert store.queues.resume("other", actor="bo", reason="z", now=T0) is False
    assert len(audited("queue")) == 1
    assert PausedQueue.objects.get().paused_by == "ana"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "queue, actor, reason",
    [("", "ana", "why"), ("  ", "ana", "why"), ("q" * 101, "ana", "why"), ("mail", "ana", " "),
     ("mail", "", "why"), (None, "ana", "why")],
)  # fmt: skip
def test_a_pause_without_a_queue_an_operator_or_a_reason_is_refused(queue, actor, reason):
    with pytest.raises(ValueError):
        store.queues.pause(queue, actor=actor, reason=reason, now=T0)
    assert not PausedQueue.objects.exists() and not audited("queue")


@pytest.mark.django_db
def test_health_queuehealth_and_metrics_show_a_paused_queue(settings, client):
    enqueue("mail")
    store.queues.pause("mail", actor="ana", reason="provider down", now=T0)
    health = snapshot()
    assert health.totals["paused"] == 1
    assert [r.paused for r in health.rows] == [True]
    assert health.as_json()["paused"]["mail"]["reason"] == "provider down"
    result = run("queuehealth", "--fail-if", "paused>0")
    assert result.code == 1 and "PAUSED by ana" in result.out and "paused=1" in result.out.split()
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": "t" * 32}
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + "t" * 32)
    assert response.status_code == 200
    assert 'redrive_queue_paused{queue="mail"} 1.0' in response.content.decode()


@pytest.mark.django_db
def test_the_queues_command_pauses_lists_and_resumes_for_an_operator_with_the_permission():
    """`queues pause|resume` are `act queue.pause|resume`: the registry's permissions (the
    console's view and jobqueue.pause_queue), refusals and messages."""
    enqueue("mail", 3)
    nobody = UserFactory(username="nobody")
    refused = run("queues", "pause", "mail", "--reason", "x", "--operator", nobody.username)
    assert refused.refused_cleanly and "Not allowed: this needs the permission" in refused.err
    nobody.user_permissions.add(
        Permission.objects.get(codename="view_deadletter", content_type__app_label="deadletters")
    )
    refused = run("queues", "pause", "mail", "--reason", "x", "--operator", nobody.username)
    assert refused.refused_cleanly and "jobqueue.pause_queue" in refused.err
    assert run("queues", "pause", "mail", "--reason", "x", "--operator", "ghost").refused_cleanly
    assert run("queues", "pause", "mail", "--operator", "nobody").code == 2  # --reason missing
    assert not PausedQueue.objects.exists()

    nobody.user_permissions.add(Permission.objects.get(codename="pause_queue"))
    done = run("queues", "pause", "mail", "--reason", "SMTP down", "--operator", "nobody")
    assert done.code == 0 and done.out.strip() == "Queue mail paused."
    listing = run("queues", "list", "--json")
    [row] = json.loads(listing.out)
    assert row["queue"] == "mail" and row["paused"] and row["ready"] == 3
    assert row["paused_by"] == "nobody" and row["reason"] == "SMTP down"
    assert "PAUSED by nobody" in run("queues", "list").out
    again = run("queues", "resume", "mail", "--reason", "back", "--operator", "nobody", "--json")
    assert again.code == 0
    assert json.loads(again.out) == {
        "changed": True,
        "message": "Queue mail resumed.",
        "queue": "mail",
        "state": "running",
    }
    assert not PausedQueue.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_running_workers_skip_a_queue_paused_under_them_and_take_it_again_on_resume(workers):
    """Real worker processes, woken by each enqueue (PostgreSQL) or polling (SQLite)."""
    procs = [workers.start("--poll", "0.1", "--concurrency", "2") for _ in range(2)]
    warm = tasks.noop.enqueue(0)
    wait_until(lambda: Job.objects.get(pk=warm.id).state == JobState.DONE, message="warm-up")
    # Before its first job: paused as a queue no job names yet.
    store.queues.pause("mail", actor="ana", reason="provider down", allow_unknown=True)
    held = [tasks.noop.using(queue_name="mail").enqueue(n) for n in range(5)]
    other = [tasks.noop.enqueue(n) for n in range(5)]
    wait_until(
        lambda: Job.objects.filter(pk__in=[r.id for r in other], state=JobState.DONE).count() == 5,
        message="the other queue's jobs done",
    )
    # A full poll interval and more after the other queue drained: nothing of the paused one ran.
    later = Job.objects.filter(pk__in=[r.id for r in other]).order_by("-finished_at")[0]
    wait_until(lambda: timezone.now() - later.finished_at > timedelta(seconds=0.5))
    assert set(Job.objects.filter(pk__in=[r.id for r in held]).values_list("state", flat=True)) == {
        JobState.READY
    }
    store.queues.resume("mail", actor="ana", reason="provider back")
    wait_until(
        lambda: Job.objects.filter(pk__in=[r.id for r in held], state=JobState.DONE).count() == 5,
        message="the resumed queue's jobs done",
    )
    assert all(p.poll() is None for p in procs)


@pytest.mark.django_db
def test_the_jobs_command_says_which_queues_are_paused():
    enqueue("mail")
    store.queues.pause("mail", actor="ana", reason="SMTP down", now=T0)
    out = run("jobs").out
    assert "queue mail is PAUSED (by ana: 'SMTP down')" in out
    listing = run("jobs", "--json")
    assert [row["queue_name"] for row in json.loads(listing.out)] == ["mail"]  # stays JSON
    assert "PAUSED" in listing.err


@pytest.mark.django_db
def test_a_pause_of_a_queue_nothing_names_is_refused_unless_meant_and_can_be_resumed():
    enqueue("default")
    with pytest.raises(store.queues.UnknownQueue, match="did you mean 'default'"):
        store.queues.pause("defualt", actor="ana", reason="typo", now=T0)
    assert not PausedQueue.objects.exists() and not audited("queue")
    assert store.queues.pause("defualt", actor="ana", reason="new", allow_unknown=True, now=T0)
    assert store.queues.resume("defualt", actor="ana", reason="undo", now=T0) is True
    # A pause written before names were checked (or by hand) is resumed as any other.
    PausedQueue.objects.create(queue_name="ghost", paused_at=T0, paused_by="old", reason="x")
    assert store.queues.resume("ghost", actor="ana", reason="gone", now=T0) is True
    assert not PausedQueue.objects.exists()


@pytest.mark.django_db
def test_known_queues_are_the_configured_the_worked_the_live_the_counted_and_the_paused(
    settings,
):
    settings.TASKS = {
        "default": {"BACKEND": "jobqueue.backend.DatabaseBackend", "QUEUES": ["reports"]}
    }
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"stripe": 1}}
    WorkerRecord.objects.create(
        worker_id="h:1", host="h", pid=1, queues=["pdf", {"odd": 1}],
        started_at=T0, last_heartbeat_at=T0,
    )  # fmt: skip
    JobCounter.objects.create(minute=T0.replace(second=0), queue_name="counted", task_path="t")
    JobCounter.objects.create(minute=T0 - timedelta(days=3), queue_name="long-ago", task_path="t")
    enqueue("waiting")
    JobFactory(queue_name="finished", done=True)
    DeadLetterFactory(queue_name="buried")
    store.queues.pause("paused-early", actor="ana", reason="x", allow_unknown=True, now=T0)
    known = store.queues.known(now=T0)
    # Code names queues too: the demo's receipts task, the console's replay runner.
    expected = {"default", "reports", "stripe", "pdf", "counted", "waiting", "paused-early"}
    assert expected | {"receipts", "deadletters"} <= known
    assert not {"long-ago", "finished", "buried"} & known  # not read for a list
    # ... but a pause looks for one job or dead letter of the queue, in any state.
    for queue in ("long-ago", "finished", "buried"):
        assert store.queues.is_known(queue) is (queue != "long-ago")


@pytest.mark.django_db
def test_the_queues_command_refuses_an_unknown_queue_unless_told_it_has_no_jobs_yet():
    operator = user_with_role("operator")
    enqueue("default")
    typo = run("queues", "pause", "defualt", "--reason", "x", "--operator", operator.username)
    assert typo.refused_cleanly and "did you mean 'default'?" in typo.err
    assert "--allow-unknown" in typo.err and not PausedQueue.objects.exists()
    args = ("--reason", "before its first job", "--operator", operator.username)
    meant = run("queues", "pause", "newq", "--allow-unknown", *args)
    assert meant.code == 0 and "newq paused" in meant.out
    assert run("queues", "resume", "newq", *args).out.strip() == "Queue newq resumed."
