"""Real SIGKILL / SIGSTOP against real worker processes, on SQLite and PostgreSQL."""

import random
import signal
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, connections
from django.db.models import Sum
from django.utils import timezone

from jobqueue import store
from jobqueue.models import DeadLetter, Execution, Job, JobCounter, JobState
from tests import tasks
from tests.conftest import wait_until
from tests.faults.harness import check_invariants, enqueue_ledger, unfinished

LEASE = "1"


def test_random_sigkills_under_load_lose_nothing_and_duplicate_no_effect(workers):
    ids = enqueue_ledger(2000, "kill", work_ms=10)
    rng = random.Random(20261129)
    args = ("--concurrency", "2", "--lease", LEASE, "--poll", "0.05")
    live = [workers.start(*args) for _ in range(4)]
    kills = 0
    while kills < 20:
        time.sleep(rng.uniform(0.05, 0.2))  # the fault schedule, not a wait for a condition
        busy = [p for p in live if "event=claimed" in Path(p.log_path).read_text()]
        if not busy:
            continue  # kill workers that hold jobs, not ones still starting up
        victim = rng.choice(busy)
        live.remove(victim)
        victim.kill()
        victim.wait()
        kills += 1
        live.append(workers.start(*args))
    assert unfinished(ids) > 0, "the kills should land while jobs are still running"
    wait_until(lambda: unfinished(ids) == 0, timeout=240, interval=0.2, message="ledger drained")
    for proc in live:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in live] == [0] * len(live)

    states = check_invariants(
        ids, log_paths=[p.log_path for p in workers.procs], sink_lines=workers.sink_lines()
    )
    assert states[JobState.DONE] == 2000
    assert Job.objects.filter(pk__in=ids, attempts__gt=1).exists(), "kills should force retries"


def test_the_counters_equal_the_jobs_stored_after_a_worker_is_killed(workers):
    """Issue 33's chaos run counted 2,058 plain jobs against 2,130 done after SIGKILLs: a
    worker's outcomes were counted in its memory and written with its record, so a kill lost
    those since its last record. Each is counted with the transition that stores it now."""
    ids = enqueue_ledger(600, "count", work_ms=10)
    args = ("--concurrency", "2", "--lease", LEASE, "--poll", "0.05")
    victim, survivor = workers.start(*args), workers.start(*args)
    wait_until(
        lambda: (
            Job.objects.filter(pk__in=ids, state=JobState.DONE).count() > 100
            and "event=succeeded" in Path(victim.log_path).read_text()
        ),
        timeout=120,
        message="both workers done some",
    )
    victim.kill()
    victim.wait()
    assert unfinished(ids) > 0, "the kill should land while jobs are still running"
    wait_until(lambda: unfinished(ids) == 0, timeout=240, interval=0.2, message="ledger drained")
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=60) == 0
    check_invariants(ids, sink_lines=workers.sink_lines())
    jobs = Job.objects.filter(pk__in=ids)
    counted = JobCounter.objects.filter(task_path="tests.tasks.fault_effect").aggregate(
        succeeded=Sum("succeeded"), failed=Sum("failed"), dead=Sum("dead")
    )
    assert counted == {
        "succeeded": jobs.filter(state=JobState.DONE).count(),
        "failed": sum(len(errors) for errors in jobs.values_list("errors", flat=True)),
        "dead": jobs.filter(state=JobState.DEAD).count(),
    }


def test_sigkill_at_each_fault_point_recovers_within_lease_and_sweep(workers):
    for point in ("after_claim", "after_effect", "after_ack", "heartbeat"):
        # A heartbeat falls within a job that runs past a third of its lease (2 s).
        [job_id] = enqueue_ledger(1, point, work_ms=1500 if point == "heartbeat" else 1)
        crashed = workers.run("--burst", "--lease", "2", env={"REDRIVE_FAULT": point})
        assert crashed.returncode == -signal.SIGKILL, point
        job = Job.objects.get(pk=job_id)
        if point == "after_ack":
            assert job.state == JobState.DONE and job.attempts == 1
            continue
        assert job.state == JobState.RUNNING
        expired_at = job.locked_until
        healthy = workers.start("--poll", "0.05", "--lease", "2")
        wait_until(
            lambda p=healthy.log_path: "worker_started" in Path(p).read_text(),
            message="replacement worker up",
        )
        ready_at = timezone.now()
        wait_until(
            lambda job_id=job_id: Job.objects.get(pk=job_id).state == JobState.DONE,
            timeout=60,
            message=f"recovery after {point}",
        )
        healthy.send_signal(signal.SIGTERM)
        assert healthy.wait(timeout=30) == 0
        job.refresh_from_db()
        assert job.attempts == 2
        # Once the lease has expired and a worker is up, the job is re-claimed within one sweep
        # interval (1 s) plus a poll.
        waited = job.last_attempted_at - max(expired_at, ready_at)
        assert waited.total_seconds() <= 1.0 + 0.5, (point, waited)
    assert Execution.objects.count() == 4


