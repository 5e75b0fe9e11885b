"""Bulk enqueue in batches: a call larger than one batch (the dialect's SEND_CHUNK) is one
transaction whose batches are built while the previous one is written (PostgreSQL: pipeline
mode). Whatever goes wrong part-way, in the caller's arguments or in the database, leaves
nothing written and the connection usable."""

from itertools import count

import pytest
from django.db import DatabaseError, connection, transaction
from django.tasks import task_backends

from jobqueue import store
from jobqueue.errors import InvalidArguments
from jobqueue.models import Job
from jobqueue.store import dialects
from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def chunk():
    return dialects.of("default").SEND_CHUNK


def test_a_call_of_several_batches_writes_every_job_in_call_order():
    n = 4 * chunk() + 7
    results = task_backends["default"].enqueue_many(tasks.add, [((i,), {"b": i}) for i in range(n)])
    ids = [int(result.id) for result in results]
    assert len(ids) == n and ids == sorted(ids) and len(set(ids)) == n
    rows = dict(Job.objects.values_list("id", "args"))
    assert [rows[job_id] for job_id in ids] == [[i] for i in range(n)]
    assert results[n - 1].kwargs == {"b": n - 1}


def test_arguments_refused_in_a_later_batch_write_nothing_not_even_the_batches_sent():
    n = 3 * chunk()
    calls = [((i,), {}) for i in range(n)]
    calls[n - 5] = ((object(),), {})  # built only after two batches went to the database
    with pytest.raises(InvalidArguments, match="JSON"):
        task_backends["default"].enqueue_many(tasks.noop, calls)
    assert not Job.objects.exists()
    tasks.noop.enqueue(1)  # the connection is fine afterwards
    assert Job.objects.count() == 1


def test_a_generator_that_raises_part_way_writes_nothing():
    def calls():
        for i in count():
            if i == 2 * chunk() + 3:
                raise RuntimeError("the caller's source broke")
            yield (i,), {}

    with pytest.raises(RuntimeError, match="source broke"):
        task_backends["default"].enqueue_many(tasks.noop, calls())
    assert not Job.objects.exists()


def test_a_database_error_in_a_batch_in_flight_rolls_back_every_batch():
    n = 3 * chunk()
    news = [store.NewJob(task_path="tests.tasks.noop", args=[i]) for i in range(n)]
    # Past PostgreSQL's int: the server refuses the second batch while the third is built.
    news[chunk() + 1].priority = 2**40
    if connection.vendor == "sqlite":
        news[chunk() + 1].max_attempts = -1  # SQLite stores any int: its CHECK refuses this
    with pytest.raises(DatabaseError):
        store.enqueue_many(news)
    assert not Job.objects.exists()
    store.enqueue_many([store.NewJob(task_path="tests.tasks.noop")])
    assert Job.objects.count() == 1


def test_keyed_jobs_among_plain_batches_keep_their_one_job_per_key():
    first = store.enqueue_many([store.NewJob(task_path="tests.tasks.noop", idempotency_key="k")])
    n = 3 * chunk()
    news = [store.NewJob(task_path="tests.tasks.noop", args=[i]) for i in range(n)]
    news[chunk() + 2].idempotency_key = "k"  # the same key: the existing job comes back
    news[2 * chunk() + 9].idempotency_key = "fresh"
    outcomes = store.enqueue_many(news)
    assert outcomes[chunk() + 2] == (first[0][0], False)
    assert outcomes[2 * chunk() + 9][1] is True
    created = [job.pk for job, made in outcomes if made]
    assert len(created) == n - 1 and None not in created
    assert Job.objects.count() == n  # the first keyed job and n - 1 new ones


def test_a_bulk_enqueue_inside_the_callers_transaction_rolls_back_with_it():
    with pytest.raises(RuntimeError), transaction.atomic():
        task_backends["default"].enqueue_many(tasks.noop, [((i,), {}) for i in range(3 * chunk())])
        assert Job.objects.count() == 3 * chunk()  # readable in the transaction: ids were read
        raise RuntimeError("the order failed")
    assert not Job.objects.exists()


