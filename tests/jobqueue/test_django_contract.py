"""Django's own tests for task backends (tests/tasks/ in Django: test_tasks.py,
test_immediate_backend.py, test_dummy_backend.py), adapted to a database backend and run against
ours: enqueue, get_result and refresh, signals and Django's log lines, validation errors,
priorities, run_after and result attributes. A worker runs in-process where a task must run.

Left out, as not applying to a queue in a database: immediate execution inside enqueue, results
kept in memory, KeyboardInterrupt propagating out of enqueue, `enqueue_on_commit` (a job row is
already part of the caller's transaction)."""

import dataclasses
import logging
import sys
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.tasks import TaskResultStatus, task_backends
from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

from jobqueue import store
from jobqueue.errors import InvalidArguments, LeaseExpired
from jobqueue.models import DeadLetter, Job, JobState
from jobqueue.worker import Worker
from tests.jobqueue import contract_tasks as t

pytestmark = pytest.mark.django_db


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def at(self, level):
        return [r for r in self.records if r.levelno == level]


@pytest.fixture
def tasks_log():
    """What Django's `django.tasks` logger writes, at the level the settings give it (WARNING)."""
    logger = logging.getLogger("django.tasks")
    handler = Records()
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture
def run_worker(monkeypatch, transactional_db):
    """Run an in-process worker until the queue is empty (its handler threads have their own
    connections: the test's data must be committed). A database error while it works stops it
    at once, and fails the test, instead of backing off and retrying forever."""
    troubles = []

    def trouble(self, exc):
        troubles.append(exc)
        self.stop()

    monkeypatch.setattr(Worker, "_database_trouble", trouble)

    def run(**kw):
        kw.setdefault("poll_interval", 0.05)
        kw.setdefault("concurrency", 1)
        code = Worker(burst=True, **kw).run()
        assert troubles == []
        return code

    return run


@pytest.fixture
def signals():
    seen = []

    def receiver(signal):
        def receive(sender, task_result, **kwargs):
            seen.append((signal, task_result.id, task_result.status, sys.exc_info()[1]))

        return receive

    receivers = {
        task_enqueued: receiver("enqueued"),
        task_started: receiver("started"),
        task_finished: receiver("finished"),
    }
    for signal, receive in receivers.items():
        signal.connect(receive)
    yield seen
    for signal, receive in receivers.items():
        signal.disconnect(receive)


# --- enqueue and results ----------------------------------------------------------------------


@pytest.mark.parametrize("task", [t.noop_task, t.noop_task_async])
def test_enqueue_task(task):
    result = task.enqueue(1, two=3)
    assert result.status == TaskResultStatus.READY and result.is_finished is False
    assert result.task == task
    assert (result.args, result.kwargs) == ([1], {"two": 3})
    assert result.enqueued_at is not None
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None,) * 3
    assert result.attempts == 0 and result.errors == [] and result.worker_ids == []
    assert result.backend == "default"
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value


def test_aenqueue_task():
    result = async_to_sync(t.noop_task.aenqueue)()
    assert result.status == TaskResultStatus.READY and result.task == t.noop_task
    assert Job.objects.filter(pk=result.id).exists()


@pytest.mark.parametrize("enqueue", ["sync", "async", "bulk"])
def test_enqueue_with_invalid_argument_raises_type_error(enqueue):
    # Django's backends raise TypeError("Unsupported type ...") from normalize_json.
    calls = {
        "sync": lambda: t.noop_task.enqueue(datetime.now()),
        "async": lambda: async_to_sync(t.noop_task.aenqueue)(datetime.now()),
        "bulk": lambda: task_backends["default"].enqueue_many(
            t.noop_task, [((1,), {}), ((datetime.now(),), {})]
        ),
    }
    with pytest.raises(TypeError, match="Unsupported type") as caught:
        calls[enqueue]()
    assert isinstance(caught.value, InvalidTask)  # what callers of this backend caught before
    assert isinstance(caught.value, InvalidArguments)
    assert not Job.objects.exists()


def test_get_result_is_the_enqueued_result():
    result = t.noop_task.enqueue()
    assert t.noop_task.get_result(result.id) == result
    assert async_to_sync(t.noop_task.aget_result)(result.id) == result


def test_get_missing_result():
    with pytest.raises(TaskResultDoesNotExist):
        t.noop_task.get_result("123")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(t.noop_task.aget_result)("123")


def test_get_incorrect_result():
    result = t.noop_task_async.enqueue()
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        t.noop_task.get_result(result.id)


