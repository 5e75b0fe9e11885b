"""Periodic jobs with an injected clock: one job per tick whoever looks, overlap, catch-up
after downtime or a pause, operator actions (audited), declarations refused with a reason."""

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import IntegrityError, transaction

from jobqueue import schedules, store
from jobqueue.models import AuditEntry, Job, JobState, Schedule, ScheduleRun
from jobqueue.schedules import Periodic, periodic, plan
from tests import tasks
from tests.audit import audited
from tests.cli import run
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
Outcome = ScheduleRun.Outcome


def make(cron="* * * * *", *, name="every-minute", at=T0, **row) -> Schedule:
    declaration = Periodic(name=name, task_path="tests.tasks.noop", cron=cron, **row)
    fields = declaration.row()
    store.schedules.upsert(
        name, fields, first_tick=schedules.next_tick(cron, fields["timezone"], at), now=at
    )
    return Schedule.objects.get(name=name)


def tick(at) -> int:
    return schedules.enqueue_due(now=at)


def outcomes(schedule) -> list[tuple]:
    return list(
        ScheduleRun.objects.filter(schedule=schedule)
        .order_by("tick", "id")
        .values_list("tick", "outcome")
    )


def test_a_tick_is_enqueued_once_however_often_it_is_looked_at():
    schedule = make()
    assert tick(T0) == 0  # the first tick is the next minute
    assert tick(T0 + MINUTE) == 1
    assert tick(T0 + MINUTE) == 0 and tick(T0 + MINUTE + timedelta(seconds=30)) == 0
    assert tick(T0 + 2 * MINUTE) == 1
    jobs = Job.objects.order_by("id")
    assert [j.task_path for j in jobs] == ["tests.tasks.noop"] * 2
    assert outcomes(schedule) == [
        (T0 + MINUTE, Outcome.ENQUEUED),
        (T0 + 2 * MINUTE, Outcome.ENQUEUED),
    ]
    schedule.refresh_from_db()
    assert schedule.next_run_at == T0 + 3 * MINUTE and schedule.last_job_id == jobs.last().pk


def test_a_worker_that_read_the_schedule_before_another_took_the_tick_enqueues_nothing():
    make()
    now = T0 + MINUTE
    [stale] = store.schedules.due(now=now, limit=10)  # worker A reads the due row...
    assert tick(now) == 1  # ...worker B takes the tick...
    due = plan(stale, now, grace=60)
    new_job, _ = schedules._new_job(stale)
    made = store.schedules.advance(stale, due=due, new_job=new_job, error=None, now=now)
    assert made == [] and Job.objects.count() == 1  # ...and A's compare-and-set changes nothing


def test_the_unique_tick_rolls_back_a_second_job_even_past_the_compare_and_set():
    schedule = make()
    now = T0 + MINUTE
    ScheduleRun.objects.create(schedule=schedule, tick=now, outcome=Outcome.ENQUEUED, at=now)
    assert tick(now) == 0
    assert not Job.objects.exists()
    schedule.refresh_from_db()
    assert schedule.next_run_at == now  # rolled back with the job: the row was not advanced
    with pytest.raises(IntegrityError), transaction.atomic():
        ScheduleRun.objects.create(schedule=schedule, tick=now, outcome=Outcome.SKIPPED, at=now)


def test_without_overlap_a_tick_is_skipped_while_the_last_run_is_ready_or_running():
    schedule = make(overlap=False)
    assert tick(T0 + MINUTE) == 1
    job = Job.objects.get()
    assert tick(T0 + 2 * MINUTE) == 0  # still ready
    [claimed] = store.claim(
        worker_id="w", queues=None, limit=1, lease_seconds=600, now=T0 + 2 * MINUTE
    )
    assert claimed.pk == job.pk
    assert tick(T0 + 3 * MINUTE) == 0  # running
    Job.objects.filter(pk=job.pk).update(state=JobState.DONE, lease_token=None, locked_until=None)
    assert tick(T0 + 4 * MINUTE) == 1
    assert [o for _, o in outcomes(schedule)] == [
        Outcome.ENQUEUED,
        Outcome.SKIPPED,
        Outcome.SKIPPED,
        Outcome.ENQUEUED,
    ]


def test_with_overlap_every_tick_runs_whatever_the_last_run_is_doing():
    make()
    assert tick(T0 + MINUTE) == 1 and tick(T0 + 2 * MINUTE) == 1
    assert Job.objects.filter(state=JobState.READY).count() == 2


