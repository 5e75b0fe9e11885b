"""The shell commands, including the README's enqueue → runworker --burst → jobs sequence."""

import json
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from jobqueue.models import Job, JobState
from tests.conftest import BASE_DIR


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tests.tasks.nope"], "unknown task 'tests.tasks.nope'"),
        (["tests.tasks.not_a_task"], "not a task"),
        (["tests.tasks.add", "--args", "[1,"], "--args is not valid JSON"),
        (["tests.tasks.add", "--args", "{}"], "--args must be a JSON array"),
        (["tests.tasks.add", "--kwargs", "[]"], "--kwargs must be a JSON object"),
        (["tests.tasks.add", "--args", "[NaN, 1]"], "JSON-serialisable"),
        (["tests.tasks.add", "--args", "[1e999, 1]"], "JSON-serialisable"),
        (["tests.tasks.noop", "--args", json.dumps(["x" * 1_100_000])], "over the"),
        (["tests.tasks.add", "--args", "[1, 2, 3]"], "arguments do not fit tests.tasks.add"),
        (["tests.tasks.add", "--kwargs", '{"c": 1}'], "arguments do not fit"),
        (["tests.tasks.add", "--args", "[1, 2]", "--delay", "-5"], "--delay: must be between"),
        (["tests.tasks.add", "--args", "[1, 2]", "--delay", "inf"], "--delay: must be a number"),
        (["tests.tasks.add", "--args", "[1, 2]", "--delay", "nan"], "--delay: must be a number"),
        (["tests.tasks.add", "--args", "[1, 2]", "--delay", "1e15"], "--delay: must be between"),
    ],
)
@pytest.mark.django_db
def test_enqueue_rejects_bad_input_with_status_2(argv, message):
    with pytest.raises(CommandError, match=message) as info:
        call_command("enqueue", *argv)
    assert info.value.returncode == 2
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_enqueue_options_reach_the_job():
    from io import StringIO

    from django.utils import timezone

    out = StringIO()
    call_command(
        "enqueue",
        "tests.tasks.add",
        "--kwargs",
        '{"a": 1, "b": 2}',
        "--queue",
        "mail",
        "--priority",
        "7",
        "--delay",
        "60",
        stdout=out,
    )
    job = Job.objects.get(pk=int(out.getvalue()))
    assert (job.kwargs, job.queue_name, job.priority) == ({"a": 1, "b": 2}, "mail", 7)
    assert job.run_after > timezone.now() + timedelta(seconds=50)


def manage(*argv, env):
    return subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_documented_shell_sequence(workers):
    env = workers.env
    enqueued = manage("enqueue", "tests.tasks.add", "--args", "[2, 3]", "--key", "sum:2+3", env=env)
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = int(enqueued.stdout.strip())
    again = manage("enqueue", "tests.tasks.add", "--args", "[2, 3]", "--key", "sum:2+3", env=env)
    assert int(again.stdout.strip()) == job_id

    bad = manage("enqueue", "tests.tasks.add", "--args", "not json", env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1

    worker = manage("runworker", "--burst", env=env)
    assert worker.returncode == 0, worker.stderr
    assert "event=succeeded" in worker.stderr

    listing = manage("jobs", "--json", "--state", "done", env=env)
    [row] = json.loads(listing.stdout)
    assert row["id"] == job_id and row["state"] == JobState.DONE and row["attempts"] == 1
    assert Job.objects.get(pk=job_id).return_value == 5


@pytest.mark.django_db
def test_the_readmes_literal_commands_run(capsys):
    """The README's runnable lines for enqueue and queuehealth, exactly as written there."""
    import shlex

    readme = (BASE_DIR / "README.md").read_text()
    lines = [
        line.split("  #")[0].strip()
        for line in readme.splitlines()
        if line.startswith("uv run manage.py enqueue ")
        or line.startswith("uv run manage.py queuehealth")
    ]
    assert len(lines) >= 3
    for line in lines:
        argv = shlex.split(line)[3:]  # after `uv run manage.py`
        try:
            call_command(*argv)
        except SystemExit as exit:  # --fail-if exits 1 when a threshold is crossed
            assert exit.code in (0, 1), line
    enqueued = Job.objects.get(task_path="demo.tasks.send_receipt")
    assert (enqueued.args, enqueued.idempotency_key) == ([1], "receipt:1")
