"""Periodic jobs with real `runworker` processes on the real test database: eight workers
and one schedule give exactly one job per tick, through a worker killed inside a tick's
transaction and another killed while running; without overlap, a slow run skips ticks; a worker
frozen inside a tick's transaction holds the others' ticks back only for a while."""

import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from jobqueue import store
from jobqueue.models import Job, JobState, Schedule, ScheduleRun
from tests.conftest import wait_until

EVERY_SECOND = "* * * * * *"  # croniter: a sixth field, seconds


def every_second(name, task_path="tests.tasks.noop", **row) -> Schedule:
    now = timezone.now()
    store.schedules.upsert(
        name,
        {
            "task_path": task_path,
            "cron": EVERY_SECOND,
            "timezone": "UTC",
            "args": [],
            "kwargs": {},
            "overlap": True,
            "catch_up": "all",
            "catch_up_limit": 100,
            **row,
        },
        first_tick=now.replace(microsecond=0) + timedelta(seconds=1),
        now=now,
    )
    return Schedule.objects.get(name=name)


def enqueued(schedule) -> list[ScheduleRun]:
    return list(
        ScheduleRun.objects.filter(
            schedule=schedule, outcome=ScheduleRun.Outcome.ENQUEUED
        ).order_by("tick")
    )


def test_eight_workers_enqueue_exactly_one_job_per_tick_through_kills(workers):
    schedule = every_second("heartbeat")
    first_tick = schedule.next_run_at
    # Alone, this worker takes the first tick and is killed before that tick commits.
    doomed = workers.start("--poll", "0.05", env={"REDRIVE_FAULT": "in_tick"})
    assert doomed.wait(timeout=60) == -signal.SIGKILL
    assert "fault point in_tick" in Path(doomed.log_path).read_text()
    assert not Job.objects.exists() and not ScheduleRun.objects.exists()  # rolled back
    assert Schedule.objects.get(pk=schedule.pk).next_run_at == first_tick

    eight = [workers.start("--poll", "0.05") for _ in range(8)]
    # Each one up (its SIGTERM handler installed) before any is signalled: on a loaded machine
    # the first to start can take the ten ticks while the last is still importing Django, and
    # a SIGTERM then ends it as the default action does (-15), not as a drain.
    wait_until(
        lambda: all("event=worker_started" in Path(p.log_path).read_text() for p in eight),
        timeout=120,
        message="all eight workers up",
    )
    wait_until(lambda: len(enqueued(schedule)) >= 4, timeout=60, message="four ticks")
    eight[3].kill()  # one of the eight dies mid-run
    eight[3].wait()
    wait_until(lambda: len(enqueued(schedule)) >= 10, timeout=60, message="ten ticks")
    store.schedules.pause(schedule.name, actor="test", reason="end of the run")
    for proc in eight:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in eight if proc is not eight[3]] == [0] * 7

    runs = enqueued(schedule)
    ticks = [run.tick for run in runs]
    assert ticks[0] == first_tick  # the tick whose worker died was taken by another
    assert ticks == [first_tick + timedelta(seconds=n) for n in range(len(ticks))]  # no gap
    jobs = Job.objects.filter(task_path="tests.tasks.noop")
    assert sorted(run.job_id for run in runs) == sorted(jobs.values_list("pk", flat=True))
    assert not ScheduleRun.objects.exclude(outcome=ScheduleRun.Outcome.ENQUEUED).exists()


def test_without_overlap_a_slow_run_makes_the_next_ticks_skip(workers, tmp_path):
    gate = tmp_path / "gate"
    schedule = every_second(
        "slow",
        task_path="tests.tasks.wait_for_file",
        kwargs={"path": str(gate)},
        overlap=False,
        catch_up="latest",
    )
    procs = [workers.start("--poll", "0.05") for _ in range(2)]
    wait_until(lambda: Path(str(gate) + ".started").exists(), timeout=60, message="slow run")
    skipped = ScheduleRun.objects.filter(schedule=schedule, outcome=ScheduleRun.Outcome.SKIPPED)
    wait_until(lambda: skipped.count() >= 2, timeout=60, message="two skipped ticks")
    assert Job.objects.count() == 1  # the slow run alone
    gate.write_text("go")
    wait_until(lambda: len(enqueued(schedule)) >= 2, timeout=60, message="the next run")
    store.schedules.pause(schedule.name, actor="test", reason="end of the run")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in procs] == [0, 0]
    first = Job.objects.order_by("pk").first()
    assert first.state == JobState.DONE
    runs = list(ScheduleRun.objects.filter(schedule=schedule).order_by("tick"))
    first_skip = next(r for r in runs if r.outcome == ScheduleRun.Outcome.SKIPPED)
    assert f"job {first.pk} was still ready or running" == first_skip.note
    # Every skipped tick came while a run was live, and names it: the run enqueued last before
    # it (the slow first until the second was enqueued; the second if still ready or running
    # at a later tick, which a loaded machine can make it).
    for skipped_run in (r for r in runs if r.outcome == ScheduleRun.Outcome.SKIPPED):
        live = [r for r in enqueued(schedule) if r.tick < skipped_run.tick][-1]
        assert skipped_run.note == f"job {live.job_id} was still ready or running"


def test_a_worker_frozen_inside_a_tick_stalls_the_other_workers_ticks_only_for_a_while(workers):
    """Issue 33's chaos run: a worker frozen (SIGSTOP) inside the tick's transaction stopped
    every worker's ticking until its session was closed. The tick's transaction is bounded
    (jobqueue.store.schedules.ticking): the server ends the frozen session after LOCK_TIMEOUT
    idle in it, and the next leader, after the frozen one's lease, ticks on."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one write lock: a writer frozen inside it stalls every other")
    schedule = every_second("frozen")
    bounds = {"REDRIVE_LOCK_TIMEOUT": "1"}
    frozen = workers.start(
        "--poll", "0.05", "--lease", "2", env={**bounds, "REDRIVE_FAULT": "freeze_in_tick"}
    )
    wait_until(
        lambda: "fault point freeze_in_tick: SIGSTOP" in Path(frozen.log_path).read_text(),
        timeout=60,
        message="the leader frozen inside its tick",
    )
    assert not ScheduleRun.objects.exists()  # its tick is not committed
    other = workers.start("--poll", "0.05", "--lease", "2", env=bounds)
    wait_until(lambda: len(enqueued(schedule)) >= 3, timeout=60, message="ticks go on")
    assert frozen.poll() is None  # still frozen: it was not its exit that let them go on
    frozen.send_signal(signal.SIGCONT)
    wait_until(
        lambda: "event=database_error" in Path(frozen.log_path).read_text(),
        timeout=30,
        message="the frozen one finds its session ended",
    )
    for proc in (frozen, other):
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in (frozen, other)] == [0, 0]
    runs = enqueued(schedule)
    assert len({run.tick for run in runs}) == len(runs)
    assert Job.objects.filter(task_path="tests.tasks.noop").count() == len(runs)
