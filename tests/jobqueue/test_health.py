"""Queue health figures against fixture data, the /metrics endpoint and `queuehealth`."""

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobqueue import store
from jobqueue.health import snapshot
from jobqueue.models import JobCounter, Schedule, ScheduleRun, WorkerRecord
from jobqueue.worker import Worker
from tests import tasks
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)


def ago(**kw):
    return NOW - timedelta(**kw)


@pytest.fixture
def fixture_data():
    # Dated from when the test starts, not from when the module was imported: /metrics reads
    # the real clock, and a loaded full run can reach this test a minute after collection,
    # when the "alive" worker's heartbeat would already count as lost.
    global NOW
    NOW = timezone.now().replace(microsecond=0)
    for minutes in (1, 2, 7):
        JobFactory(task_path="a.task", run_after=ago(minutes=minutes))  # due
    JobFactory(task_path="a.task", run_after=NOW + timedelta(hours=1))  # scheduled
    JobFactory(task_path="a.task", run_after=NOW + timedelta(minutes=5), attempts=1)  # retrying
    JobFactory(task_path="a.task", run_after=ago(minutes=3), attempts=2)  # due, retrying
    JobFactory(task_path="a.task", running=True, locked_until=NOW + timedelta(seconds=30))
    JobFactory(task_path="a.task", running=True, attempts=3, locked_until=ago(seconds=5))
    JobFactory(task_path="b.task", queue_name="mail", done=True)
    JobFactory(task_path="b.task", queue_name="mail", dead=True)
    DeadLetterFactory.create_batch(2, task_path="b.task", queue_name="mail")
    DeadLetterFactory(task_path="b.task", queue_name="mail", discarded=True)
    JobCounter.objects.create(
        minute=ago(minutes=2).replace(second=0),
        queue_name="default",
        task_path="a.task",
        succeeded=8,
        failed=2,
        last_success_at=ago(minutes=2),
    )
    JobCounter.objects.create(
        minute=ago(minutes=30).replace(second=0),
        queue_name="default",
        task_path="a.task",
        succeeded=10,
        failed=10,
        dead=1,
    )
    JobCounter.objects.create(
        minute=ago(hours=3).replace(second=0),
        queue_name="default",
        task_path="a.task",
        succeeded=1000,
    )
    WorkerRecord.objects.create(
        worker_id="alive",
        host="h",
        pid=1,
        started_at=ago(hours=1),
        # From the real clock, not NOW (taken at import): /metrics and queuehealth judge by
        # the real clock, and a loaded machine can take minutes to reach these tests.
        last_heartbeat_at=timezone.now() - timedelta(seconds=5),
        current_job_ids=[1],
    )
    WorkerRecord.objects.create(
        worker_id="gone",
        host="h",
        pid=2,
        started_at=ago(hours=1),
        last_heartbeat_at=ago(minutes=10),
    )


def test_figures_are_exact(fixture_data):
    health = snapshot(now=NOW)
    rows = {(r.queue, r.task): r for r in health.rows}
    a = rows["default", "a.task"]
    assert (a.ready, a.scheduled, a.running, a.expired) == (4, 1, 1, 1)
    # Retrying: waiting out a backoff. The due job on attempt 2 is ready, and the running one
    # on attempt 3 whose lease ran out is expired (one vocabulary: jobqueue.models.JobStatus).
    assert a.retrying == 1
    assert a.oldest_ready_age == 7 * 60
    assert (a.succeeded_5m, a.failed_5m, a.succeeded_60m, a.failed_60m) == (8, 2, 18, 12)
    b = rows["mail", "b.task"]
    assert b.dead_letters == 2 and b.ready == 0
    assert health.totals["failure_rate_5m"] == pytest.approx(0.2)
    assert health.totals["since_last_success"] == 120
    assert [(w["worker_id"], w["lost"]) for w in health.workers] == [
        ("alive", False),
        ("gone", True),
    ]
    assert health.totals["lost_workers"] == 1


@pytest.mark.django_db(transaction=True)
def test_a_worker_records_itself_counts_its_jobs_and_leaves_cleanly():
    for n in range(3):
        tasks.add.enqueue(n, n)
    tasks.permanent.enqueue()
    Worker(burst=True, poll_interval=0.05).run()
    assert not WorkerRecord.objects.exists()  # removed on a clean exit
    counted = JobCounter.objects.get(task_path="tests.tasks.add")
    assert counted.succeeded == 3 and counted.last_success_at is not None
    assert JobCounter.objects.get(task_path="tests.tasks.permanent").dead == 1


def test_metrics_parse_and_need_credentials(client, fixture_data, settings, django_user_model):
    assert client.get("/metrics").status_code == 401
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": "s3cret"}
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    response = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    ready = {tuple(s.labels.values()): s.value for s in families["redrive_jobs_ready"].samples}
    assert ready[("default", "a.task")] == 4
    pending = families["redrive_dead_letters_pending"].samples
    assert {(s.labels["task"], s.value) for s in pending} >= {("b.task", 2)}
    workers = {s.labels["state"]: s.value for s in families["redrive_workers"].samples}
    assert workers == {"alive": 1, "lost": 1}
    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(staff)
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": ""}
    assert client.get("/metrics").status_code == 200


def test_queuehealth_fails_only_when_a_threshold_is_crossed(fixture_data, capsys):
    with pytest.raises(SystemExit) as crossed:
        call_command("queuehealth", "--fail-if", "lost_workers>0", "--fail-if", "ready>100")
    assert crossed.value.code == 1
    assert "ALERT lost_workers=1 > 0" in capsys.readouterr().err
    call_command("queuehealth", "--json", "--fail-if", "ready>100")  # no exit: not crossed
    with pytest.raises(CommandError) as bad:
        call_command("queuehealth", "--fail-if", "readiness>1")
    assert bad.value.returncode == 2
    with pytest.raises(CommandError):
        call_command("queuehealth", "--fail-if", "ready is big")