@pytest.mark.parametrize(
    "catch_up, late, expected_run, expected_missed",
    [
        # Ten minutes without a worker: ticks T0+1 … T0+10 are due at T0+10m30s.
        ("latest", 30, [10], (1, 9)),
        ("all", 30, [6, 7, 8, 9, 10], (1, 5)),  # catch_up_limit=5: the most recent five
        ("none", 30, [10], (1, 9)),  # the latest tick is 30 s late: within the grace
        ("none", 59, [10], (1, 9)),
    ],
)
def test_catch_up_after_downtime(catch_up, late, expected_run, expected_missed):
    schedule = make(catch_up=catch_up, catch_up_limit=5, name=f"c-{catch_up}-{late}")
    now = T0 + 10 * MINUTE + timedelta(seconds=late)
    assert tick(now) == len(expected_run)
    ran = [t for t, o in outcomes(schedule) if o == Outcome.ENQUEUED]
    assert ran == [T0 + n * MINUTE for n in expected_run]
    [missed] = ScheduleRun.objects.filter(schedule=schedule, outcome=Outcome.MISSED)
    first, last = expected_missed
    assert missed.tick == T0 + first * MINUTE
    assert (T0 + last * MINUTE).isoformat() in missed.note
    schedule.refresh_from_db()
    assert schedule.next_run_at == T0 + 11 * MINUTE


def test_catch_up_none_runs_nothing_when_the_latest_tick_is_past_the_grace():
    schedule = make("*/10 * * * *", catch_up="none")
    now = T0 + 10 * MINUTE + timedelta(seconds=61)
    assert tick(now) == 0
    assert outcomes(schedule) == [(T0 + 10 * MINUTE, Outcome.MISSED)]


def test_all_runs_every_missed_tick_within_its_bound_with_nothing_missed():
    schedule = make(catch_up="all", catch_up_limit=10)
    assert tick(T0 + 3 * MINUTE) == 3
    assert [o for _, o in outcomes(schedule)] == [Outcome.ENQUEUED] * 3


def test_a_paused_schedule_does_not_tick_and_on_resume_catches_up_as_declared():
    schedule = make(catch_up="latest")
    assert store.schedules.pause(schedule.name, actor="ana", reason="provider down", now=T0)
    assert not store.schedules.pause(schedule.name, actor="ana", reason="again", now=T0)
    assert tick(T0 + 5 * MINUTE) == 0
    assert store.schedules.resume(schedule.name, actor="ben", reason="provider back")
    assert tick(T0 + 5 * MINUTE) == 1
    assert outcomes(schedule) == [
        (T0 + MINUTE, Outcome.MISSED),
        (T0 + 5 * MINUTE, Outcome.ENQUEUED),
    ]
    name = schedule.name
    assert audited("schedule") == [
        ("pause", name, "ana", "provider down"),
        ("resume", name, "ben", "provider back"),
    ]


def test_run_now_is_audited_and_refused_while_a_non_overlapping_run_is_live():
    schedule = make(overlap=False)
    job = schedules.run_now(schedule.name, actor="ana", reason="rates stale", now=T0)
    assert Job.objects.get().pk == job.pk
    [entry] = AuditEntry.objects.all()
    assert (entry.action, entry.params, entry.targets) == (
        "schedule.run",
        {"job": job.pk},
        [schedule.name],
    )
    with pytest.raises(ValueError, match="still ready or running"):
        schedules.run_now(schedule.name, actor="ana", reason="again", now=T0)
    assert tick(T0 + MINUTE) == 0  # the manual run counts as the live run
    assert ScheduleRun.objects.filter(outcome=Outcome.MANUAL).count() == 1
    with pytest.raises(ValueError, match="no schedule named"):
        schedules.run_now("nope", actor="ana", reason="x")
    with pytest.raises(ValueError, match="reason"):
        schedules.run_now(schedule.name, actor="ana", reason=" ")


def test_a_task_that_cannot_be_loaded_is_recorded_and_logged_not_retried_every_second(caplog):
    schedule = make()
    Schedule.objects.filter(pk=schedule.pk).update(task_path="tests.tasks.gone")
    with caplog.at_level(logging.ERROR, logger="jobqueue.schedules"):
        assert tick(T0 + MINUTE) == 0
    [run_] = ScheduleRun.objects.filter(schedule=schedule)
    assert run_.outcome == Outcome.ERROR and "gone" in run_.note
    assert "event=schedule_failed" in caplog.text
    schedule.refresh_from_db()
    assert schedule.next_run_at == T0 + 2 * MINUTE