def test_a_worker_paused_past_its_lease_cannot_acknowledge_or_duplicate(workers, tmp_path):
    if connection.vendor == "sqlite":
        pytest.skip(
            "SQLite has one write lock for the whole file: a worker stopped inside a write "
            "stalls every other writer until it resumes, so this fault is PostgreSQL's"
        )
    gate = tmp_path / "gate"
    result = tasks.wait_for_file.enqueue(str(gate), key="paused")
    stale = workers.started(workers.start("--lease", LEASE, "--poll", "0.05"))
    wait_until(lambda: Path(str(gate) + ".started").exists(), message="first handler start")
    stale.send_signal(signal.SIGSTOP)
    job = Job.objects.get(pk=result.id)
    wait_until(lambda: timezone.now() > job.locked_until, message="lease expiry")
    Path(str(gate) + ".started").unlink()
    fresh = workers.started(workers.start("--lease", "30", "--poll", "0.05"))
    wait_until(lambda: Path(str(gate) + ".started").exists(), message="second handler start")
    gate.write_text("go")
    wait_until(lambda: Job.objects.get(pk=result.id).state == JobState.DONE, message="done")
    done = Job.objects.get(pk=result.id)
    stale.send_signal(signal.SIGCONT)
    wait_until(
        lambda: "event=lease_lost" in Path(stale.log_path).read_text(),
        timeout=30,
        message="stale worker notices",
    )
    for proc in (stale, fresh):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    after = Job.objects.get(pk=result.id)
    assert (after.state, after.attempts, after.finished_at) == (JobState.DONE, 2, done.finished_at)
    assert Execution.objects.filter(idempotency_key="effect:paused").count() == 1


def test_a_handler_that_kills_its_worker_every_time_is_dead_lettered_not_looped(workers):
    result = tasks.kills_its_worker.enqueue()
    for attempt in (1, 2, 3):
        proc = workers.run("--burst", "--lease", "0.5")
        assert proc.returncode == -signal.SIGKILL
        job = Job.objects.get(pk=result.id)
        assert job.attempts == attempt
        wait_until(lambda job=job: timezone.now() > job.locked_until, message="lease expiry")
    assert workers.run("--burst").returncode == 0  # its claim sweeps the final attempt
    letter = DeadLetter.objects.get(job_id=result.id)
    assert letter.attempts == 3 and letter.error_class == "jobqueue.errors.LeaseExpired"


def test_replay_while_still_broken_returns_to_the_dead_letters_once(workers):
    result = tasks.always_fails.enqueue("still down")
    Job.objects.filter(pk=result.id).update(max_attempts=1)
    workers.run("--burst")
    letter = DeadLetter.objects.get()
    # Double submit: two replays of the same item at the same moment, on two connections.
    barrier, outcomes = threading.Barrier(2), []

    def submit():
        try:
            barrier.wait(timeout=10)
            outcomes.append(store.replay([letter.pk]))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(len(o.done) for o in outcomes) == [0, 1]
    assert [r for o in outcomes for r in o.skipped.values()] == [
        "an earlier replay is still pending"
    ]
    workers.run("--burst")
    letter.refresh_from_db()
    assert letter.state == "pending" and letter.replays == 1
    assert [e["message"] for e in letter.errors] == ["still down", "still down"]
    assert Job.objects.filter(replayed_from=letter).count() == 1
    assert workers.run("--burst").returncode == 0  # nothing loops
    assert Job.objects.filter(replayed_from=letter).count() == 1


def test_bad_input_becomes_clear_dead_letters_and_the_worker_keeps_going(workers):
    big = "x" * (10 * 1024 * 1024)
    Job.objects.bulk_create(
        [
            Job(
                task_path="tests.tasks.add",
                args=["one"],
                run_after=timezone.now(),
                enqueued_at=timezone.now(),
            ),
            Job(
                task_path="tests.tasks.vanished",
                run_after=timezone.now(),
                enqueued_at=timezone.now(),
            ),
            Job(
                task_path="tests.tasks.noop",
                args=[big],
                run_after=timezone.now(),
                enqueued_at=timezone.now(),
            ),
        ]
    )
    tasks.undecodable_error.enqueue()
    good = tasks.noop.enqueue(1)
    proc = workers.run("--burst")
    assert proc.returncode == 0, Path(proc.log_path).read_text()[-2000:]
    letters = {d.task_path: d for d in DeadLetter.objects.all()}
    assert letters["tests.tasks.add"].error_class == "jobqueue.errors.InvalidPayload"
    assert letters["tests.tasks.vanished"].error_class == "jobqueue.errors.UnknownTask"
    assert "over the" in letters["tests.tasks.noop"].last_error
    assert (
        letters["tests.tasks.undecodable_error"].last_error
        == "bytes from a device: \\udcff\\udcfe\\x00"
    )
    assert Job.objects.get(pk=good.id).state == JobState.DONE
    assert Job.objects.filter(state=JobState.DONE).count() == 1
