"""jobqueue.testing and the `redrive` fixture: what a project's own tests use to see what was
enqueued and to run it in-process, inside the test's transaction, on both databases."""

import importlib
from datetime import timedelta

import pytest
from django.db import connection
from django.tasks import task
from django.test import TestCase, override_settings

from jobqueue import testing
from jobqueue.models import DeadLetter, Job, JobState
from tests import workflow_tasks
from tests.jobqueue import redrive_options_tasks
from tests.tasks import add, always_fails

# Attempts each key has made (in this process: run_jobs runs tasks here).
ATTEMPTS: dict[str, int] = {}


@task(max_attempts=4, backoff_base=60.0, backoff_cap=600.0)
def flaky(key: str, failures: int):
    ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    if ATTEMPTS[key] <= failures:
        raise ConnectionError(f"attempt {ATTEMPTS[key]} of {key} failed")
    return ATTEMPTS[key]


@task
def forever(n: int):
    forever.enqueue(n + 1)


@task
def fan_out(n: int):
    for i in range(n):
        add.using(queue_name="sums").enqueue(i, i)


pytestmark = pytest.mark.django_db


def test_retries_run_at_once_as_the_clock_jumps_past_each_backoff():
    clock = testing.Clock()
    started = clock.now
    result = flaky.enqueue("a", failures=2)
    run = testing.run_jobs(clock=clock)
    job = testing.outcome(result)
    assert (job.state, job.return_value, ATTEMPTS["a"]) == (JobState.DONE, 3, 3)
    assert run.ran == [int(result.id)] * 3 and run.succeeded == 1 and run.dead == 0
    # Two backoffs of at least a minute each passed on the clock, none on the wall.
    assert clock.now - started >= timedelta(seconds=60)
    assert [e["exception_class_path"] for e in job.errors] == ["builtins.ConnectionError"] * 2


def test_a_job_out_of_attempts_leaves_its_dead_letter():
    result = always_fails.enqueue("down")
    run = testing.run_jobs()
    outcome = testing.outcome(result)
    assert run.dead == 1 and outcome.state == JobState.DEAD
    assert outcome.dead_letter is not None
    assert outcome.dead_letter == DeadLetter.objects.get(job_id=int(result.id))
    assert "down" in outcome.dead_letter.last_error


def test_without_advance_only_what_is_due_now_runs():
    result = flaky.enqueue("b", failures=1)
    run = testing.run_jobs(advance=False)
    assert run.ran == [int(result.id)]
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.READY and job.attempts == 1 and job.run_after > run.now


def test_until_bounds_how_far_the_clock_moves():
    result = flaky.enqueue("c", failures=1)
    run = testing.run_jobs(until=timedelta(seconds=1))
    assert run.ran == [int(result.id)] and Job.objects.get(pk=result.id).state == JobState.READY


def test_jobs_a_job_enqueues_run_too_and_a_queue_can_be_chosen():
    fan_out.enqueue(3)
    first = testing.run_jobs(queues=["default"])
    assert len(first.ran) == 1
    testing.assert_enqueued(add, count=3, queue="sums")
    testing.assert_enqueued(add, args=[2, 2])
    second = testing.run_jobs(queues=["sums"])
    assert sorted(o.return_value for o in second.outcomes()) == [0, 2, 4]
    testing.refute_enqueued(add)


def test_a_task_that_enqueues_itself_forever_fails_the_run_instead_of_hanging_it():
    forever.enqueue(0)
    with pytest.raises(AssertionError, match="more than 5 jobs ran"):
        testing.run_jobs(limit=5)


def test_assertions_compare_arguments_queue_and_keys_and_say_what_was_there():
    add.using(queue_name="sums", priority=5).enqueue(1, 2)
    flaky.using(idempotency_key="pay:9").enqueue("k", failures=0)
    (found,) = testing.assert_enqueued(add, args=[1, 2], queue="sums", priority=5)
    assert (found.task, found.kwargs) == ("tests.tasks.add", {})
    testing.assert_enqueued(flaky, idempotency_key="pay:9", kwargs={"failures": 0})
    with pytest.raises(AssertionError) as refused:
        testing.assert_enqueued(add, args=[3, 4])
    assert "found 0" in str(refused.value)
    assert "tests.tasks.add(args=[1, 2], kwargs={}, queue='sums')" in str(refused.value)
    with pytest.raises(AssertionError, match="found 1"):
        testing.assert_enqueued("tests.tasks.add", count=2)
    with pytest.raises(AssertionError, match=r"expected no tests\.tasks\.add"):
        testing.refute_enqueued(add, queue="sums")
    with pytest.raises(TypeError, match="no such field of an enqueued job: colour"):
        testing.enqueued(add, colour="red")