def test_refresh_result_of_an_unchanged_job_changes_nothing():
    result = t.noop_task.enqueue()
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before
    async_to_sync(result.arefresh)()
    assert dataclasses.asdict(result) == before


def test_result_after_a_run(run_worker):
    result = t.calculate_meaning_of_life.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished is True
    assert result.return_value == 42
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at
    assert result.last_attempted_at is not None
    assert result.attempts == 1 and len(result.worker_ids) == 1 and result.errors == []
    assert result.task == t.calculate_meaning_of_life


def test_takes_context(run_worker):
    result = t.get_task_id.enqueue()
    other = t.check_context.enqueue(1)
    run_worker()
    result.refresh()
    other.refresh()
    assert result.return_value == result.id
    assert other.status == TaskResultStatus.SUCCESSFUL


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task, exception, message",
    [
        (t.failing_task_value_error, ValueError, "This task failed due to ValueError"),
        (t.failing_task_system_exit, SystemExit, "This task failed due to SystemExit"),
    ],
)
def test_catches_exception(run_worker, tasks_log, task, exception, message):
    result = task.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished is True
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert result.finished_at >= result.started_at >= result.enqueued_at
    assert result.errors[0].exception_class is exception
    assert result.errors[0].traceback.endswith(f"{exception.__name__}: {message}\n")
    # Django's log receiver wrote its ERROR line with the task's traceback, although the
    # settings set django.tasks to WARNING.
    [line] = tasks_log.at(logging.ERROR)
    assert {f"id={result.id}", "state=FAILED"} <= set(line.getMessage().split())
    assert line.exc_info[0] is exception and str(line.exc_info[1]) == message


def test_complex_exception(run_worker, tasks_log):
    result = t.complex_exception.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result._return_value is None
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback
    assert len(tasks_log.at(logging.ERROR)) == 1


@pytest.mark.parametrize(
    "task, exception, text",
    [
        (t.complex_return_value, TypeError, "Unsupported type"),
        (t.returns_nan, ValueError, "not JSON compliant"),
    ],
)
def test_a_return_value_that_is_not_json_fails_with_the_error_converting_it(
    run_worker, tasks_log, task, exception, text
):
    result = task.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result._return_value is None
    assert result.errors[0].exception_class is exception
    assert text in result.errors[0].traceback
    assert len(tasks_log.at(logging.ERROR)) == 1
    # Not retried, though the task allows three attempts: it ran, and would only repeat its
    # effect to return the same value.
    assert DeadLetter.objects.get().attempts == 1


def test_task_finished_is_sent_inside_the_failures_handling(run_worker, signals):
    failed = t.failing_task_value_error.enqueue()
    done = t.noop_task.enqueue()
    run_worker()
    finished = {id_: (status, exc) for name, id_, status, exc in signals if name == "finished"}
    status, exc = finished[failed.id]
    assert status == TaskResultStatus.FAILED
    assert isinstance(exc, ValueError) and str(exc) == "This task failed due to ValueError"
    assert finished[done.id] == (TaskResultStatus.SUCCESSFUL, None)


def test_task_finished_for_a_job_whose_worker_died_on_its_last_attempt(run_worker, signals):
    long_ago = timezone.now() - timedelta(hours=1)
    result = t.noop_task.using(run_after=long_ago).enqueue()
    claimed = store.claim(worker_id="gone", queues=None, limit=1, lease_seconds=1, now=long_ago)
    assert [job.pk for job in claimed] == [int(result.id)]
    run_worker()  # its first claim sweeps the expired lease: the last attempt, so dead
    [(status, exc)] = [(s, e) for name, id_, s, e in signals if name == "finished"]
    assert status == TaskResultStatus.FAILED and isinstance(exc, LeaseExpired)
    assert "lease held by gone expired" in str(exc)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED


def test_signals_in_order(run_worker, signals):
    result = t.noop_task.enqueue()
    run_worker()
    assert [(name, status) for name, id_, status, _ in signals if id_ == result.id] == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]


