"""Workflows in-process (jobqueue.workflows): stored steps, retries and death at a step, durable
sleep and wait_for on an injected clock, signals, batches, replay from the failed step."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobqueue import store
from jobqueue.models import (
    DeadLetter,
    Execution,
    Job,
    JobState,
    Workflow,
    WorkflowState,
    WorkflowStep,
)
from jobqueue.workflows import WorkflowError, signal, sleep, step
from tests import tasks
from tests import workflow_tasks as wf
from tests.jobqueue.test_worker import Clock, burst

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sink(tmp_path, monkeypatch):
    path = tmp_path / "sink.log"
    monkeypatch.setenv("REDRIVE_TEST_SINK", str(path))
    monkeypatch.setitem(wf.BROKEN, "step", True)
    monkeypatch.setitem(wf.BROKEN, "items", True)

    def lines():
        return path.read_text().splitlines() if path.exists() else []

    return lines


def steps(workflow_id) -> dict[str, WorkflowStep]:
    return {s.name: s for s in WorkflowStep.objects.filter(workflow_id=workflow_id)}


def test_a_workflow_stores_each_step_once_and_returns_like_a_task(sink):
    result = wf.three_steps.enqueue("k")
    burst()
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DONE
    assert job.return_value == ["K", {"key": "k", "first": True}, "K-C"]
    workflow = Workflow.objects.get(pk=job.pk)
    assert (workflow.state, workflow.job_id) == (WorkflowState.DONE, job.pk)
    recorded = steps(job.pk)
    assert {n: (s.state, s.attempts) for n, s in recorded.items()} == {
        "a": ("done", 1),
        "b": ("done", 1),
        "c": ("done", 1),
    }
    assert recorded["b"].result == {"key": "k", "first": True}
    # The idempotency key the provider saw is the workflow's and the step's.
    assert f"remote k redrive:wf:{job.pk}:a" in sink()


def test_a_retry_of_the_job_runs_only_the_unfinished_steps(sink):
    result = wf.three_steps.enqueue("k")
    burst()
    # The job runs again (as after a crash past its last step): nothing repeats.
    Job.objects.filter(pk=result.id).update(state=JobState.READY, run_after=timezone.now())
    burst()
    assert sink().count("local k") == 1
    assert len([line for line in sink() if line.startswith("remote k ")]) == 1
    assert Execution.objects.filter(idempotency_key="local:k").count() == 1


def test_a_failing_step_retries_on_its_own_backoff_without_using_the_jobs_attempts(sink):
    clock = Clock()
    result = wf.breaks_at_second.enqueue("x")
    burst(clock=clock)
    job = Job.objects.get(pk=result.id)
    record = steps(job.pk)["second"]
    assert (record.state, record.attempts) == ("failed", 1)
    assert record.errors[0]["exception_class_path"] == "builtins.ValueError"
    # Waiting for the step's backoff (1 s), no worker holds it, and the attempt was not counted.
    assert (job.state, job.attempts, job.lease_token) == (JobState.READY, 0, None)
    assert job.run_after > clock() and job.run_after <= clock() + timedelta(seconds=1)
    clock.advance(seconds=2)
    burst(clock=clock)
    assert steps(job.pk)["second"].attempts == 2
    wf.BROKEN["step"] = False
    clock.advance(seconds=2)
    burst(clock=clock)
    job.refresh_from_db()
    assert job.state == JobState.DONE and job.return_value == ["X", "mended"]
    assert sink().count("try x") == 3
    assert len([line for line in sink() if line.startswith("remote x ")]) == 1  # step one once


def test_a_step_out_of_attempts_dead_letters_the_workflow_there_and_replay_resumes_there(sink):
    clock = Clock()
    result = wf.breaks_at_second.enqueue("y")
    for _ in range(3):
        burst(clock=clock)
        clock.advance(seconds=2)
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DEAD
    letter = DeadLetter.objects.get(job=job)
    assert letter.error_class == "jobqueue.workflows.StepFailed"
    assert "step 'second' failed after 3 attempts: builtins.ValueError: y is broken" in (
        letter.last_error
    )
    workflow = Workflow.objects.get(pk=job.pk)
    assert (workflow.state, workflow.step) == (WorkflowState.DEAD, "second")
    assert steps(job.pk)["second"].state == "dead"

    wf.BROKEN["step"] = False
    replayed = store.replay([letter.pk]).done[letter.pk]
    burst(clock=clock)
    replayed.refresh_from_db()
    assert replayed.state == JobState.DONE and replayed.return_value == ["Y", "mended"]
    workflow.refresh_from_db()
    assert (workflow.state, workflow.job_id) == (WorkflowState.DONE, replayed.pk)
    # The first step's stored result was used; the failed one got a fresh budget and ran.
    assert len([line for line in sink() if line.startswith("remote y ")]) == 1
    assert steps(job.pk)["second"].state == "done"


def test_a_permanent_error_in_a_step_dead_letters_at_once(sink):
    result = wf.breaks_at_second.enqueue("z", permanent=True)
    burst()
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DEAD and job.attempts == 1
    assert steps(job.pk)["second"].attempts == 1
    assert "jobqueue.errors.PermanentError: z refused" in DeadLetter.objects.get(job=job).last_error


def test_a_step_result_over_the_payload_limit_dead_letters_the_workflow_at_once(settings):
    """As a task's return value: the workflow page read every step's result whole."""
    settings.REDRIVE = {**settings.REDRIVE, "MAX_PAYLOAD_BYTES": 1_000}
    big, fits = wf.big_step.enqueue(2_000), wf.big_step.enqueue(998)
    burst(concurrency=1)
    letter = DeadLetter.objects.get(job_id=big.id)
    assert (letter.attempts, letter.error_class) == (1, "jobqueue.workflows.StepFailed")
    assert "the result of step 'text' is 2002 bytes, over the 1000-byte limit" in letter.last_error
    assert not WorkflowStep.objects.filter(workflow_id=big.id, state="done").exists()
    assert Job.objects.get(pk=fits.id).return_value == 998


def test_a_long_sleep_holds_no_worker_and_wakes_when_the_clock_passes(sink):
    clock = Clock()
    result = wf.sleeper.enqueue("s", 7 * 24 * 3600)
    burst(clock=clock)
    job = Job.objects.get(pk=result.id)
    wake = clock() + timedelta(days=7)
    assert job.state == JobState.READY and job.lease_token is None
    assert abs((job.run_after - wake).total_seconds()) < 5
    workflow = Workflow.objects.get(pk=job.pk)
    assert workflow.state == WorkflowState.SLEEPING and workflow.wake_at == job.run_after
    # Meanwhile the same worker runs other jobs, and the sleeping one is not taken early.
    other = wf.three_steps.enqueue("other")
    burst(clock=clock)
    assert Job.objects.get(pk=other.id).state == JobState.DONE
    assert Job.objects.get(pk=job.pk).state == JobState.READY
    clock.advance(days=7, seconds=1)
    burst(clock=clock)
    job.refresh_from_db()
    assert job.state == JobState.DONE and job.return_value == "S-AFTER"
    assert len([line for line in sink() if line.startswith("remote s ")]) == 1
    assert steps(job.pk)["sleep-1"].state == "done"


def test_wait_for_resumes_on_the_signal_with_its_payload(sink):
    result = wf.waiter.enqueue("w", 3600)
    burst()
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.READY and job.run_after > timezone.now() + timedelta(minutes=59)
    assert Workflow.objects.get(pk=job.pk).waiting_for == "go"
    assert signal(job.pk, "go", {"ok": 1}) is True
    assert signal(job.pk, "go", {"ok": 2}) is False  # one event per name
    job.refresh_from_db()
    assert job.run_after <= timezone.now()  # woken at once
    burst()
    job.refresh_from_db()
    assert job.state == JobState.DONE and job.return_value == {"got": {"ok": 1}}


def test_a_signal_sent_before_the_workflow_starts_is_there_when_it_waits(sink):
    result = wf.waiter.enqueue("w2", 3600)
    assert signal(result.id, "go", [1, 2]) is True  # enqueued, not yet run
    assert signal(result.id, "go", [3]) is False
    burst()
    assert Job.objects.get(pk=result.id).return_value == {"got": [1, 2]}
    assert Workflow.objects.get(pk=result.id).state == WorkflowState.DONE


def test_a_signal_to_a_finished_job_that_never_was_a_workflow_is_refused(sink):
    result = tasks.noop.enqueue(1)
    burst()
    with pytest.raises(LookupError):
        signal(result.id, "go")
    assert not Workflow.objects.exists()


def test_wait_for_times_out_on_the_injected_clock(sink):
    clock = Clock()
    result = wf.waiter.enqueue("t", 600)
    burst(clock=clock)
    clock.advance(seconds=601)
    burst(clock=clock)
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DONE and job.return_value == {"got": None}
    assert steps(job.pk)["wait:go"].result == {"timed_out": True}


@pytest.mark.parametrize(
    "bad",
    [
        ("nope", "go", {}),
        (10**30, "go", {}),
        (1, "", {}),
        (1, "go", {"x": float("nan")}),
        (1, "go", {"x": "\x00"}),
    ],
)
def test_signal_refuses_what_it_cannot_deliver(bad):
    Workflow.objects.create(
        pk=1, task_path="x", started_at=timezone.now(), updated_at=timezone.now()
    )
    workflow_id, name, payload = bad
    with pytest.raises((LookupError, ValueError, WorkflowError)):
        signal(workflow_id, name, payload)
    assert not Workflow.objects.get(pk=1).signals.exists()


def test_signal_to_an_unknown_workflow_is_a_lookup_error():
    with pytest.raises(LookupError):
        signal(424242, "go")


def test_steps_outside_a_worker_and_reused_names_are_refused(sink):
    with pytest.raises(WorkflowError, match="inside a task run by a Redrive worker"):
        step("a", wf.remote_effect, "k")
    with pytest.raises(WorkflowError):
        sleep(1)
    result = wf.twice.enqueue("k")
    burst()
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DEAD
    assert "used twice" in DeadLetter.objects.get(job=job).last_error


def test_a_batch_checkpoints_buries_bad_items_alone_and_reports_completion(sink):
    result = wf.importer.enqueue(3000, chunk=250)
    burst()
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DONE
    assert job.return_value["done"] == 2998 and job.return_value["failed"] == 2
    assert Execution.objects.filter(job_type="tests.item").count() == 2998
    letters = DeadLetter.objects.filter(task_path="tests.workflow_tasks.item")
    assert sorted(letter.args[0]["n"] for letter in letters) == [700, 2129]
    assert set(job.return_value["letters"]) == {letter.pk for letter in letters}
    record = steps(job.pk)["import"]
    assert record.state == "done" and record.result["next"] == 3000
    assert "batch_done import done_with_failures 2998 2" in sink()
    # One bad item, mended, replays alone as a job of the item task.
    wf.BROKEN["items"] = False
    one = letters.order_by("pk").first()
    replay = store.replay([one.pk]).done[one.pk]
    burst()
    replay.refresh_from_db()
    assert replay.state == JobState.DONE and replay.task_path == "tests.workflow_tasks.item"
    assert Execution.objects.filter(job_type="tests.item").count() == 2999


def test_a_batch_refuses_items_that_changed_since_it_started(sink):
    result = wf.importer.enqueue(300, chunk=100)
    job = Job.objects.get(pk=result.id)
    workflow = Workflow.objects.create(
        pk=job.pk,
        task_path=job.task_path,
        job=job,
        started_at=timezone.now(),
        updated_at=timezone.now(),
    )
    WorkflowStep.objects.create(
        workflow=workflow,
        name="import",
        kind="batch",
        state="pending",
        started_at=timezone.now(),
        result={
            "total": 300,
            "next": 100,
            "done": 100,
            "failed": 0,
            "digest": "other",
            "dead_letters": [],
        },
    )
    burst()
    job.refresh_from_db()
    assert job.state == JobState.DEAD
    assert "differ from the run that started it" in DeadLetter.objects.get(job=job).last_error


def test_the_sink_helper_reads_what_was_written(sink, tmp_path):
    Path(tmp_path / "sink.log").write_text("a\n")
    assert sink() == ["a"]


def test_prune_drops_old_finished_workflows_with_their_steps_and_keeps_the_rest():
    now = timezone.now()
    old = now - timedelta(days=30)
    for pk, state, at in [(1, "done", old), (2, "dead", old), (3, "done", now)]:
        workflow = Workflow.objects.create(
            pk=pk, task_path="t", state=state, started_at=at, updated_at=at
        )
        WorkflowStep.objects.create(
            workflow=workflow, name="a", kind="call", state="done", started_at=at
        )
    assert store.workflows.prune_finished(older_than=timedelta(days=7), now=now) == 1
    assert sorted(Workflow.objects.values_list("pk", flat=True)) == [2, 3]
    assert sorted(WorkflowStep.objects.values_list("workflow_id", flat=True)) == [2, 3]


def test_a_batch_of_items_no_database_can_store_is_refused_before_any_runs(sink):
    result = wf.unstorable_batch.enqueue()
    burst()
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DEAD
    assert "batch items" in DeadLetter.objects.get(job=job).last_error
    assert not Execution.objects.filter(job_type="tests.item").exists()


def test_recording_progress_renews_the_lease_and_refuses_a_lost_one():
    from jobqueue.errors import LeaseExpired
    from tests.factories import JobFactory

    now = timezone.now()
    job = JobFactory(running=True, locked_until=now + timedelta(seconds=1))
    store.workflows.hold(job, now=now, using="default", lease_seconds=60)
    job.refresh_from_db()
    assert job.locked_until == now + timedelta(seconds=60)
    store.workflows.hold(job, now=now, using="default", lease_seconds=5)  # never shortened
    job.refresh_from_db()
    assert job.locked_until == now + timedelta(seconds=60)
    with pytest.raises(LeaseExpired):
        store.workflows.hold(
            job, now=now + timedelta(seconds=61), using="default", lease_seconds=60
        )
    job.lease_token = "someone-else"
    with pytest.raises(LeaseExpired):
        store.workflows.hold(job, now=now, using="default", lease_seconds=60)


def test_prune_drops_what_a_signal_began_for_a_job_that_never_was_a_workflow(sink):
    result = tasks.noop.enqueue(1)
    assert signal(result.id, "go") is True  # taken for a workflow not yet begun
    burst()  # a plain task: it never calls a step
    later = timezone.now() + timedelta(days=30)
    assert store.workflows.prune_finished(older_than=timedelta(days=7), now=later) == 1
    assert not Workflow.objects.exists()
