"""Every command's output, at the door they share (jobqueue/management/cli.py): a write to
stdout or stderr that fails (a full disk, a reader gone, an I/O error) ends the command with at
most one line and a non-zero status, never a traceback; JSON is printed with non-ASCII text as
itself and control characters escaped. Real processes writing to /dev/full and closed pipes."""

import errno
import io
import json
import os
import subprocess
import sys

import pytest
from django.db import connection

from jobqueue.models import DeadLetter
from jobqueue.store.payloads import MAX_JSON_DEPTH, json_depth
from tests.cli import command, run
from tests.conftest import BASE_DIR, database_url
from tests.deadletters.conftest import user_with_role
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def env(transactional_db):
    return {**os.environ, "DATABASE_URL": database_url(connection)}


def manage(argv, env, **streams):
    return subprocess.run(
        [sys.executable, "manage.py", *argv], cwd=BASE_DIR, env=env, timeout=120, **streams
    )


# Each prints at least a line on an empty queue; between them, every command of both apps.
EVERY_COMMAND = [
    ["jobs"],
    ["queues", "list"],
    ["queuehealth"],
    ["schedules", "list"],
    ["workflows", "list"],
    ["prune"],
    ["enqueue", "tests.tasks.noop"],
    ["deadletters", "list"],
    ["deadletters", "list", "--json"],
    ["deadletters", "show", "{pk}"],
    ["deadletters", "export", "--format", "csv", "--operator", "chief"],
    ["runworker", "--help"],
    ["runrelay", "--help"],
    ["runchores", "--help"],
    ["createoperator", "--help"],
    ["audit", "verify"],
    ["deploy", "list"],
    ["deploy", "mark", "--version", "v1"],
    ["act", "list", "--json"],
    ["apitoken", "create", "--user", "chief", "--name", "output test"],
]


def test_every_command_of_both_apps_is_tried():
    from django.core.management import get_commands

    ours = {name for name, app in get_commands().items() if app in ("jobqueue", "deadletters")}
    assert ours == {argv[0] for argv in EVERY_COMMAND}


@pytest.mark.parametrize("argv", EVERY_COMMAND, ids=" ".join)
def test_a_full_disk_under_stdout_ends_any_command_with_one_line_and_status_1(env, argv):
    user_with_role("admin", "chief")
    letter = DeadLetterFactory()
    with open("/dev/full", "w") as full:
        done = manage(
            [arg.format(pk=letter.pk) for arg in argv], env, stdout=full, stderr=subprocess.PIPE
        )
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert err.splitlines() == [
        f"manage.py {argv[0]}: error: cannot write to standard output: No space left on device"
    ]


def test_a_full_disk_under_stderr_ends_with_a_non_zero_status_and_no_report(env):
    # A refusal to print (no such letter) whose one line cannot be written: status 1, and the
    # interpreter adds no "Exception ignored" report of its own.
    with open("/dev/full", "w") as full:
        done = manage(["deadletters", "show", "999999"], env, stdout=subprocess.PIPE, stderr=full)
    assert done.returncode == 1 and done.stdout == b""


