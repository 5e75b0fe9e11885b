"""Seed 004's crash and outage exercises, reproduced through the public commands."""

import json
import subprocess
import sys

from django.utils import timezone

from demo.models import Receipt
from jobqueue.models import DeadLetter, DeadLetterState, Job, JobState
from tests.conftest import BASE_DIR, wait_until

RECEIPT = "demo.tasks.send_receipt"


def manage(workers, *argv, env=None, check=True):
    proc = subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        env={**workers.env, "DEMO_FLAKY_RATE": "0", **(env or {})},
        timeout=120,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def receipt_job(workers):
    [row] = json.loads(manage(workers, "jobs", "--json", "--task", RECEIPT).stdout)
    return row


def test_crash_after_the_receipt_commits_is_acknowledged_by_a_later_worker(workers):
    manage(workers, "fieldnotes", "pay")
    crashed = manage(
        workers,
        "runworker",
        "--burst",
        "--queue",
        "receipts",
        "--lease",
        "1",
        env={"REDRIVE_FAULT": "after_effect"},
        check=False,
    )
    assert crashed.returncode == -9, crashed.stderr
    assert "fault point after_effect" in crashed.stderr
    assert Receipt.objects.count() == 1  # the effect committed before the crash
    job = Job.objects.get(task_path=RECEIPT)
    assert job.state == JobState.RUNNING

    wait_until(lambda: timezone.now() > job.locked_until, message="lease expiry")
    manage(workers, "runworker", "--burst", "--queue", "receipts")
    row = receipt_job(workers)
    assert (row["state"], row["attempts"]) == ("done", 2)
    assert len(manage(workers, "fieldnotes", "receipts").stdout.splitlines()) == 1


def test_outage_exhausts_three_attempts_then_replay_delivers_one_receipt(workers):
    # Retries due after the burst that failed has ended: a loaded machine took longer than
    # a 0.05 s backoff to finish the burst, which then claimed the retry too (attempts 2).
    fast = {"REDRIVE_BACKOFF_BASE": "2", "REDRIVE_BACKOFF_CAP": "2"}
    manage(workers, "fieldnotes", "outage", "3600")
    manage(workers, "fieldnotes", "pay")
    for attempt in (1, 2, 3):
        manage(workers, "runworker", "--burst", "--queue", "receipts", env=fast)
        job = Job.objects.get(task_path=RECEIPT)
        assert job.attempts == attempt
        if attempt < 3:
            assert job.state == JobState.READY
            wait_until(lambda job=job: timezone.now() >= job.run_after, message="retry due")
    row = receipt_job(workers)
    assert (row["state"], row["attempts"]) == ("dead", 3)
    assert "receipt_unavailable" in row["last_error"]
    letter = DeadLetter.objects.get(task_path=RECEIPT)
    assert letter.attempts == 3 and Receipt.objects.count() == 0
    assert manage(workers, "runworker", "--burst", "--queue", "receipts").returncode == 0
    assert Job.objects.get(task_path=RECEIPT).attempts == 3  # dead stays dead: idle

    manage(workers, "fieldnotes", "outage", "--end")
    manage(workers, "createoperator", "oncall", "--role", "operator", "--password", "pw-123456")
    manage(
        workers,
        "deadletters",
        "replay",
        "--job-type",
        RECEIPT,
        "--limit",
        "10",
        "--reason",
        "receipt service restored",
        "--operator",
        "oncall",
    )
    manage(workers, "runworker", "--burst", "--queue", "receipts")

    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYED and letter.replays == 1
    replayed = Job.objects.get(replayed_from=letter)
    assert replayed.state == JobState.DONE and replayed.idempotency_key == letter.idempotency_key
    assert len(manage(workers, "fieldnotes", "receipts").stdout.splitlines()) == 1
