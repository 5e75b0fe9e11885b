"""The django.tasks front door: @task, enqueue in the caller's transaction, get_result, signals."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from jobqueue import store
from jobqueue.backend import Task
from jobqueue.errors import InvalidArguments
from jobqueue.models import Job, JobState
from tests import tasks

pytestmark = pytest.mark.django_db


def test_task_decorator_builds_our_task_class_with_its_policy():
    assert isinstance(tasks.effect, Task)
    assert tasks.effect.max_attempts == 3
    assert tasks.always_fails.backoff_base == 30.0
    assert tasks.noop.attempt_budget == 5  # REDRIVE["MAX_ATTEMPTS"]


def test_enqueue_writes_a_ready_job_with_options():
    later = timezone.now() + timedelta(hours=1)
    result = tasks.add.using(queue_name="math", priority=7, run_after=later).enqueue(2, b=3)
    job = Job.objects.get(pk=result.id)
    assert (job.task_path, job.args, job.kwargs) == ("tests.tasks.add", [2], {"b": 3})
    assert (job.queue_name, job.priority, job.run_after) == ("math", 7, later)
    assert job.state == JobState.READY and job.max_attempts == 5
    assert result.status == TaskResultStatus.READY and result.attempts == 0


def test_enqueue_rolls_back_with_the_business_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.noop.enqueue(1)
        raise RuntimeError("payment failed")
    assert not Job.objects.exists()


def test_same_idempotency_key_yields_one_job_and_the_same_handle():
    first = tasks.effect.using(idempotency_key="receipt:9").enqueue("receipt:9")
    again = tasks.effect.using(idempotency_key="receipt:9").enqueue("receipt:9")
    assert first.id == again.id
    assert Job.objects.count() == 1


def test_enqueued_signal_is_sent_once_per_new_job():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        a = tasks.noop.using(idempotency_key="once").enqueue()
        tasks.noop.using(idempotency_key="once").enqueue()
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [a.id]


def test_non_json_arguments_are_refused_with_a_clear_error():
    with pytest.raises(InvalidTask, match="JSON"):
        tasks.noop.enqueue(object())
    assert not Job.objects.exists()


def test_get_result_reflects_the_row():
    result = tasks.add.enqueue(1, 2)
    Job.objects.filter(pk=result.id).update(
        state=JobState.DONE,
        return_value=3,
        attempts=1,
        worker_ids=["w"],
        finished_at=timezone.now(),
    )
    fresh = tasks.add.get_result(result.id)
    assert fresh.status == TaskResultStatus.SUCCESSFUL and fresh.return_value == 3
    assert fresh.attempts == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_get_result_of_unknown_id_raises():
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("12345")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("not-a-number")


def test_bulk_enqueue_inserts_many_in_one_call():
    backend = task_backends["default"]
    results = backend.enqueue_many(tasks.add, [((n, n), {}) for n in range(50)])
    assert len(results) == 50 == Job.objects.count()
    assert Job.objects.get(pk=results[7].id).args == [7, 7]


def test_bulk_enqueue_deduplicates_keys():
    backend = task_backends["default"]
    keyed = tasks.noop.using(idempotency_key="bulk")
    results = backend.enqueue_many(keyed, [((1,), {}), ((2,), {})])
    assert results[0].id == results[1].id and Job.objects.count() == 1


def test_invalid_policy_is_rejected_at_definition():
    with pytest.raises(InvalidTask):
        Task(func=tasks.noop.func, max_attempts=0)


def test_bulk_results_are_built_on_read_and_equal_what_get_result_reads_back():
    backend = task_backends["default"]
    results = backend.enqueue_many(tasks.add, [((n,), {"b": n}) for n in range(5)])
    assert results._built == [None] * 5  # nothing built until read
    read_back = [backend.get_result(job.pk) for job, _ in results.outcomes]
    assert [(r.id, r.args, r.kwargs, r.status) for r in results] == [
        (r.id, r.args, r.kwargs, r.status) for r in read_back
    ]
    assert results[-1] is results[4] and results[1:3] == [results[1], results[2]]
    assert results == list(results) and results != list(results)[:4]
    with pytest.raises(IndexError):
        results[5]


def test_bulk_results_are_built_at_once_for_an_enqueued_signal_receiver():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        results = task_backends["default"].enqueue_many(tasks.noop, [((1,), {}), ((2,), {})])
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [r.id for r in results]


def test_a_cancelled_job_reads_back_as_failed():
    result = tasks.noop.enqueue(1)
    store.job_actions.cancel([int(result.id)], actor="ana", reason="not needed")
    read = task_backends["default"].get_result(result.id)
    assert read.status == TaskResultStatus.FAILED and read.is_finished
    with pytest.raises(ValueError, match="failed"):
        _ = read.return_value


def test_arguments_nested_past_recursion_or_circular_are_refused_and_nothing_is_written():
    circular = []
    circular.append(circular)
    deep = []
    for _ in range(100_000):
        deep = [deep]
    for value in (circular, deep):
        with pytest.raises(InvalidArguments, match="JSON"):
            tasks.noop.enqueue(value)
        with pytest.raises(InvalidArguments, match="JSON"):
            task_backends["default"].enqueue_many(tasks.noop, [((1,), {}), ((value,), {})])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "options",
    [
        # A key that is not text would become one nobody meant (str(b"k") is "b'k'").
        {"idempotency_key": b"k"},
        {"idempotency_key": False},
        {"unique_key": object()},
        {"ordering_key": 1.5},
        {"concurrency_key": ["tenant"]},
        # Blank, or not text a database stores.
        {"idempotency_key": ""},
        {"idempotency_key": "  "},
        {"queue_name": ""},
        {"queue_name": " "},
        {"queue_name": "\ud800"},
        {"idempotency_key": "k\ud800"},
        {"ordering_key": "\udcff"},
        {"concurrency_key": "a\x00b"},
        # Malformed options Django's own checks meet with a TypeError or an AttributeError.
        {"unique_key": "u", "unique_while": 5},
        {"unique_key": "u", "unique_while": [["ready"]]},
        {"unique_key": "u", "unique_while": {"ready": 1}},
        {"priority": "5"},
        {"priority": True},
        {"run_after": timedelta(minutes=5)},
        {"run_after": 1700000000},
        {"run_after": "2026-12-01T00:00:00Z"},
    ],
)
def test_careless_task_options_are_refused_with_invalid_task(options):
    with pytest.raises(InvalidTask):
        tasks.noop.using(**options).enqueue(1)
    assert not Job.objects.exists()


def test_a_run_after_past_what_a_database_stores_is_refused():
    from datetime import datetime
    from datetime import timezone as tz

    far = datetime.max.replace(tzinfo=tz(timedelta(hours=-23)))
    with pytest.raises(InvalidTask, match="out of the range"):
        tasks.noop.using(run_after=far).enqueue(1)
    assert not Job.objects.exists()


def test_integer_and_uuid_keys_are_their_text():
    import uuid

    request = uuid.UUID("12345678-1234-5678-1234-567812345678")
    result = tasks.noop.using(ordering_key=42, concurrency_key=7, idempotency_key=request).enqueue()
    job = Job.objects.get(pk=result.id)
    assert (job.ordering_key, job.concurrency_key) == ("42", "7")
    assert job.idempotency_key == "12345678-1234-5678-1234-567812345678"


@pytest.mark.parametrize(
    "calls",
    [
        [((1,), {}), ("7", {})],  # a string's characters are not arguments
        [((1,), {}), ({"a": 1}, {})],  # nor a dict's keys
        [((1,), {}), ((1,), [("a", 1)])],
        [((1,), {}), ((), {}, 1)],
        [((1,), {}), ((),)],
        [((1,), {}), None],
        [((1,), {}), "ab"],
    ],
)
def test_bulk_enqueue_refuses_a_malformed_call_and_writes_nothing(calls):
    backend = task_backends["default"]
    with pytest.raises(InvalidArguments):
        backend.enqueue_many(tasks.noop, calls)
    assert not Job.objects.exists()


@pytest.mark.parametrize("result_id", ["1_0", " 1 ", "\uff11", 1.5, b"1", True, "-1", 0, 2**64, ""])
def test_get_result_takes_only_a_job_id(result_id):
    for i in range(12):
        tasks.noop.enqueue(i)
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)
