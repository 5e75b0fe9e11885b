"""The per-minute counters (jobqueue_jobcounter): written without deadlocks, and exact."""

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections
from django.utils import timezone

from jobqueue import store
from jobqueue.models import JobCounter
from tests.conftest import wait_until
from tests.factories import JobFactory

MINUTE = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
KEYS = [(MINUTE, "default", f"tests.counted_{n}") for n in range(4)]


def postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer at a time: nothing to deadlock")


def admin_connection():
    params = connection.get_connection_params()
    params = {k: v for k, v in params.items() if k not in {"cursor_factory", "context"}}
    return psycopg.connect(**params)


def waiting_on_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def concurrently(writers) -> list[BaseException]:
    """Run each writer on its own thread (its own connection) while a third session holds the
    counter rows they share; release them once every writer waits on them, so both start from
    the same place. Returns what the writers raised."""
    errors: list[BaseException] = []

    def run(write):
        try:
            write()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    with admin_connection() as holder:
        holder.execute(
            "SELECT 1 FROM jobqueue_jobcounter WHERE task_path LIKE 'tests.counted_%%' FOR UPDATE"
        )
        threads = [threading.Thread(target=run, args=(write,)) for write in writers]
        for thread in threads:
            thread.start()
        wait_until(lambda: waiting_on_locks() == len(writers), message="both writers waiting")
        holder.commit()
    for thread in threads:
        thread.join(30)
    return errors


def record(worker_id, keys):
    tallies = {}
    for key in keys:  # this order: a dict keeps it
        tallies[key] = store.Tally(succeeded=1)
    store.record_worker(
        worker_id=worker_id,
        host="h",
        pid=1,
        queues=None,
        concurrency=1,
        started_at=MINUTE,
        succeeded=len(keys),
        failed=0,
        current_job_ids=[],
        tallies=tallies,
    )


@pytest.mark.django_db(transaction=True)
def test_two_workers_flushing_the_same_minutes_in_opposite_orders_do_not_deadlock():
    """The chaos run's `deadlock detected` on jobqueue_jobcounter: each worker upserted its
    tallies in the order it met them, so two could each hold a row the other needed next. Here
    both are held back at their first row by a third session and let go together: in input
    order they deadlocked (7 runs of 8 without the sort); in key order one waits for the other."""
    postgresql_only()
    for minute, queue, task in KEYS:
        JobCounter.objects.create(minute=minute, queue_name=queue, task_path=task)
    for _ in range(5):
        errors = concurrently(
            [lambda: record("w:1", KEYS), lambda: record("w:2", list(reversed(KEYS)))]
        )
        assert errors == []
    counted = JobCounter.objects.filter(task_path__startswith="tests.counted_")
    assert sorted(counted.values_list("succeeded", flat=True)) == [10] * len(KEYS)


def leased_job(task, **fields):
    return JobFactory(task_path=f"tests.counted_{task}", running=True, **fields)


def counters():
    return {
        c.task_path: (c.succeeded, c.failed, c.dead)
        for c in JobCounter.objects.filter(task_path__startswith="tests.counted_")
    }


@pytest.mark.django_db(transaction=True)
def test_acknowledgements_of_the_same_tasks_in_opposite_orders_do_not_deadlock():
    """An acknowledgement counts its jobs in its own statement (PostgreSQL), in key order
    whatever the order of its jobs."""
    postgresql_only()
    now = timezone.now()
    for n in range(4):
        JobCounter.objects.create(
            minute=now.replace(second=0, microsecond=0), queue_name="default", task_path=KEYS[n][2]
        )
    for _ in range(5):
        first = [leased_job(n) for n in range(4)]
        second = [leased_job(n) for n in reversed(range(4))]
        errors = concurrently(
            [
                lambda jobs=jobs: store.acknowledge([(job, None) for job in jobs], now=now)
                for jobs in (first, second)
            ]
        )
        assert errors == []
    assert counters() == {task: (10, 0, 0) for _, _, task in KEYS}


@pytest.mark.django_db(transaction=True)
def test_each_outcome_is_counted_by_the_transition_that_stores_it():
    """Counted with the outcome, not later by the worker: nothing stored goes uncounted when
    the worker dies after storing it, and nothing is counted that was not stored."""
    now = timezone.now()
    done, lost = leased_job("done"), leased_job("done")
    assert store.acknowledge([(done, 1)], now=now) == {done.pk}
    lost.lease_token = "not-ours"
    assert store.acknowledge([(lost, 1)], now=now) == set()
    retried, dead = leased_job("failed", attempts=1), leased_job("failed", attempts=3)
    error = store.error_entry(
        retried, class_path="ValueError", message="no", traceback="", now=now, duration=0.1
    )
    assert store.fail(retried, error, retry_at=now + timedelta(minutes=1), now=now)
    assert store.fail(dead, error, retry_at=None, now=now)
    # A worker gone mid-attempt: the sweep's failure is counted as the worker's would be.
    leased_job("expired", attempts=1, locked_until=now - timedelta(seconds=1))
    leased_job("expired", attempts=5, max_attempts=5, locked_until=now - timedelta(seconds=1))
    assert store.sweep_expired(now=now) == 2
    assert counters() == {
        "tests.counted_done": (1, 0, 0),
        "tests.counted_failed": (0, 2, 1),
        "tests.counted_expired": (0, 2, 1),
    }
    [row] = JobCounter.objects.filter(task_path="tests.counted_done")
    assert row.minute == now.replace(second=0, microsecond=0) and row.last_success_at == now