def test_a_row_edited_into_a_bad_cron_is_retired_loudly(caplog):
    schedule = make()
    Schedule.objects.filter(pk=schedule.pk).update(cron="0 0 30 2 *")
    with caplog.at_level(logging.ERROR, logger="jobqueue.schedules"):
        assert tick(T0 + MINUTE) == 0
    assert "event=schedule_invalid" in caplog.text
    assert Schedule.objects.get(pk=schedule.pk).declared is False


def test_cron_is_read_in_the_schedules_time_zone():
    schedule = make("0 9 * * *", timezone="Europe/Paris")  # 09:00 Paris = 08:00 UTC in winter
    assert schedule.next_run_at == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cron": "61 * * * *"}, "not a cron expression"),
        ({"cron": "0 0 30 2 *"}, "30 2"),  # never fires
        ({"cron": 5}, "not a cron expression"),
        ({"timezone": "Mars/Olympus"}, "not a time zone"),
        ({"catch_up": "some"}, "catch_up is one of"),
        ({"catch_up_limit": 0}, "catch_up_limit"),
        ({"catch_up_limit": 10_000}, "catch_up_limit"),
        ({"args": [object()]}, "not JSON serializable"),
        ({"kwargs": {"a": "\x00"}}, "NUL"),
        ({"name": ""}, "name is 1 to"),
    ],
)
def test_a_declaration_that_could_never_run_is_refused_with_the_reason(kwargs, message):
    cron = kwargs.pop("cron", "* * * * *")
    with pytest.raises((ValueError, TypeError), match=message):
        periodic(cron, **kwargs)(tasks.noop)


def test_periodic_goes_on_a_task_and_names_must_be_unique(monkeypatch):
    monkeypatch.setattr(schedules, "_registry", {})
    with pytest.raises(TypeError, match="above @task"):
        periodic("* * * * *")(lambda: None)
    assert periodic("*/5 * * * *")(tasks.noop) is tasks.noop
    periodic("*/5 * * * *")(tasks.noop)  # the same declaration again: fine (a reimport)
    with pytest.raises(ValueError, match="give each a name"):
        periodic("*/10 * * * *")(tasks.noop)
    periodic("*/10 * * * *", name="noop-ten", kwargs={"n": 10})(tasks.noop)
    assert set(schedules._registry) == {"tests.tasks.noop", "noop-ten"}


def test_sync_creates_updates_keeps_a_pause_and_retires(monkeypatch):
    registry = {}
    monkeypatch.setattr(schedules, "_registry", registry)
    monkeypatch.setattr(schedules, "declared", lambda: dict(registry))
    periodic("*/5 * * * *", name="five")(tasks.noop)
    assert schedules.sync(now=T0) == {"created": ["five"], "updated": [], "retired": []}
    assert Schedule.objects.get(name="five").next_run_at == T0 + 5 * MINUTE
    assert schedules.sync(now=T0) == {"created": [], "updated": [], "retired": []}
    store.schedules.pause("five", actor="ana", reason="hold")
    registry["five"] = Periodic(name="five", task_path="tests.tasks.noop", cron="*/7 * * * *")
    assert schedules.sync(now=T0 + MINUTE)["updated"] == ["five"]
    row = Schedule.objects.get(name="five")
    assert row.cron == "*/7 * * * *" and row.paused_at is not None  # the pause is kept
    assert row.next_run_at == T0 + 7 * MINUTE  # restarted from the sync's now
    registry.clear()
    assert schedules.sync(now=T0)["retired"] == []  # a worker's sync never retires
    assert schedules.sync(retire=True, now=T0)["retired"] == ["five"]
    assert Schedule.objects.get(name="five").declared is False
    assert tick(T0 + 10 * MINUTE) == 0


