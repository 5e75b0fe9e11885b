"""Real `runworker` processes against the real test database: competition, SIGKILL, SIGTERM."""

import signal
from pathlib import Path

from jobqueue.models import Execution, Job, JobState
from tests import tasks
from tests.conftest import wait_until


def log_of(proc) -> str:
    return Path(proc.log_path).read_text()


def test_two_workers_compete_and_every_job_runs_once(workers):
    a = workers.start("--poll", "0.05", "--prefetch", "0")
    b = workers.start("--poll", "0.05", "--prefetch", "0")
    wait_until(
        lambda: "worker_started" in log_of(a) and "worker_started" in log_of(b),
        message="both workers up",
    )
    from django.tasks import task_backends

    task_backends["default"].enqueue_many(tasks.effect, [((f"job-{n}",), {}) for n in range(200)])
    wait_until(
        lambda: Job.objects.filter(state=JobState.DONE).count() == 200,
        timeout=120,
        message="200 jobs done",
    )
    for proc in (a, b):
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=30) for proc in (a, b)] == [0, 0]

    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    assert Execution.objects.filter(idempotency_key__startswith="effect:job-").count() == 200
    lines = workers.sink_lines()
    assert len(lines) == 200 and len(set(lines)) == 200  # no job reached its effect twice
    owners = {w for ids in Job.objects.values_list("worker_ids", flat=True) for w in ids}
    assert len(owners) == 2, "both workers should have taken jobs"


def test_sigkill_between_effect_and_acknowledgement_is_recovered_once(workers):
    result = tasks.effect.using(idempotency_key="receipt:1").enqueue("receipt:1")
    crashed = workers.run("--burst", "--lease", "1", env={"REDRIVE_TEST_CRASH_AFTER_EFFECT": "1"})
    assert crashed.returncode == -signal.SIGKILL
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.RUNNING and job.attempts == 1
    assert Execution.objects.filter(idempotency_key="effect:receipt:1").count() == 1

    from django.utils import timezone

    wait_until(lambda: timezone.now() > job.locked_until, message="lease expiry")
    survivor = workers.run("--burst")
    assert survivor.returncode == 0, log_of(survivor)
    job.refresh_from_db()
    assert job.state == JobState.DONE and job.attempts == 2
    assert job.errors[0]["exception_class_path"] == "jobqueue.errors.LeaseExpired"
    assert Execution.objects.filter(idempotency_key="effect:receipt:1").count() == 1
    assert workers.sink_lines() == ["receipt:1", "receipt:1"]  # two attempts, one effect


def test_sigterm_lets_the_running_job_finish_within_the_grace(workers, tmp_path):
    gate = tmp_path / "gate"
    result = tasks.wait_for_file.enqueue(str(gate), key="graceful")
    proc = workers.start("--grace", "30", "--poll", "0.05")
    wait_until(lambda: Path(str(gate) + ".started").exists(), message="job start")
    proc.send_signal(signal.SIGTERM)
    gate.write_text("go")
    assert proc.wait(timeout=30) == 0
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DONE and job.attempts == 1
    assert "event=worker_stopped" in log_of(proc)


def test_sigterm_past_the_grace_releases_the_lease_for_another_worker(workers, tmp_path):
    gate = tmp_path / "never"
    result = tasks.wait_for_file.enqueue(str(gate), key="released")
    queued = tasks.noop.enqueue(1)  # prefetched, never started: handed back too
    proc = workers.start("--grace", "0.3", "--poll", "0.05", "--lease", "60")
    wait_until(lambda: Path(str(gate) + ".started").exists(), message="job start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    for pk in (result.id, queued.id):
        job = Job.objects.get(pk=pk)
        assert job.state == JobState.READY and job.lease_token is None
        assert job.attempts == 0  # a graceful stop does not spend the attempt budget


def test_a_second_signal_exits_at_once(workers, tmp_path):
    gate = tmp_path / "never"
    result = tasks.wait_for_file.enqueue(str(gate), key="impatient")
    proc = workers.start("--grace", "600", "--poll", "0.05")
    wait_until(lambda: Path(str(gate) + ".started").exists(), message="job start")
    proc.send_signal(signal.SIGINT)
    # Signals sent back to back can coalesce into one: wait until the first was handled.
    wait_until(lambda: "SIGINT received, stopping" in log_of(proc), message="first signal")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 1
    assert "second signal" in log_of(proc)
    assert Job.objects.get(pk=result.id).state == JobState.RUNNING  # its lease will expire


def test_burst_worker_exits_zero_when_nothing_is_due(workers):
    from datetime import timedelta

    from django.utils import timezone

    tasks.noop.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    proc = workers.run("--burst")
    assert proc.returncode == 0
    assert Job.objects.get().state == JobState.READY


def test_a_worker_started_before_its_database_waits_for_it(workers):
    # Nothing listens on port 1: the worker must keep retrying, say so, and still stop cleanly.
    proc = workers.start(env={"DATABASE_URL": "postgres://postgres@127.0.0.1:1/absent"})
    wait_until(
        lambda: log_of(proc).count("event=database_unavailable") >= 3,
        message="repeated database_unavailable lines",
    )
    assert proc.poll() is None, "the worker gave up instead of waiting for the database"
    assert "Traceback" not in log_of(proc)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def test_burst_leaves_a_retry_pending_and_drain_waits_for_it(workers):
    result = tasks.ordered_step.enqueue("drain", 1, fail_first=True)
    burst = workers.run("--burst")
    job = Job.objects.get(pk=result.id)
    assert burst.returncode == 0 and job.state == JobState.READY and job.attempts == 1
    assert "burst=True" in log_of(burst)
    drained = workers.run("--drain", "60")
    assert drained.returncode == 0, log_of(drained)
    # The start line names the mode as the command line does (issue 47): a drain, not a burst.
    started = next(line for line in log_of(drained).splitlines() if "worker_started" in line)
    assert "drain=60s" in started and "burst=" not in started, started
    job.refresh_from_db()
    assert (job.state, job.attempts, job.return_value) == (JobState.DONE, 2, 1)


def test_a_drain_that_cannot_empty_its_queues_in_time_exits_one_saying_how_many(workers):
    from datetime import timedelta

    from django.utils import timezone

    tasks.noop.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    tasks.noop.enqueue()
    proc = workers.run("--drain", "1")
    assert proc.returncode == 1
    assert "event=drain_incomplete" in log_of(proc) and "unfinished=1" in log_of(proc)
    assert Job.objects.filter(state=JobState.DONE).count() == 1
