"""Per-key ordering: jobs with the same ordering key run one at a time in enqueue order; a
retry holds its key; a dead job holds it under "block" until its letter is replayed (the
replay runs first) or discarded, and not under "skip"."""

from datetime import timedelta

import pytest
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from jobqueue import store
from jobqueue.models import DeadLetter, Job
from tests import tasks

pytestmark = pytest.mark.django_db

T0 = timezone.now()


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def claim(now=None, limit=10) -> list[int]:
    jobs = store.claim(worker_id="w", queues=None, limit=limit, lease_seconds=60, now=now or at(1))
    claim.jobs.update({job.pk: job for job in jobs})
    return sorted(job.pk for job in jobs)


claim.jobs = {}


@pytest.fixture(autouse=True)
def _forget_claims():
    claim.jobs.clear()


def finish(job_id: int, now=None):
    assert store.acknowledge([(claim.jobs[job_id], None)], now=now or at(1))


def fail(job_id: int, *, retry_at=None, now=None):
    job = claim.jobs[job_id]
    entry = store.error_entry(
        job, class_path="builtins.ConnectionError", message="down", traceback="...", now=at(1)
    )
    assert store.fail(job, entry, retry_at=retry_at, now=now or at(1))


def line(key, n, on_dead=None):
    task = tasks.noop.using(ordering_key=key, run_after=T0)
    if on_dead:
        task = task.using(ordering_on_dead=on_dead)
    return [int(task.enqueue(i).id) for i in range(n)]


def test_one_job_of_a_key_at_a_time_in_enqueue_order_and_other_keys_and_jobs_unaffected():
    first = line("account:1", 3)
    other = line("account:2", 1)
    free = [int(tasks.noop.using(run_after=T0).enqueue(7).id)]
    assert claim() == sorted([first[0], *other, *free])
    assert claim() == []  # account:1's first job is running
    finish(first[0])
    assert claim() == [first[1]]
    finish(first[1])
    assert claim() == [first[2]]


def test_a_waiting_retry_holds_its_key_back():
    first = line("k", 2)
    assert claim() == [first[0]]
    fail(first[0], retry_at=at(30))
    assert claim(at(10)) == []  # the retry waits; the next job may not overtake it
    assert claim(at(31)) == [first[0]]


def test_block_holds_the_key_until_the_letter_is_discarded():
    first = line("k", 2)
    claim()
    fail(first[0])  # dead
    assert claim(at(2)) == []
    letter = DeadLetter.objects.get(job_id=first[0])
    store.discard([letter.pk])
    assert claim(at(3)) == [first[1]]


def test_a_replay_takes_its_jobs_place_and_runs_before_the_keys_later_jobs():
    first = line("k", 2)
    claim()
    fail(first[0])
    letter = DeadLetter.objects.get(job_id=first[0])
    replay = store.replay([letter.pk], now=at(2)).done[letter.pk]
    assert Job.objects.get(pk=replay.pk).position == first[0]
    assert claim(at(3)) == [replay.pk]  # not the later job, though its id is smaller
    finish(replay.pk, now=at(3))
    assert claim(at(4)) == [first[1]]


def test_a_replay_that_dies_again_keeps_blocking():
    first = line("k", 2)
    claim()
    fail(first[0])
    letter = DeadLetter.objects.get(job_id=first[0])
    replay = store.replay([letter.pk], now=at(2)).done[letter.pk]
    assert claim(at(3)) == [replay.pk]
    fail(replay.pk, now=at(3))
    assert DeadLetter.objects.get(pk=letter.pk).state == "pending"
    assert claim(at(4)) == []


def test_skip_lets_the_keys_later_jobs_run_past_a_dead_one():
    first = line("k", 2, on_dead="skip")
    claim()
    fail(first[0])
    assert claim(at(2)) == [first[1]]


def test_keyed_bulk_and_unique_jobs_keep_their_ordering_key():
    keyed = tasks.noop.using(ordering_key="k", idempotency_key="once").enqueue(1)
    bulk = task_backends["default"].enqueue_many(
        tasks.noop.using(ordering_key="k"), [((n,), {}) for n in range(3)]
    )
    unique = tasks.noop.using(ordering_key="k", unique_key="u").enqueue(9)
    ids = [int(keyed.id), *(int(r.id) for r in bulk), int(unique.id)]
    rows = Job.objects.filter(pk__in=ids).order_by("pk")
    assert [(j.ordering_key, j.ordering_on_dead) for j in rows] == [("k", "block")] * 5
    assert [j.position for j in rows] == sorted(ids)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"ordering_key": "k", "ordering_on_dead": "maybe"}, "ordering_on_dead"),
        ({"ordering_key": "x" * 256}, "at most 255"),
        ({"ordering_key": "a\x00"}, "NUL"),
        ({"ordering_key": ""}, "must not be empty"),
        ({"concurrency_key": ""}, "must not be empty"),
        ({"unique_key": ""}, "must not be empty"),
    ],
)
def test_ordering_options_that_cannot_work_are_refused(options, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.noop.using(**options).enqueue(1)
    assert not Job.objects.exists()
