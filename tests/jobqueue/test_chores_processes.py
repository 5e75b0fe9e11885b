"""The chores' leader with real `runworker` processes on the real test database: of eight
workers one runs the chores; SIGKILLed, another takes over within a lease of its last renewal;
stopped (SIGTERM), it hands them on at once. Through both, an every-second schedule gets one
job per tick, none lost or doubled."""

import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobqueue import store
from jobqueue.chores import LEASE_NAME
from jobqueue.models import Job, LeaderLease, ScheduleRun
from tests.conftest import wait_until
from tests.jobqueue.test_schedule_processes import enqueued, every_second

pytestmark = pytest.mark.slow
LEASE = 4.0  # seconds: the workers' --lease, which their chores' lease follows
LOOK = timedelta(seconds=2.5)  # a candidate looks every second; the rest is a loaded machine


def lease() -> LeaderLease | None:
    return LeaderLease.objects.filter(name=LEASE_NAME).first()


def log(proc) -> str:
    return Path(proc.log_path).read_text()


def leaders(procs) -> list[int]:
    """The workers (by index) whose logs say they became the chores' leader."""
    return [n for n, proc in enumerate(procs) if "event=chores_leader " in log(proc)]


def test_one_of_eight_workers_runs_the_chores_and_another_takes_over_a_dead_one(workers):
    schedule = every_second("chores-beat")
    first_tick = schedule.next_run_at
    procs = [
        workers.start("--poll", "0.05", "--lease", str(LEASE), "--id", f"w{n}") for n in range(8)
    ]
    wait_until(
        lambda: all("event=worker_started" in log(p) for p in procs),
        timeout=120,
        message="all eight workers up",
    )
    # Renewed twice by the same holder: the election has settled, and nobody took it over.
    wait_until(
        lambda: (
            (row := lease()) and row.expires_at - row.acquired_at > timedelta(seconds=LEASE * 1.5)
        ),
        timeout=60,
        message="the leader's lease renewed",
    )
    first = lease()
    assert leaders(procs) == [int(first.holder[1:])]  # one leader, and the row names it
    assert f"event=chores_leader holder={first.holder} database=default" in log(
        procs[int(first.holder[1:])]
    )

    doomed = procs[int(first.holder[1:])]
    doomed.kill()
    doomed.wait()
    killed_at = timezone.now()
    last_renewal_end = LeaderLease.objects.get(name=LEASE_NAME).expires_at
    wait_until(
        lambda: lease() is not None and lease().holder != first.holder,
        timeout=6 * LEASE,
        message="another worker takes the chores over",
    )
    second = lease()
    # Never two leaders: not before the dead one's lease ended; within a look after it.
    assert last_renewal_end <= second.acquired_at <= last_renewal_end + LOOK
    assert second.acquired_at - killed_at <= timedelta(seconds=LEASE) + LOOK
    survivors = [p for p in procs if p is not doomed]
    # The row commits before its holder writes the log line: wait for the line, then count.
    wait_until(lambda: leaders(survivors), timeout=30, message="the new leader's log line")
    assert leaders(survivors) == [survivors.index(procs[int(second.holder[1:])])]

    # Stopped, a leader hands the lease on at once, long before it would have ended.
    stopped = procs[int(second.holder[1:])]
    second_end = lease().expires_at  # at least this far: it may renew once more meanwhile
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(timeout=60) == 0
    assert "event=chores_leader_released" in log(stopped)
    wait_until(
        lambda: lease() is not None and lease().holder not in (first.holder, second.holder),
        timeout=6 * LEASE,
        message="a third leader",
    )
    assert lease().acquired_at < second_end
    ticks_then = len(enqueued(schedule))
    wait_until(
        lambda: len(enqueued(schedule)) >= ticks_then + 3,
        timeout=60,
        message="the third leader ticks",
    )

    store.schedules.pause(schedule.name, actor="test", reason="end of the run")
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in running] == [0] * 6
    assert all("event=chores_leader_lost" not in log(p) for p in procs)  # nobody overlapped

    runs = enqueued(schedule)
    ticks = [run.tick for run in runs]
    assert ticks[0] == first_tick
    assert ticks == [first_tick + timedelta(seconds=n) for n in range(len(ticks))]  # no gap
    jobs = Job.objects.filter(task_path="tests.tasks.noop")
    assert sorted(run.job_id for run in runs) == sorted(jobs.values_list("pk", flat=True))
    assert not ScheduleRun.objects.exclude(outcome=ScheduleRun.Outcome.ENQUEUED).exists()
    assert not LeaderLease.objects.exists()  # the last leader gave it up on its way out


def test_with_the_workers_chores_off_a_runchores_process_runs_them(workers):
    env = {"REDRIVE_CHORES": "off"}
    worker = workers.start("--poll", "0.05", "--id", "w0", env=env)
    chores = workers.start("--lease", str(LEASE), "--id", "c0", command="runchores", env=env)
    schedule = every_second("chores-off")
    wait_until(lambda: len(enqueued(schedule)) >= 2, timeout=90, message="ticks by runchores")
    assert lease().holder == "c0"
    wait_until(
        lambda: Job.objects.filter(task_path="tests.tasks.noop", state="done").exists(),
        timeout=60,
        message="the worker runs the ticks' jobs",
    )
    store.schedules.pause(schedule.name, actor="test", reason="end of the run")
    for proc in (chores, worker):
        proc.send_signal(signal.SIGTERM)
    assert [chores.wait(timeout=60), worker.wait(timeout=60)] == [0, 0]
    assert "event=chores_leader holder=c0" in log(chores)
    assert "event=chores_leader" not in log(worker)
    assert not LeaderLease.objects.exists()
