"""Workflows the tests enqueue (jobqueue.workflows); worker subprocesses import them by path.

Effects: `_sink` (a file outside the database: every run that reached the effect) and
`jobqueue.once` (a row in the step's own transaction: what committed)."""

import os

from django.tasks import task

import jobqueue
from jobqueue.errors import PermanentError
from jobqueue.workflows import batch, sleep, step, step_key, step_options, wait_for
from tests.tasks import _sink

# In-process tests flip these to mend a failing step or item before replaying it.
BROKEN = {"step": True, "items": True}


def remote_effect(key):
    """An effect outside the database, made with the step's idempotency key."""
    _sink(f"remote {key} {step_key()}")
    return key.upper()


@step_options(atomic=True)
def local_effect(key):
    """An effect in the database, committed with the step's record."""
    _sink(f"local {key}")
    with jobqueue.once(f"local:{key}", job_type="tests.local_effect") as first:
        pass
    return {"key": key, "first": first}


@task
def three_steps(key):
    a = step("a", remote_effect, key)
    b = step("b", local_effect, key)
    c = step("c", remote_effect, f"{key}-c")
    return [a, b, c]


@step_options(max_attempts=3, backoff_base=1.0, backoff_cap=1.0)
def sometimes_broken(key):
    _sink(f"try {key}")
    if BROKEN["step"]:
        raise ValueError(f"{key} is broken")
    return "mended"


def refuses(key):
    raise PermanentError(f"{key} refused")


@task
def breaks_at_second(key, permanent=False):
    first = step("first", remote_effect, key)
    second = step("second", refuses if permanent else sometimes_broken, key)
    return [first, second]


@task
def sleeper(key, seconds):
    step("before", remote_effect, key)
    sleep(seconds)
    return step("after", remote_effect, f"{key}-after")


@task
def waiter(key, timeout):
    got = wait_for("go", timeout=timeout)
    step("after", remote_effect, key)
    return {"got": got}


@task
def twice(key):
    step("same", remote_effect, key)
    step("same", remote_effect, key)


def numbers(n):
    return [{"n": i, "bad": i % 1429 == 700} for i in range(n)]


@task
def item(value):
    if value.get("bad") and BROKEN["items"] and not os.environ.get("REDRIVE_TEST_ITEMS_MENDED"):
        raise ValueError(f"item {value['n']} is bad")
    with jobqueue.once(f"item:{value['n']}", job_type="tests.item") as first:
        pass
    if not first:
        raise AssertionError(f"item {value['n']} ran twice")


@task
def batch_done(**summary):
    _sink(
        f"batch_done {summary['batch']} {summary['outcome']} {summary['done']} {summary['failed']}"
    )


@task
def importer(n, chunk=100):
    items = step("items", numbers, n)
    result = batch("import", items, item, chunk=chunk, on_complete=batch_done)
    return {"done": result.done, "failed": result.failed, "letters": result.dead_letters}


@task
def unstorable_batch():
    return batch("import", [{"n": 0}, {"n": 1, "text": "nul \x00 inside"}], item)


def text_of(chars):
    return "x" * chars


@task
def big_step(chars):
    """One step whose result is `chars` characters (chars + 2 bytes of JSON)."""
    return len(step("text", text_of, chars))
