"""Seed 000's onboarding workflow (demo.onboarding) with real `runworker` processes on the test
database: SIGKILL at every boundary of every activity (before it, after its effect, after its
record) leaves each local effect done once and each outside call deduplicated by its key; the
seven-day sleep holds no worker; the week passes on an injected clock; a 10,000-item batch
survives two kills; a signal wakes a waiting workflow in a running worker."""

import signal
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from demo.models import Account, OutgoingEmail, ProviderCharge
from demo.onboarding import complete_setup, onboard_customer
from jobqueue.models import DeadLetter, Execution, Job, JobState, Workflow, WorkflowState
from jobqueue.workflows import signal as send_signal
from tests import tasks, workflow_tasks
from tests.conftest import wait_until
from tests.jobqueue.test_worker import burst

ACTIVITIES = ["charge_card", "provision_account", "send_welcome_email"]
POINTS = ["before", "after_effect", "after_record"]
FAST = ("--lease", "1", "--poll", "0.05")
# The batch's job runs for many seconds: a 1 s lease, renewed every third of it, is lost on a
# loaded machine whenever a renewal comes late, and each loss costs the job an attempt. Three
# seconds still bring the job back soon after each kill.
KILLED_BATCH = ("--lease", "3", "--poll", "0.05")


def state_of(workflow_id) -> str | None:
    return Workflow.objects.filter(pk=workflow_id).values_list("state", flat=True).first()


def test_sigkill_at_every_step_boundary_does_each_effect_once(workers):
    drills = []
    for n, (activity, point) in enumerate((a, p) for a in ACTIVITIES for p in POINTS):
        fault = f"{point}:{activity}"
        # A queue per drill: each doomed worker kills its own workflow, once.
        drill = onboard_customer.using(queue_name=f"drill-{n}")
        result = drill.enqueue(f"{point}.{activity}@example.com", "pm_card", 4900)
        doomed = workers.start(*FAST, "--queue", f"drill-{n}", env={"REDRIVE_STEP_FAULT": fault})
        assert doomed.wait(timeout=60) == -signal.SIGKILL, Path(doomed.log_path).read_text()
        assert f"fault point {fault}" in Path(doomed.log_path).read_text()
        drills.append((fault, int(result.id)))

    survivor = workers.start(*FAST)
    ids = [workflow_id for _, workflow_id in drills]
    wait_until(
        lambda: all(state_of(i) == WorkflowState.SLEEPING for i in ids),
        timeout=120,
        message="every onboarding asleep for its week",
    )
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=60) == 0

    for fault, workflow_id in drills:
        email = fault.replace(":", ".") + "@example.com"
        accounts = Account.objects.filter(email=email)
        assert accounts.count() == 1, fault  # local: exactly once, whatever the kill
        charges = ProviderCharge.objects.filter(
            idempotency_key__startswith=f"redrive:wf:{workflow_id}:"
        )
        assert charges.count() == 1, fault  # called out: one charge per key
        welcome = OutgoingEmail.objects.filter(account=accounts.get(), kind="welcome")
        assert welcome.count() == 1, fault
        # A call repeats only when the kill came after its effect and before its record.
        assert charges.get().requests == (2 if fault == "after_effect:charge_card" else 1)
        assert welcome.get().requests == (2 if fault == "after_effect:send_welcome_email" else 1)
        assert charges.get().idempotency_key == f"redrive:wf:{workflow_id}:charge_card"


