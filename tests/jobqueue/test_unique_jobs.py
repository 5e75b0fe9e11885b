"""Unique jobs: while the job holding a key is in the chosen states, or for a period, an
enqueue with that key returns that job; concurrent enqueues of one key make one job."""

import threading
from datetime import timedelta

import pytest
from django.db import close_old_connections
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from jobqueue import store
from jobqueue.models import Job, JobState, UniqueKey
from tests import tasks

pytestmark = pytest.mark.django_db


def finish(result, state=JobState.DONE):
    Job.objects.filter(pk=result.id).update(state=state, finished_at=timezone.now())


def test_a_second_enqueue_while_the_first_waits_returns_the_first():
    sync = tasks.noop.using(unique_key="sync:42")
    first, second = sync.enqueue(1), sync.enqueue(2)
    assert second.id == first.id and Job.objects.count() == 1
    assert second.args == [1]  # the holder's handle, not the call that was turned away
    finish(first)
    third = sync.enqueue(3)
    assert third.id != first.id and Job.objects.count() == 2
    assert UniqueKey.objects.get(key="sync:42").job_id == int(third.id)


def test_the_states_chosen_decide_what_holds_the_key():
    running_only = tasks.noop.using(unique_key="k", unique_while=("running",))
    first = running_only.enqueue(1)
    second = running_only.enqueue(2)  # the first is only ready: it does not hold the key
    assert second.id != first.id and UniqueKey.objects.get().job_id == int(second.id)
    store.claim(worker_id="w", queues=None, limit=2, lease_seconds=60)  # both run
    assert running_only.enqueue(3).id == second.id


def test_a_job_waiting_for_its_time_holds_the_key_only_under_scheduled():
    later = timezone.now() + timedelta(hours=1)
    waiting = tasks.noop.using(run_after=later, unique_key="w", unique_while=("ready",))
    first = waiting.enqueue(1)
    assert tasks.noop.using(unique_key="w", unique_while=("ready",)).enqueue(2).id != first.id
    scheduled = tasks.noop.using(run_after=later, unique_key="s", unique_while=("scheduled",))
    held = scheduled.enqueue(1)
    assert scheduled.enqueue(2).id == held.id


def test_a_job_waiting_out_a_retry_holds_the_key_by_default_and_only_under_retrying():
    """Retrying is its own state, as on every screen: "scheduled" is a first run later."""
    backing_off = {"attempts": 1, "run_after": timezone.now() + timedelta(minutes=5)}
    held = tasks.noop.using(unique_key="r").enqueue(1)
    Job.objects.filter(pk=held.id).update(**backing_off)
    assert tasks.noop.using(unique_key="r").enqueue(2).id == held.id

    only_scheduled = tasks.noop.using(unique_key="q", unique_while=("scheduled",))
    first = only_scheduled.enqueue(1)
    Job.objects.filter(pk=first.id).update(**backing_off)
    assert only_scheduled.enqueue(2).id != first.id
    only_retrying = tasks.noop.using(unique_key="p", unique_while=("retrying",))
    first = only_retrying.enqueue(1)
    Job.objects.filter(pk=first.id).update(**backing_off)
    assert only_retrying.enqueue(2).id == first.id


def test_a_hold_taken_before_retrying_was_a_state_still_covers_a_retry():
    from importlib import import_module
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    migration = import_module("jobqueue.migrations.0020_unique_holds_cover_retrying")
    held = tasks.noop.using(unique_key="old").enqueue(1)
    UniqueKey.objects.filter(key="old").update(states="ready,scheduled,running")
    UniqueKey.objects.create(key="narrow", job_id=held.id, states="running")
    migration.add_retrying(apps, SimpleNamespace(connection=connection))  # as migrate calls it
    assert UniqueKey.objects.get(key="old").states == "ready,scheduled,retrying,running"
    assert UniqueKey.objects.get(key="narrow").states == "running"
    Job.objects.filter(pk=held.id).update(
        attempts=1, run_after=timezone.now() + timedelta(minutes=5)
    )
    assert tasks.noop.using(unique_key="old").enqueue(2).id == held.id


def test_a_period_holds_the_key_whatever_the_job_did_then_lets_go():
    now = timezone.now()
    hourly = tasks.noop.using(unique_key="report", unique_while=(), unique_for=3600)
    first = hourly.enqueue(1)
    finish(first)
    assert hourly.enqueue(2).id == first.id  # done, but within the hour
    UniqueKey.objects.filter(key="report").update(expires_at=now - timedelta(seconds=1))
    assert hourly.enqueue(3).id != first.id
    assert tasks.noop.using(unique_key="t", unique_for=timedelta(minutes=5)).unique_for == 300


def test_a_pruned_holder_lets_the_key_go():
    first = tasks.noop.using(unique_key="gone").enqueue(1)
    Job.objects.filter(pk=first.id).delete()
    assert tasks.noop.using(unique_key="gone").enqueue(2).id != first.id


def test_a_bulk_enqueue_of_one_key_makes_one_job():
    results = task_backends["default"].enqueue_many(
        tasks.noop.using(unique_key="bulk"), [((1,), {}), ((2,), {}), ((3,), {})]
    )
    assert len({r.id for r in results}) == 1 and Job.objects.count() == 1


@pytest.mark.parametrize(
    "options, message",
    [
        ({"unique_key": "k", "idempotency_key": "i"}, "not both"),
        ({"unique_key": "k", "unique_while": ("done",)}, "unique_while"),
        ({"unique_key": "k", "unique_while": ()}, "needs unique_while"),
        ({"unique_key": "k", "unique_for": 0}, "unique_for"),
        ({"unique_key": "k", "unique_for": float("inf")}, "unique_for"),
        ({"unique_key": "k", "unique_for": "soon"}, "unique_for"),
        ({"unique_key": "x" * 256}, "at most 255"),
        ({"unique_key": "a\x00b"}, "NUL"),
    ],
)
def test_unique_options_that_cannot_work_are_refused_and_nothing_is_written(options, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.noop.using(**options).enqueue(1)
    assert not Job.objects.exists() and not UniqueKey.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_of_one_key_make_one_job():
    """Eight threads, each with its own connection, enqueue the same key at once."""
    start, ids, errors = threading.Barrier(8), [], []

    def enqueue(n):
        try:
            start.wait()
            ids.append(tasks.noop.using(unique_key="race").enqueue(n).id)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(ids) == 8
    assert len(set(ids)) == 1 and Job.objects.count() == 1