def test_schedules_command_lists_pauses_resumes_and_runs_with_an_audit():
    schedule = make(overlap=False)
    user = UserFactory(username="ana")
    refused = run("schedules", "pause", schedule.name, "--reason", "r", "--operator", "ana")
    assert refused.refused_cleanly and "Not allowed: this needs the permission" in refused.err
    # `schedules pause|resume|run` are `act schedule.*`: the console's view permission too.
    user.user_permissions.add(
        Permission.objects.get(codename="manage_schedule"),
        Permission.objects.get(codename="view_deadletter", content_type__app_label="deadletters"),
    )
    result = run("schedules", "pause", schedule.name, "--reason", "hold", "--operator", "ana")
    assert result.code == 0 and result.out.strip() == f"{schedule.name} paused."
    listed = json.loads(run("schedules", "list", "--json").out)
    assert [(r["name"], r["state"], r["paused_by"]) for r in listed] == [
        (schedule.name, "paused", "ana")
    ]
    assert (
        run("schedules", "resume", schedule.name, "--reason", "go", "--operator", "ana").code == 0
    )
    result = run("schedules", "run", schedule.name, "--reason", "now", "--operator", "ana")
    assert result.code == 0 and f"job {Job.objects.get().pk} enqueued" in result.out
    again = run("schedules", "run", schedule.name, "--reason", "now", "--operator", "ana")
    assert again.code == 2 and "still ready or running" in again.err
    missing = run("schedules", "pause", "nope", "--reason", "x", "--operator", "ana")
    assert missing.code == 2 and "no schedule named" in missing.err
    assert len(audited("schedule")) == 3
    assert schedule.name in run("schedules", "list").out


def test_prune_removes_old_tick_records_and_keeps_the_schedules_last_run():
    schedule = make()
    assert tick(T0 + MINUTE) == 1 and tick(T0 + 2 * MINUTE) == 1
    ScheduleRun.objects.filter(tick=T0 + MINUTE).update(at=T0 - timedelta(days=30))
    assert store.schedules.prune_runs(older_than=timedelta(days=14)) == 1
    assert [t for t, _ in outcomes(schedule)] == [T0 + 2 * MINUTE]
    assert Schedule.objects.get(pk=schedule.pk).last_tick_at == T0 + 2 * MINUTE


def test_a_fault_in_a_schedule_is_logged_and_the_chore_goes_on(monkeypatch, caplog):
    from jobqueue.chores import ScheduleTicks

    make()

    def broken(**kwargs):
        raise RuntimeError("a bug in a schedule")

    monkeypatch.setattr(schedules, "enqueue_due", broken)
    with caplog.at_level(logging.ERROR, logger="jobqueue.chores"):
        assert ScheduleTicks(using="default", who="w").run(T0 + MINUTE) is False
    assert "event=schedule_error worker=w" in caplog.text and "a bug in a schedule" in caplog.text


def test_a_run_now_made_after_the_due_list_was_read_still_counts_as_the_live_run():
    schedule = make(overlap=False)
    [stale] = store.schedules.due(now=T0 + MINUTE, limit=10)  # a worker reads the due row...
    schedules.run_now(schedule.name, actor="ana", reason="now", now=T0 + MINUTE)  # ...an operator
    due = plan(stale, T0 + MINUTE, grace=60)
    new_job, _ = schedules._new_job(stale)
    assert (
        store.schedules.advance(stale, due=due, new_job=new_job, error=None, now=T0 + MINUTE) == []
    )
    assert Job.objects.count() == 1
    assert [o for _, o in outcomes(schedule)] == [Outcome.MANUAL, Outcome.SKIPPED]


def test_a_worker_claims_the_tick_it_enqueued_on_its_next_step_without_sleeping():
    """A step claims before it looks at the schedules: the tick it enqueues wakes its own loop
    (on SQLite no NOTIFY would), so the job starts on the next step, not a poll later."""
    from jobqueue.worker import Worker

    make()
    worker = Worker(clock=lambda: T0 + MINUTE, poll_interval=60)
    worker.wake.clear()
    assert not worker._step()  # nothing to claim yet; the tick is enqueued after the claim
    assert Job.objects.get().state == JobState.READY and worker.wake.is_set()
    assert worker._step()
    assert Job.objects.get().state == JobState.RUNNING


def test_a_burst_worker_runs_the_tick_it_enqueued_before_it_exits(transactional_db):
    """Its first claim finds nothing; the tick its housekeeping enqueues right after is still
    a due job, so `--burst` runs it rather than exiting and leaving it for another worker."""
    from jobqueue.worker import Worker

    make()
    assert Worker(burst=True, clock=lambda: T0 + MINUTE, poll_interval=0.05).run() == 0
    assert Job.objects.get().state == JobState.DONE