@pytest.mark.parametrize(
    "argv",
    [["deadletters", "list", "--json", "--limit", "1500"],
     ["deadletters", "export", "--format", "jsonl", "--operator", "chief"]],
    ids=" ".join,
)  # fmt: skip
def test_a_reader_that_leaves_ends_the_output_quietly_with_the_sigpipe_status(env, argv):
    user_with_role("admin", "chief")
    DeadLetter.objects.bulk_create(
        DeadLetterFactory.build(job=None, original_job_id=None, last_error="x" * 200)
        for _ in range(1500)
    )  # ~400 kB: more than a pipe holds, so the command is still writing when the reader goes
    proc = subprocess.Popen(
        [sys.executable, "manage.py", *argv],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline().strip()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert err == b""


class FailingStream(io.StringIO):
    """A stream whose device fails (EIO) after the first line."""

    def write(self, text):
        if self.getvalue().count("\n") >= 1:
            raise OSError(errno.EIO, "Input/output error")
        return super().write(text)


def test_an_io_error_on_stdout_is_one_line_naming_it():
    DeadLetterFactory.create_batch(3)
    err = io.StringIO()
    cmd = command("deadletters", stdout=FailingStream(), stderr=err)
    with pytest.raises(SystemExit) as exit:
        cmd.run_from_argv(["manage.py", "deadletters", "list"])
    assert exit.value.code == 1
    assert err.getvalue() == (
        "manage.py deadletters: error: cannot write to standard output: Input/output error\n"
    )


def test_an_export_to_a_file_on_a_full_disk_is_one_line_and_leaves_no_half_file(
    tmp_path, monkeypatch
):
    user_with_role("admin", "chief")
    DeadLetterFactory.create_batch(3)
    module = sys.modules[type(command("deadletters")).__module__]

    def no_space(text):
        raise OSError(errno.ENOSPC, "No space left")

    def full_disk(path, *args, **kwargs):
        file = open(path, *args, **kwargs)  # noqa: SIM115 - the command closes it
        file.write = no_space
        return file

    monkeypatch.setattr(module, "open", full_disk, raising=False)
    path = tmp_path / "letters.csv"
    args = ("--format", "csv", "--operator", "chief", "--output", str(path))
    result = run("deadletters", "export", *args)
    assert result.code == 1 and not path.exists()
    assert result.err.splitlines() == [
        f"CommandError: Cannot write {path}: No space left; nothing kept"
    ]


def test_json_output_prints_non_ascii_as_itself_and_escapes_control_characters(settings):
    letter = DeadLetterFactory(
        kwargs={"note": "café ☕ Ünïcødé", "password": "hunter2", "ctl": "a\x1b[31m\x85\x7fz\u2028"}
    )
    shown = run("deadletters", "show", str(letter.pk), "--json")
    assert shown.code == 0, shown
    [line] = shown.out.splitlines()  # U+2028 too is escaped: splitlines() would split there
    assert "café ☕ Ünïcødé" in line and '"password": "••••"' in line
    assert "\\u2022" not in line and "\\u00e9" not in line
    assert "a\\u001b[31m\\u0085\\u007fz\\u2028" in line
    assert not {"\x1b", "\x85", "\x7f", "\u2028"} & set(line)
    assert json.loads(line)["payload"]["kwargs"]["ctl"] == "a\x1b[31m\x85\x7fz\u2028"
    text = run("deadletters", "show", str(letter.pk)).out
    assert '"note": "café ☕ Ünïcødé"' in text and '"password": "••••"' in text
    listing = run("deadletters", "list", "--json").out
    assert [row["id"] for row in json.loads(listing)] == [letter.pk]


def test_a_payload_nested_past_the_depth_limit_is_shown_on_one_line_not_a_traceback():
    """A row written by hand, 990 deep (storable_json refuses it): shown, revealed or masked,
    cut at MAX_JSON_DEPTH with a mark (deadletters.redaction's walk), on one line."""
    user_with_role("admin", "chief")
    pk = DeadLetterFactory().pk
    deep = '{"a": ' * 990 + "1" + "}" * 990
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobqueue_deadletter SET kwargs = %s WHERE id = %s", [deep, pk])
    revealed = ("deadletters", "show", str(pk), "--reveal", "--operator", "chief")
    for args in (revealed, ("deadletters", "show", str(pk))):
        shown = run(*args)
        assert shown.code == 0 and "Traceback" not in shown.err, shown.err
        [payload] = [line for line in shown.out.splitlines() if line.startswith("payload: ")]
        assert f"nested deeper than {MAX_JSON_DEPTH} levels: not shown" in payload
        assert MAX_JSON_DEPTH - 2 <= payload.count('{"a": ') <= MAX_JSON_DEPTH
    as_json = run(*revealed, "--json")
    assert as_json.code == 0
    assert json_depth(json.loads(as_json.out)["payload"]) <= MAX_JSON_DEPTH + 1
