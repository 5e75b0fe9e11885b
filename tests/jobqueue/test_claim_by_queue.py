"""A claim that leaves whole queues out (paused, rate-limited, or not among a worker's several
named queues) goes queue by queue on PostgreSQL instead of stepping over their jobs one by one."""

import json
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from jobqueue import store
from jobqueue.models import Job, PausedQueue
from jobqueue.store import postgresql
from tests import tasks

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the queue-by-queue statement is PostgreSQL's"
)

NOW = timezone.now()


def enqueue(queue, n=1, *, priority=0, age=0.0) -> list[int]:
    task = tasks.noop.using(
        queue_name=queue, priority=priority, run_after=NOW - timedelta(seconds=age)
    )
    return [int(task.enqueue(i).id) for i in range(n)]


def pause(queue):
    PausedQueue.objects.create(queue_name=queue, paused_at=NOW, paused_by="test", reason="test")
    postgresql._paused_seen.clear()  # the once-a-second lookup: ask again now


def claim(queues=None, limit=10):
    return [
        job.pk
        for job in store.claim(
            worker_id="w", queues=queues, limit=limit, lease_seconds=60, now=NOW, sweep=False
        )
    ]


def rows_removed_by_filter(plan) -> int:
    found = plan.get("Rows Removed by Filter", 0) * plan.get("Actual Loops", 1)
    return found + sum(rows_removed_by_filter(p) for p in plan.get("Plans", []))


def test_a_paused_backlog_is_not_stepped_over_job_by_job(monkeypatch, db):
    enqueue("held", 3000, age=3600)  # older: first in priority order
    mine = enqueue("default", 5)
    pause("held")
    ran = []
    real_fetch = postgresql.fetch

    def recording(conn, sql, params, **options):
        ran.append((sql, params))
        return real_fetch(conn, sql, params, **options)

    monkeypatch.setattr(postgresql, "fetch", recording)
    assert sorted(claim()) == mine
    sql, params = next((s, p) for s, p in ran if "UPDATE jobqueue_job AS j" in s)
    # The statement the claim ran, run again under EXPLAIN ANALYZE and rolled back.
    Job.objects.filter(pk__in=mine).update(state="ready", lease_token=None, locked_until=None)
    with transaction.atomic():
        raw = connection.connection
        import psycopg

        with psycopg.Cursor(raw) as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            [[document]] = cursor.fetchall()
        transaction.set_rollback(True)
    plan = (document if isinstance(document, list) else json.loads(document))[0]["Plan"]
    assert rows_removed_by_filter(plan) < 100  # the plain claim stepped over all 3,000


@pytest.mark.parametrize("left_out", ["paused", "named", "named twice"])
def test_queue_by_queue_keeps_one_order_across_queues(left_out, db):
    a_low = enqueue("a", priority=0, age=30)
    b_high = enqueue("b", priority=5)
    c_old = enqueue("c", priority=0, age=60)
    c_high = enqueue("c", priority=5, age=10)
    enqueue("skipped", 3, priority=9, age=90)
    if left_out == "paused":
        pause("skipped")
        queues = None
    elif left_out == "named":
        queues = ["a", "b", "c"]
    else:
        queues = ["c", "a", "b", "c"]
    assert claim(queues, limit=3) == c_high + b_high + c_old
    assert claim(queues, limit=3) == a_low
    assert claim(queues, limit=3) == []


def test_a_rate_limited_backlog_is_left_to_its_bucket(settings, db):
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"slow": 1}}
    enqueue("slow", 50, age=3600)
    mine = enqueue("default", 3)
    took = claim(limit=10)
    assert set(mine) <= set(took) and len(took) == 4  # the bucket's one token, and ours
