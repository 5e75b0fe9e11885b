"""Retry storms and worker identity."""

import signal
import statistics
from datetime import datetime

from django.tasks import task_backends

from jobqueue.models import Job, JobState
from tests import tasks
from tests.conftest import wait_until
from tests.faults.harness import enqueue_ledger


def test_a_retry_storm_spreads_over_the_jitter_window(workers):
    task_backends["default"].enqueue_many(tasks.storm, [((n,), {}) for n in range(5000)])
    assert (
        workers.run(
            "--max-jobs", "5000", "--concurrency", "4", "--prefetch", "200", timeout=300
        ).returncode
        == 0
    )
    jobs = Job.objects.filter(state=JobState.READY, attempts=1)
    assert jobs.count() == 5000
    # Each delay counted from its failure, as the worker recorded it.
    delays = [
        (run_after - datetime.fromisoformat(errors[-1]["at"])).total_seconds()
        for run_after, errors in jobs.values_list("run_after", "errors")
    ]
    low, high = min(delays), max(delays)
    assert low >= 5.0 and high < 10.0 + 1.0  # equal jitter after attempt 1: [base/2, base)
    spread = statistics.pstdev(delays)
    # A uniform spread over 5 s has a standard deviation of 5/sqrt(12) ≈ 1.44 s.
    assert 1.2 < spread < 1.7, spread
    buckets = [sum(5 + i <= d < 6 + i for d in delays) for i in range(5)]
    assert min(buckets) > 800, buckets  # ~1,000 per one-second slice, none starved
    print(
        f"retry storm: 5,000 delays in [{low:.2f}, {high:.2f}] s, sd {spread:.2f} s, "
        f"per second {buckets}"
    )


def test_a_restarted_worker_with_the_same_identity_recovers_its_previous_jobs(workers):
    [job_id] = enqueue_ledger(1, "identity", work_ms=1)
    crashed = workers.run(
        "--burst", "--id", "pod-a", "--lease", "1", env={"REDRIVE_FAULT": "after_claim"}
    )
    assert crashed.returncode == -signal.SIGKILL
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING and job.locked_by == "pod-a"
    # The next life has the same name but not the lease token: it waits for the lease to expire
    # like anyone else, then takes the job over.
    reborn = workers.start("--id", "pod-a", "--lease", "1", "--poll", "0.05")
    wait_until(lambda: Job.objects.get(pk=job_id).state == JobState.DONE, message="recovery")
    reborn.send_signal(signal.SIGTERM)
    assert reborn.wait(timeout=30) == 0
    job.refresh_from_db()
    assert job.attempts == 2 and job.worker_ids == ["pod-a", "pod-a"]
    assert job.errors[0]["exception_class_path"] == "jobqueue.errors.LeaseExpired"
