"""Issue 47: a project type-checked with mypy and django-stubs can declare tasks with Redrive's
options (`jobqueue.task`) and keep their types, and `jobqueue.once` yields a bool.

Runs mypy on a small sample app (mypy and django-stubs are in the dev group, so every pass of CI
runs it); an environment without them skips, saying so."""

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import BASE_DIR

SAMPLE = """
from django.db import transaction

import jobqueue


@jobqueue.task(max_attempts=3, timeout=20)
def send_receipt(payment_id: int) -> dict[str, int]:
    return {"receipt_for": payment_id}


@jobqueue.task
def plain(note: str) -> None: ...


@jobqueue.task(queue_name="payments", priority=10, backoff_base=2.0, backoff_cap=60.0)
def charge(cents: int, *, currency: str = "EUR") -> None: ...


def pay(payment_id: int) -> str:
    with jobqueue.once(f"charge:{payment_id}") as first:
        reveal_type(first)
    with transaction.atomic():
        result = send_receipt.using(idempotency_key=f"receipt:{payment_id}").enqueue(payment_id)
    reveal_type(send_receipt)
    reveal_type(result)
    charge.using(ordering_key="acct:1", concurrency_key="t", concurrency_limit=2).enqueue(250)
    plain.enqueue("x")
    return result.id


def wrong() -> None:
    send_receipt.enqueue("not a number")
"""

CONFIG = """
[mypy]
strict = True

[mypy-jobqueue.*]
# Redrive's own modules are not all annotated: only what the sample uses is judged.
follow_imports = silent
"""


def _stubs_installed() -> bool:
    try:
        importlib.metadata.distribution("django-stubs")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None or not _stubs_installed(),
    reason="mypy and django-stubs are not installed here (the dev group has them: uv sync)",
)
def test_tasks_declared_with_redrives_options_keep_their_types(tmp_path):
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "tasks.py").write_text(textwrap.dedent(SAMPLE))
    (tmp_path / "mypy.ini").write_text(CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", "mypy.ini", "shop"],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(BASE_DIR)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    notes = [line.split("Revealed type is ")[1] for line in out.splitlines() if "Revealed" in line]
    assert notes == [
        '"bool"',
        '"jobqueue.decorator.RedriveTask[[payment_id: int], dict[str, int]]"',
        '"django.tasks.base.TaskResult[[payment_id: int], dict[str, int]]"',
    ], out
    errors = [line for line in out.splitlines() if ": error:" in line]
    # The one error is the one planted: the task is typed, not Any.
    assert len(errors) == 1 and '"enqueue"' in errors[0] and "[arg-type]" in errors[0], out


def noted(note):
    return note


def test_jobqueue_task_is_djangos_task_with_the_options_given(settings):
    """At run time: the backend's task class, Redrive's options set; none given, nothing
    passed, so a task without them loads under Django's own backends too."""
    import jobqueue
    from jobqueue.backend import Task

    declared = jobqueue.task(queue_name="payments", max_attempts=3, timeout=20)(noted)
    assert isinstance(declared, Task) and isinstance(declared, jobqueue.RedriveTask)
    assert (declared.queue_name, declared.max_attempts, declared.timeout) == ("payments", 3, 20)
    assert jobqueue.task(noted).max_attempts is None
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    assert jobqueue.task(noted).enqueue("hi").return_value == "hi"