def test_calls_read_from_the_database_as_they_are_enqueued_are_all_written():
    """A generator of calls that queries as it goes (a queryset's iterator(), a server-side
    cursor on PostgreSQL) is read in full before any batch is sent: its queries never meet the
    bulk insert's pipeline."""
    n = 3 * chunk()
    seeds = task_backends["default"].enqueue_many(tasks.noop, [((i,), {}) for i in range(n)])
    seed_ids = sorted(int(r.id) for r in seeds)
    rows = Job.objects.filter(pk__in=seed_ids).order_by("pk").iterator(chunk_size=7)
    calls = (((job.pk, Job.objects.filter(pk__lte=job.pk).count()), {}) for job in rows)
    results = task_backends["default"].enqueue_many(tasks.add, calls)
    assert [r.args for r in results] == [[pk, n] for n, pk in enumerate(seed_ids, start=1)]
    assert Job.objects.count() == 2 * n


def test_plain_and_keyed_jobs_of_one_batch_go_in_together_or_not_at_all():
    """A batch's plain jobs take the hot INSERT, its concurrency- or ordering-keyed ones the
    ORM's: two statements, one transaction. The second refused, the first is not kept."""
    news = [
        store.NewJob(task_path="tests.tasks.noop", args=[1]),
        store.NewJob(task_path="tests.tasks.noop", concurrency_key="k", concurrency_limit=-1),
    ]
    with pytest.raises(DatabaseError):
        store.enqueue_many(news)
    assert not Job.objects.exists()


def test_rows_of_one_task_share_its_columns_but_nothing_a_job_may_change():
    """store.enqueue_calls sets a task's shared columns once and copies them per row: each job
    still gets its own arguments, lists and model state, and is what enqueue_many makes of the
    same call."""
    backend = task_backends["default"]
    results = backend.enqueue_many(tasks.add, [((i,), {"b": [i]}) for i in range(chunk() + 2)])
    first, second = (job for job, _ in results.outcomes[:2])
    for attribute in ("args", "kwargs", "worker_ids", "errors", "_state"):
        assert getattr(first, attribute) is not getattr(second, attribute), attribute
    first.errors.append({"attempt": 1})
    first.kwargs["b"].append("changed")
    assert second.errors == [] and second.kwargs == {"b": [1]}
    [(alone, _)] = store.enqueue_many(
        [backend._new_job(backend._row_fields(tasks.add), 10_000, (0,), {"b": [0]})],
        now=first.enqueued_at,
    )
    differ = {"_state", "id", "kwargs", "errors"}  # the ids, and what this test changed
    assert {k: v for k, v in vars(alone).items() if k not in differ} == {
        k: v for k, v in vars(first).items() if k not in differ
    }
    assert Job.objects.get(pk=second.pk).kwargs == {"b": [1]}


def test_every_column_and_payload_of_a_batched_enqueue_reads_back_as_given():
    """The batches go to the database as one JSON document each (PostgreSQL) and must come
    back column for column: mixed tasks, queues, priorities, times and payloads of every
    shape JSON has, with quotes, escapes and non-ASCII text in keys and values."""
    from datetime import timedelta
    from datetime import timezone as tz

    from django.utils import timezone

    now = timezone.now()
    payloads = [
        ([], {}),
        ([1, -2, 3.5, 10**30, True, None], {"k": False}),
        (['quote " and \\ backslash', "é ü ✓ 🙂", "tab\tnewline\n"], {'ke"y': {"é": []}}),
        ([{"nested": [[{"deep": "x"}]]}], {"": "", " ": [1e-7, 1.5e-300, 2.0]}),
    ]
    news = []
    for i in range(2 * chunk() + 5):
        args, kwargs = payloads[i % len(payloads)]
        news.append(
            store.NewJob(
                task_path="tests.tasks.noop" if i % 3 else "tests.tasks.add",
                queue_name=f"q{i % 2}",
                priority=i % 5 - 2,
                run_after=now + timedelta(seconds=i % 4)
                if i % 7
                else (now + timedelta(hours=1)).astimezone(tz(timedelta(hours=5, minutes=30))),
                max_attempts=1 + i % 9,
                args=args,
                kwargs=kwargs,
            )
        )
    created = store.enqueue_many(news, now=now)
    rows = {job.pk: job for job in Job.objects.all()}
    assert len(rows) == len(news)
    for (job, _), new in zip(created, news, strict=True):
        row = rows[job.pk]
        assert (row.task_path, row.queue_name, row.priority, row.max_attempts) == (
            new.task_path,
            new.queue_name,
            new.priority,
            new.max_attempts,
        )
        assert row.run_after == new.run_after and row.enqueued_at == now
        assert (row.args, row.kwargs) == (list(new.args), new.kwargs)