def test_enqueue_and_run_logs_at_debug(run_worker, tasks_log):
    logger = logging.getLogger("django.tasks")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        ok = t.noop_task.enqueue()
        bad = t.failing_task_value_error.enqueue()
        run_worker()
    finally:
        logger.setLevel(level)
    lines = [(r.levelno, r.getMessage()) for r in tasks_log.records]
    for result, final, level in [(ok, "SUCCESSFUL", logging.INFO), (bad, "FAILED", logging.ERROR)]:
        mine = [(lv, text) for lv, text in lines if f"id={result.id} " in text]
        assert [text.split()[-1] for _, text in mine] == [
            f"backend={result.backend}",
            "state=RUNNING",
            f"state={final}",
        ]
        assert mine[-1][0] == level
        assert "NoneType" not in " ".join(text for _, text in mine)


# --- validation -------------------------------------------------------------------------------


def test_naive_datetime():
    with pytest.raises(InvalidTask, match=r"run_after must be an aware datetime\."):
        t.noop_task.using(run_after=datetime.now())


@pytest.mark.parametrize("priority", [TASK_MIN_PRIORITY - 1, TASK_MAX_PRIORITY + 1, 3.1])
def test_invalid_priority(priority):
    with pytest.raises(InvalidTask, match="priority must be a whole number between"):
        t.noop_task.using(priority=priority)


def test_priority_bounds_are_accepted():
    for priority in (TASK_MIN_PRIORITY, 0, TASK_MAX_PRIORITY):
        assert t.noop_task.using(priority=priority).enqueue().task.priority == priority


def test_validate_on_enqueue_against_configured_queues(settings):
    unknown = t.noop_task.using(queue_name="unknown_queue")
    settings.TASKS = {
        "default": {"BACKEND": "jobqueue.backend.DatabaseBackend", "QUEUES": ["queue-1"]}
    }
    with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
        unknown.enqueue()
    with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
        async_to_sync(unknown.aenqueue)()
    assert not Job.objects.exists()


def test_using_keeps_the_original_and_chains():
    now = timezone.now()
    moved = t.noop_task.using(run_after=now).using(priority=10)
    assert (moved.run_after, moved.priority) == (now, 10)
    assert (t.noop_task.run_after, t.noop_task.priority) == (None, 0)


# --- priority and run_after -------------------------------------------------------------------


def test_higher_priority_starts_first_within_one_claimed_batch(run_worker, signals):
    priorities = [0, 5, -3, 10]
    ids = {t.noop_task.using(priority=p).enqueue().id: p for p in priorities}
    run_worker(concurrency=1)
    assert Job.objects.filter(state=JobState.DONE).count() == 4
    started = [ids[id_] for name, id_, _, _ in signals if name == "started"]
    assert started == [10, 5, 0, -3]


def test_claim_returns_its_batch_in_start_order():
    now = timezone.now()
    made = []
    for priority, late in [(0, 0), (5, 0), (-3, 0), (10, 0), (5, 10), (5, 5)]:
        job, _ = store.enqueue(
            store.NewJob(
                task_path=t.noop_task.module_path,
                priority=priority,
                run_after=now - timedelta(seconds=60 - late),
            ),
            now=now,
        )
        made.append(job)
    batch = store.claim(worker_id="w", queues=None, limit=10, lease_seconds=30, now=now)
    by_id = {job.pk: i for i, job in enumerate(made)}
    assert [by_id[job.pk] for job in batch] == [3, 1, 5, 4, 0, 2]


def test_claim_sql_orders_what_it_returns():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite cannot order RETURNING rows; its claim sorts the batch it read")
    from jobqueue.store import postgresql

    tail = postgresql.CLAIM.strip().splitlines()[-1]
    assert tail == "SELECT {columns} FROM claimed ORDER BY priority DESC, run_after, id"


def test_run_after_in_the_past_is_kept_on_the_result_and_runs_at_once(run_worker):
    two_hours_ago = timezone.now() - timedelta(hours=2)
    task = t.calculate_meaning_of_life.using(run_after=two_hours_ago)
    result = task.enqueue()
    assert result.task is task and result.task.run_after == two_hours_ago
    assert t.calculate_meaning_of_life.get_result(result.id).task.run_after == two_hours_ago
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_run_after_in_the_future_waits(run_worker):
    later = timezone.now() + timedelta(hours=1)
    result = t.noop_task.using(run_after=later).enqueue()
    assert result.task.run_after == later
    assert t.noop_task.get_result(result.id).task.run_after == later
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.READY


def test_bulk_enqueue_results_carry_the_task_as_enqueued():
    past = timezone.now() - timedelta(minutes=5)
    task = t.noop_task.using(run_after=past, priority=3)
    results = task_backends["default"].enqueue_many(task, [((1,), {}), ((2,), {})])
    assert [r.task for r in results] == [task, task]
