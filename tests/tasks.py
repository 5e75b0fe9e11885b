"""Tasks the tests enqueue; worker subprocesses import them by path."""

import os
import signal
import time
from pathlib import Path

from django.tasks import task

import jobqueue
from jobqueue.errors import PermanentError, RateLimited


def _sink(line: str):
    """Append-only record outside the database: every attempt that reached the effect."""
    path = os.environ.get("REDRIVE_TEST_SINK")
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")


@task
def noop(n=0):
    return n


@task
def add(a, b):
    return a + b


@task(max_attempts=3)
def effect(key: str):
    """The receipt of seed 004: one row per key however often the job runs."""
    _sink(key)
    with jobqueue.once(f"effect:{key}", job_type="tests.effect") as first:
        pass
    if os.environ.get("REDRIVE_TEST_CRASH_AFTER_EFFECT"):
        os.kill(os.getpid(), signal.SIGKILL)
    return first


# A long backoff: a retry is never due within the same burst run unless a clock says so.
@task(max_attempts=1)
def effect_then_fails(key: str, fail_while: str):
    """Its effect commits, then it fails for good while the file `fail_while` exists."""
    _sink(key)
    with jobqueue.once(f"effect:{key}", job_type="tests.effect_then_fails"):
        pass
    if Path(fail_while).exists():
        raise PermanentError("the step after the effect failed")
    return "done"


@task(max_attempts=3, backoff_base=30.0, backoff_cap=60.0)
def always_fails(message="dependency unavailable"):
    raise ConnectionError(message)


@task
def permanent(message="invalid payload"):
    raise PermanentError(message)


@task(max_attempts=1)
def refuses(value=None):
    """Dead-letters at once whatever it is given; its error text says nothing of the value."""
    raise PermanentError("refused whatever it was given")


@task(max_attempts=2)
def rate_limited(seconds=120.0):
    raise RateLimited(retry_after=seconds)


@task
def wait_for_file(path: str, key: str = "slow", timeout: float = 60.0):
    """Signals it started (path + '.started'), then runs until `path` exists."""
    Path(path + ".started").write_text(str(os.getpid()))
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("test file never appeared")
        time.sleep(0.01)
    with jobqueue.once(f"effect:{key}", job_type="tests.slow"):
        pass
    return "finished"


@task(timeout=0.2, max_attempts=1)
def too_slow():
    time.sleep(1.0)


@task(timeout=0.2, max_attempts=1)
def hangs_until_file(path: str):
    """Past its timeout long before `path` appears: a handler Python cannot interrupt."""
    deadline = time.monotonic() + 60
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.01)


@task(takes_context=True)
def with_context(context, x):
    return {"attempt": context.attempt, "x": x}


def not_a_task():
    return None


@task(max_attempts=25)
def fault_effect(key: str, work_ms: float = 5.0):
    """A job for the fault suite: real work time so kills land mid-job, one effect per key."""
    _sink(key)
    time.sleep(work_ms / 1000)
    with jobqueue.once(f"effect:{key}", job_type="tests.fault_effect") as first:
        pass
    return first


@task(max_attempts=2)
def effect_first(key: str, work_ms: float = 50.0):
    """fault_effect the other way round: its effect first, then its work, so its handler's
    connection sits idle from the effect until the next job's first query. Two attempts: one
    lost to something else than the job dead-letters it."""
    _sink(key)
    with jobqueue.once(f"effect:{key}", job_type="tests.effect_first") as first:
        pass
    time.sleep(work_ms / 1000)
    return first


@task(max_attempts=3)
def kills_its_worker():
    os.kill(os.getpid(), signal.SIGKILL)


@task(max_attempts=1)
def undecodable_error():
    raise ValueError("bytes from a device: " + b"\xff\xfe\x00".decode("utf-8", "surrogateescape"))


@task(max_attempts=5, backoff_base=10.0, backoff_cap=600.0)
def storm(n: int):
    raise ConnectionError(f"dependency down ({n})")


@task(max_attempts=3)
def ordered_step(key: str, n: int, fail_first: bool = False, die_until: str = ""):
    """One step of an ordered line: 'start'/'end' lines in the sink around it (a failed
    attempt's too); fails its first attempt when fail_first (retried); dies (PermanentError)
    while the file die_until names does not exist."""
    _sink(f"start {key} {n}")
    try:
        if die_until and not Path(die_until).exists():
            raise PermanentError(f"{key} step {n} cannot run yet")
        marker = Path(f"{os.environ['REDRIVE_TEST_SINK']}.{key}.{n}")
        if fail_first and not marker.exists():
            marker.write_text("failed once")
            raise ConnectionError(f"{key} step {n}: first attempt fails")
    finally:
        _sink(f"end {key} {n}")
    return n


@task
def tenant_step(tenant: str, n: int, seconds: float = 0.0):
    """A tenant's job: 'start'/'end' lines around an optional pause (overlap shows)."""
    _sink(f"start {tenant} {n} {time.monotonic()}")
    if seconds:
        time.sleep(seconds)
    _sink(f"end {tenant} {n} {time.monotonic()}")
    return n


@task(max_attempts=2)
def leaves_a_transaction_open(key: str):
    """Writes, then returns without committing (autocommit off, never restored)."""
    from django.db import transaction

    from jobqueue.models import Execution

    transaction.set_autocommit(False)
    Execution.objects.create(idempotency_key=f"uncommitted:{key}", job_type="tests.open")
    return "returned"


class _CauseRaises(Exception):
    @property
    def __cause__(self):
        raise RuntimeError("its cause cannot be read")


class _StrInterrupts(Exception):
    def __str__(self):
        raise KeyboardInterrupt


@task(max_attempts=1)
def raises_unformattable(kind: str):
    raise (_CauseRaises if kind == "cause" else _StrInterrupts)("unformattable")


@task(max_attempts=3)
def returns_text(chars: int):
    """A return value of `chars` characters: chars + 2 bytes of JSON."""
    return "x" * chars


@task(max_attempts=3)
def returns_json_the_database_refuses():
    """Past the worker's own checks (CheckedJSON vouches for it), as a bug could be."""
    from jobqueue.store import CheckedJSON

    return CheckedJSON('{"unterminated": ')
