"""The health snapshot per queue: live concurrency, limits, the oldest wait (none when nothing is
due, not counted for a paused queue), and live counts read bounded (LIVE_CAP) but exact below it.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobqueue import health, store
from jobqueue.health import live_sample, snapshot, state_counts
from jobqueue.models import WorkerRecord
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def now():
    return timezone.now().replace(microsecond=0)


def worker(name, now, *, queues=(), concurrency=4, lost=False):
    return WorkerRecord.objects.create(
        worker_id=name,
        host="h",
        pid=1,
        queues=list(queues),
        concurrency=concurrency,
        started_at=now - timedelta(hours=1),
        last_heartbeat_at=now - timedelta(minutes=10 if lost else 0, seconds=1),
    )


def queue(health_, name):
    [found] = [q for q in health_.queues if q.queue == name]
    return found


def test_a_queue_with_nothing_due_has_no_oldest_wait(now):
    JobFactory(queue_name="mail", run_after=now + timedelta(hours=1))  # scheduled only
    DeadLetterFactory(queue_name="mail", task_path="t.send")
    h = snapshot(now=now)
    mail = queue(h, "mail")
    assert (mail.ready, mail.scheduled, mail.dead_letters) == (0, 1, 1)
    assert mail.oldest_ready_age is None  # the page shows "—", not "0 s"
    assert h.totals["oldest_ready_age"] == 0


def test_a_paused_queues_wait_is_not_the_oldest_ready_age(now):
    JobFactory(queue_name="mail", run_after=now - timedelta(minutes=10))
    JobFactory(queue_name="default", run_after=now - timedelta(seconds=20))
    store.queues.pause("mail", actor="ana", reason="provider outage")
    h = snapshot(now=now)
    mail = queue(h, "mail")
    assert mail.paused and mail.oldest_ready_age == 600  # its own, shown as "paused"
    # The whole's oldest wait is the running queue's: mail's jobs wait because ana said so.
    assert h.totals["oldest_ready_age"] == 20
    store.queues.resume("mail", actor="ana", reason="back")
    assert snapshot(now=now).totals["oldest_ready_age"] == 600


def test_a_paused_queue_without_jobs_is_listed_to_be_resumed(now):
    store.queues.pause("fresh", actor="ana", reason="before launch", allow_unknown=True)
    fresh = queue(snapshot(now=now), "fresh")
    assert fresh.paused and (fresh.ready, fresh.running) == (0, 0)


def test_live_concurrency_rate_limit_and_keys_per_queue(now, settings):
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"mail": 2.5}}
    worker("w1", now, queues=["mail"], concurrency=4)
    worker("w2", now, concurrency=8)  # every queue
    worker("w3", now, queues=["mail"], concurrency=16, lost=True)  # lost: serves nothing
    worker("w4", now, queues=["billing"], concurrency=2)
    for by in ("w1", "w1", "w2"):
        JobFactory(queue_name="mail", running=True, locked_by=by)
    JobFactory(
        queue_name="mail", running=True, locked_by="w2", concurrency_key="t:1", concurrency_limit=2
    )
    JobFactory(queue_name="mail", running=True, locked_until=now - timedelta(seconds=1))  # expired
    mail = queue(snapshot(now=now), "mail")
    assert mail.running_by_worker == {"w1": 2, "w2": 2}
    assert (mail.running, mail.expired) == (4, 1)
    assert (mail.workers, mail.slots) == (2, 12)  # w1 and w2; w3 is lost, w4 takes billing
    assert (mail.keys_running, mail.key_limit) == (1, 2)
    assert mail.rate_limit == 2.5


def test_counts_are_exact_below_the_cap_and_say_so_above(now, monkeypatch):
    for n in range(5):
        JobFactory(queue_name="big", run_after=now - timedelta(seconds=n), priority=n % 2)
    JobFactory(queue_name="big", run_after=now - timedelta(hours=2), priority=-3)  # the oldest
    JobFactory(queue_name="small", run_after=now - timedelta(seconds=30))
    exact = snapshot(now=now)
    assert (queue(exact, "big").ready, queue(exact, "big").capped) == (6, False)
    monkeypatch.setattr(health, "LIVE_CAP", 3)
    capped = snapshot(now=now)
    big, small = queue(capped, "big"), queue(capped, "small")
    assert (big.ready, big.capped) == (3, True)  # at least 3: the page says "3+"
    # Past the cap the oldest wait is still exact: the lowest priority's first job.
    assert big.oldest_ready_age == 2 * 3600
    assert (small.ready, small.capped) == (1, False)  # another queue's count is its own
    assert capped.totals["live_capped"] == 1
    counts = state_counts(now)
    assert counts["ready"] == (4, True)


def test_the_sample_reads_each_queue_from_its_index_head(now):
    JobFactory(queue_name="a", run_after=now)
    JobFactory(queue_name="b", run_after=now, concurrency_key="k")  # keyed: not in the skip scan
    JobFactory(queue_name="c", run_after=now)
    assert store.queues.ready_queues() == ["a", "c"]
    sample = live_sample(now, cap=10)
    assert sorted(r["queue"] for r in sample.ready) == ["a", "b", "c"]
    assert {"a", "b", "c"} <= store.queues.known()