def test_a_workflows_sleep_passes_on_the_clock_and_its_steps_are_there(monkeypatch, tmp_path):
    monkeypatch.setenv("REDRIVE_TEST_SINK", str(tmp_path / "sink"))
    result = workflow_tasks.sleeper.enqueue("w", 3600)
    run = testing.run_jobs()
    outcome = testing.outcome(result)
    assert outcome.state == JobState.DONE and len(run.ran) >= 2
    assert run.now - Job.objects.get(pk=result.id).enqueued_at >= timedelta(hours=1)
    assert [s.kind for s in outcome.steps] == [s.kind for s in outcome.steps if s.state == "done"]
    assert outcome.steps and all(s.state == "done" for s in outcome.steps)


def test_the_fixture_shares_one_clock_across_runs(redrive):
    flaky.enqueue("f", failures=1)
    first = redrive.run(advance=False)
    redrive.clock.advance(timedelta(hours=1))
    second = redrive.run(advance=False)
    assert first.ran == second.ran and redrive.outcome(second.ran[0]).state == JobState.DONE
    redrive.refute_enqueued(flaky)


class RunsInsideATestCase(TestCase):
    """A TestCase holds one transaction for the test: the jobs it enqueues are seen only by
    its own connection, which is where run_jobs claims and runs them (on SQLite a worker's
    threads would wait on the test's write lock)."""

    def test_enqueue_then_run(self):
        result = flaky.enqueue("tc", failures=1)
        run = testing.run_jobs()
        self.assertEqual(run.succeeded, 1)
        self.assertEqual(testing.outcome(result).return_value, 2)
        self.assertTrue(connection.in_atomic_block)


@pytest.mark.parametrize(
    ("backend", "runs"),
    [("jobqueue.testing.ImmediateBackend", True), ("jobqueue.testing.DummyBackend", False)],
)
def test_tasks_with_redrives_options_load_and_run_under_the_test_backends(backend, runs):
    """Django's own backends refuse the options at import (`@task(max_attempts=3)` is a
    TypeError there); Redrive's test backends take them and behave as Django's."""
    from django.tasks import task_backends

    with override_settings(TASKS={"default": {"BACKEND": backend}}):
        # Imported under this backend: a project's tasks module loading with its test settings
        # (a queue of its own included: Django's backends know only "default" unless told).
        module = importlib.reload(redrive_options_tasks)
        result = module.doubled.using(idempotency_key="once").enqueue(21)
        assert result.status == ("SUCCESSFUL" if runs else "READY")
        if runs:
            assert result.return_value == 42
        else:
            assert task_backends["default"].results[0].args == [21]
        charged = module.charge.enqueue(250)
        assert charged.task.queue_name == "payments"
        assert charged.status == ("SUCCESSFUL" if runs else "READY")
        assert not Job.objects.exists()


@pytest.mark.parametrize("backend", ["ImmediateBackend", "DummyBackend"])
def test_the_test_backends_pass_the_system_checks(backend):
    """Test settings naming one of them are Redrive's (no redrive.E001): `manage.py test`
    runs the checks first and stops on an error."""
    from django.core.management import call_command

    from jobqueue import checks

    with override_settings(TASKS={"default": {"BACKEND": f"jobqueue.testing.{backend}"}}):
        assert checks.check_tasks_backend() == []
        call_command("check", fail_level="ERROR")


@pytest.mark.parametrize("backend", ["ImmediateBackend", "DummyBackend"])
def test_the_test_backends_refuse_redrives_options_as_the_queue_does(backend):
    """A bad option fails the test settings' import as it fails production's."""
    from django.tasks.exceptions import InvalidTask

    with override_settings(TASKS={"default": {"BACKEND": f"jobqueue.testing.{backend}"}}):
        with pytest.raises(InvalidTask, match="max_attempts"):
            task(max_attempts=0)(redrive_options_tasks.doubled.func)
        with pytest.raises(InvalidTask, match="ordering_on_dead"):
            redrive_options_tasks.doubled.using(ordering_key="k", ordering_on_dead="later")


def test_queues_named_in_settings_still_bound_the_test_backends():
    from django.tasks.exceptions import InvalidTask

    only = {"BACKEND": "jobqueue.testing.DummyBackend", "QUEUES": ["default"]}
    with override_settings(TASKS={"default": only}), pytest.raises(InvalidTask, match="payments"):
        importlib.reload(redrive_options_tasks)


def test_djangos_own_immediate_backend_refuses_redrives_options():
    django_immediate = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    with override_settings(TASKS=django_immediate), pytest.raises(TypeError, match="max_attempts"):
        task(max_attempts=3)(lambda: None)
