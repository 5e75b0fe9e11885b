"""Rate limits per queue: a token bucket row every worker shares. With an injected clock the
claim takes at most rate x elapsed (plus one second's burst); real worker processes hold the
configured rate within 10%."""

import json
import signal
from datetime import timedelta

import pytest
from django.core import checks
from django.tasks import task_backends
from django.utils import timezone

from jobqueue import store
from jobqueue.checks import check_rate_limits
from jobqueue.health import snapshot
from jobqueue.models import Job, JobState, RateBucket
from tests import tasks
from tests.cli import run
from tests.conftest import wait_until

T0 = timezone.now()


def at(seconds):
    return T0 + timedelta(seconds=seconds)


def claim(now, limit=100, queues=None):
    return store.claim(worker_id="w", queues=queues, limit=limit, lease_seconds=60, now=now)


def fill(queue, n):
    task_backends["default"].enqueue_many(
        tasks.noop.using(queue_name=queue, run_after=T0 - timedelta(seconds=1)),
        [((i,), {}) for i in range(n)],
    )


@pytest.mark.django_db
def test_a_limited_queue_gives_a_seconds_burst_then_its_rate_and_others_are_untouched(settings):
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"emails": 5}}
    fill("emails", 100)
    fill("default", 20)
    first = claim(at(0))
    assert sum(j.queue_name == "default" for j in first) == 20  # not limited
    assert sum(j.queue_name == "emails" for j in first) == 5  # one second's burst
    assert claim(at(0.1)) == []  # the bucket is empty: 0.5 token
    assert len(claim(at(1.0))) == 5  # 0.9 s more: 4.5 + 0.5 tokens
    assert len(claim(at(3.0))) == 5  # two seconds pass, but the bucket holds one second
    assert len(claim(at(3.4), limit=1)) == 1
    assert RateBucket.objects.get().tokens == pytest.approx(1.0)  # 2.0 - 1, the rest kept


@pytest.mark.django_db
def test_a_worker_bound_to_other_queues_leaves_the_bucket_alone(settings):
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"emails": 5}}
    fill("emails", 10)
    fill("default", 3)
    assert len(claim(at(0), queues=["default"])) == 3
    assert not RateBucket.objects.exists()
    assert len(claim(at(0), queues=["emails"])) == 5


@pytest.mark.parametrize(
    "limits, bad",
    [({"emails": 0}, 1), ({"emails": -1, "ok": 2}, 1), ({"emails": "fast"}, 1),
     ({"emails": float("inf")}, 1), ({"emails": True}, 1), ({"": 1}, 1), ({"emails": 2.5}, 0)],
)  # fmt: skip
def test_rate_limits_are_checked(settings, limits, bad):
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": limits}
    found = check_rate_limits()
    assert len(found) == bad and all(isinstance(m, checks.Error) for m in found)


def test_four_worker_processes_share_one_rate(workers, settings):
    rate, n = 40, 360
    fill("limited", n)
    env = {"REDRIVE_RATE_LIMITS": f'{{"limited": {rate}}}'}
    procs = [workers.start("--poll", "0.02", env=env) for _ in range(4)]
    done = Job.objects.filter(queue_name="limited", state=JobState.DONE)
    wait_until(lambda: done.count() == n, timeout=60, message="the limited queue drained")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=30) for proc in procs] == [0] * 4
    starts = sorted(done.values_list("started_at", flat=True))
    # After the first second's burst, the rate the jobs started at.
    burst = rate
    measured = (n - burst - 1) / (starts[-1] - starts[burst]).total_seconds()
    print(f"rate limit {rate}/s: measured {measured:.1f}/s over {n - burst} jobs")
    assert abs(measured - rate) <= 0.1 * rate, measured


@pytest.mark.django_db
def test_queues_list_and_health_show_each_limit(settings):
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"emails": 2.5}}
    fill("emails", 3)
    [row] = json.loads(run("queues", "list", "--json").out)
    assert (row["queue"], row["rate_limit"], row["ready"]) == ("emails", 2.5, 3)
    assert "at most 2.5 jobs/s" in run("queues", "list").out
    health = snapshot()
    assert health.totals["rate_limited_queues"] == 1
    assert [r.rate_limit for r in health.rows] == [2.5]


def test_a_burst_worker_waits_for_tokens_rather_than_stopping_with_jobs_left(workers):
    fill("limited", 30)
    env = {"REDRIVE_RATE_LIMITS": '{"limited": 20}'}
    proc = workers.run("--burst", "--poll", "0.05", env=env)
    assert proc.returncode == 0
    assert Job.objects.filter(queue_name="limited", state=JobState.DONE).count() == 30