def test_dashboard_shows_the_figures_to_viewers_only(client, fixture_data, django_user_model):
    from deadletters.roles import assign

    assert client.get("/").status_code == 302  # to the login page
    viewer = django_user_model.objects.create_user("viewer", password="pw")
    assign(viewer, "viewer")
    client.force_login(viewer)
    page = client.get("/").content.decode()
    assert 'data-figure="ready">4<' in page
    # The silent worker is flagged, its row and its id.
    assert '<code class="ident">gone</code> <span class="badge danger">lost</span>' in page
    assert page.count('<tr class="lost">') == 1
    assert "Completed per minute" in page and "<svg" in page
    partial = client.get("/", headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<div id="health"') and "<html" not in partial
    nobody = django_user_model.objects.create_user("nobody", password="pw")
    client.force_login(nobody)
    assert client.get("/").status_code == 403


def test_prune_drops_old_counters_and_keeps_the_health_window(fixture_data):
    call_command("prune", "--counters-older-than", "0.1")  # 2.4 hours
    minutes = sorted(JobCounter.objects.values_list("minute", flat=True))
    assert len(minutes) == 2 and minutes[0] >= ago(minutes=31)
    WorkerRecord.objects.filter(worker_id="gone").update(last_heartbeat_at=ago(days=2))
    call_command("prune")  # records of workers silent for over a day go; the live one stays
    assert list(WorkerRecord.objects.values_list("worker_id", flat=True)) == ["alive"]


def test_an_idle_queue_still_has_every_figure(capsys):
    """Nothing live, nothing ever succeeded: thresholds on any figure work, JSON stays JSON."""
    import json

    call_command("queuehealth", "--fail-if", "oldest_ready_age>300", "--fail-if", "ready>100")
    out = capsys.readouterr().out
    assert {"ready=0", "oldest_ready_age=0", "since_last_success=inf"} <= set(out.split())
    call_command("queuehealth", "--json")
    data = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    assert data["totals"]["ready"] == 0 and data["totals"]["since_last_success"] is None
    with pytest.raises(SystemExit):  # never succeeded counts as infinitely long ago
        call_command("queuehealth", "--fail-if", "since_last_success>600")


def test_last_success_is_the_latest_in_its_minute():
    minute = ago(minutes=1).replace(second=0)
    for task, second in (("a.task", 10), ("b.task", 50), ("c.task", 30)):
        JobCounter.objects.create(
            minute=minute,
            task_path=task,
            succeeded=1,
            last_success_at=minute.replace(second=second),
        )
    assert snapshot(now=NOW).last_success_at == minute.replace(second=50)


def test_lost_after_is_a_setting(fixture_data, settings):
    settings.REDRIVE = {**settings.REDRIVE, **{"WORKER_LOST_AFTER": 3600}}
    assert [w["lost"] for w in snapshot(now=NOW).workers] == [False, False]


def test_health_counts_schedules_late_and_paused_unrun_ticks_and_blocked_ordering_keys():
    now = timezone.now()
    row = {"task_path": "tests.tasks.noop", "cron": "* * * * *"}
    for name, first in (("late", now - timedelta(minutes=5)), ("fine", now + timedelta(minutes=1))):
        store.schedules.upsert(name, row, first_tick=first, now=now)
    store.schedules.upsert("held", row, first_tick=now - timedelta(hours=1), now=now)
    store.schedules.pause("held", actor="ana", reason="provider down")
    ScheduleRun.objects.create(
        schedule=Schedule.objects.get(name="fine"), tick=now, outcome="skipped", at=now
    )
    for key in ("a", "a", "b"):
        tasks.noop.using(ordering_key=key).enqueue(1)
    for job in store.claim(worker_id="w", queues=None, limit=10, lease_seconds=60):
        entry = store.error_entry(
            job, class_path="builtins.ValueError", message="x", traceback="", now=now
        )
        store.fail(job, entry, retry_at=None)  # the first of a and of b die
    tasks.noop.using(concurrency_key="tenant:1").enqueue(1)
    store.claim(worker_id="w", queues=None, limit=10, lease_seconds=60)
    totals = snapshot(now=now).totals
    assert totals["concurrency_keys_running"] == 1
    assert (totals["schedules"], totals["schedules_paused"], totals["schedules_late"]) == (2, 1, 1)
    assert totals["schedule_ticks_unrun_60m"] == 1
    assert totals["blocked_ordering_keys"] == 2


@pytest.mark.django_db
def test_ready_jobs_with_and_without_a_concurrency_key_add_up_in_one_row():
    """Counted in two halves (one per partial index of ready jobs), shown as one row."""
    now = timezone.now()
    JobFactory(task_path="t.sync", run_after=now - timedelta(seconds=30))
    JobFactory(task_path="t.sync", run_after=now - timedelta(seconds=90), concurrency_key="acct:1")
    JobFactory(task_path="t.sync", run_after=now + timedelta(hours=1), concurrency_key="acct:2")
    JobFactory(task_path="t.sync", run_after=now - timedelta(seconds=5), attempts=1)
    JobFactory(task_path="t.sync", run_after=now + timedelta(minutes=1), attempts=1)
    JobFactory(
        task_path="t.sync", run_after=now + timedelta(minutes=1), concurrency_key="a:3", attempts=2
    )
    [row] = [r for r in snapshot(now=now).rows if r.task == "t.sync"]
    assert (row.ready, row.scheduled, row.retrying) == (3, 1, 2)
    assert 89 <= row.oldest_ready_age <= 91  # the keyed job's, the older of the two halves