def test_the_week_long_sleep_holds_no_worker_and_ends_when_the_clock_passes(workers):
    asleep = onboard_customer.enqueue("sleepy@example.com", "pm_card", 1200)
    finished = onboard_customer.enqueue("finisher@example.com", "pm_card", 1200)
    one_thread = workers.start(*FAST, "--concurrency", "1")
    wait_until(
        lambda: state_of(asleep.id) == state_of(finished.id) == WorkflowState.SLEEPING,
        timeout=60,
        message="both asleep",
    )
    # With both asleep, the one handler thread is free: another job runs at once.
    other = tasks.noop.enqueue(7)
    wait_until(
        lambda: Job.objects.get(pk=other.id).state == JobState.DONE, timeout=30, message="noop"
    )
    one_thread.send_signal(signal.SIGTERM)
    assert one_thread.wait(timeout=60) == 0
    for result in (asleep, finished):
        job = Job.objects.get(pk=result.id)
        assert job.state == JobState.READY and job.lease_token is None
        assert job.run_after > timezone.now() + timedelta(days=6, hours=23)

    complete_setup(Account.objects.get(email="finisher@example.com").pk)
    week_later = timedelta(days=7, minutes=1)
    burst(clock=lambda: timezone.now() + week_later)
    assert Job.objects.get(pk=asleep.id).return_value["nudged"] is True
    assert Job.objects.get(pk=finished.id).return_value["nudged"] is False
    nudges = OutgoingEmail.objects.filter(kind="nudge")
    assert [m.account.email for m in nudges] == ["sleepy@example.com"]
    assert state_of(asleep.id) == state_of(finished.id) == WorkflowState.DONE


def test_a_refused_card_dead_letters_the_workflow_at_its_first_step(workers):
    result = onboard_customer.enqueue("refused@example.com", "tok_bad", 100)
    workers.run("--burst", *FAST)
    letter = DeadLetter.objects.get(original_job_id=result.id)
    assert "step 'charge_card' failed after 1 attempt" in letter.last_error
    assert not Account.objects.filter(email="refused@example.com").exists()


def batch_progress(workflow_id) -> int:
    from jobqueue.models import WorkflowStep

    row = WorkflowStep.objects.filter(workflow_id=workflow_id, name="import").first()
    return row.result["next"] if row is not None else 0


def test_a_batch_of_ten_thousand_survives_two_kills_with_its_bad_items_buried(workers):
    result = workflow_tasks.importer.enqueue(10_000, chunk=100)
    for threshold in (2_500, 6_000):
        doomed = workers.start(*KILLED_BATCH)
        wait_until(
            lambda n=threshold: batch_progress(result.id) >= n, timeout=120, message="progress"
        )
        doomed.kill()
        doomed.wait()
        assert batch_progress(result.id) < 10_000, "the batch ended before its second kill"
    last = workers.start(*KILLED_BATCH)
    finished = Job.objects.filter(
        task_path__in=["tests.workflow_tasks.importer", "tests.workflow_tasks.batch_done"],
        state=JobState.DONE,
    )
    wait_until(lambda: finished.count() == 2, timeout=120, message="the batch and its callback")
    last.send_signal(signal.SIGTERM)
    assert last.wait(timeout=60) == 0

    job = Job.objects.get(pk=result.id)
    assert (job.return_value["done"], job.return_value["failed"]) == (9_993, 7)
    # Each good item's effect committed once (a repeat would have raised and been buried).
    assert Execution.objects.filter(job_type="tests.item").count() == 9_993
    letters = DeadLetter.objects.filter(task_path="tests.workflow_tasks.item")
    assert sorted(letter.args[0]["n"] for letter in letters) == [
        n for n in range(10_000) if n % 1429 == 700
    ]
    assert "batch_done import done_with_failures 9993 7" in workers.sink_lines()


def test_a_signal_wakes_a_waiting_workflow_in_a_running_worker(workers):
    result = workflow_tasks.waiter.enqueue("sig", 86_400)
    worker = workers.start(*FAST)
    wait_until(lambda: state_of(result.id) == WorkflowState.WAITING, timeout=60, message="wait")
    assert send_signal(result.id, "go", {"from": "test"}) is True
    wait_until(
        lambda: Job.objects.get(pk=result.id).state == JobState.DONE, timeout=30, message="woken"
    )
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    assert Job.objects.get(pk=result.id).return_value == {"got": {"from": "test"}}
