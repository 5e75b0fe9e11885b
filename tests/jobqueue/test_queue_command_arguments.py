"""The queue's commands against hostile arguments: status 0 or 2, one line when refused, never a
traceback, nothing written on refusal. Examples first, then Hypothesis."""

import contextlib
import io
import json
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jobqueue.models import Job, Schedule, Workflow, WorkflowSignal
from tests.cli import command, row_counts, run
from tests.conftest import BASE_DIR
from tests.factories import JobFactory
from tests.properties import examples

pytestmark = pytest.mark.django_db

HUGE = str(2**64)


# --- examples, one per finding -------------------------------------------------------------


@pytest.mark.parametrize("limit", ["-1", "0", HUGE, "²", "1_0", "١٢"])
def test_jobs_refuses_a_limit_out_of_range(limit):
    JobFactory()
    result = run("jobs", "--limit", limit)
    assert result.refused_cleanly, result
    assert "--limit" in result.err


def test_jobs_says_when_more_rows_exist_than_shown():
    JobFactory.create_batch(5)
    result = run("jobs", "--limit", "3")
    lines = result.out.splitlines()
    assert len(lines) == 4 and lines[-1] == "… 2 more; use --limit"
    assert run("jobs", "--limit", "5").out.count("more; use --limit") == 0
    # Under --json stdout stays one JSON document; the note goes to stderr.
    as_json = run("jobs", "--limit", "3", "--json")
    assert len(json.loads(as_json.out)) == 3
    assert as_json.err.strip() == "… 2 more; use --limit"


@pytest.mark.parametrize(
    "expression", ["ready>1.2.3", "ready>²", "ready>", ">1", "ready=>1", "ready>1e999", "ready>-"]
)
def test_queuehealth_refuses_a_malformed_expression(expression):
    result = run("queuehealth", "--fail-if", expression)
    assert result.refused_cleanly, result
    assert "--fail-if" in result.err


@pytest.mark.parametrize(
    ("option", "length"),
    [("--queue", 101), ("--key", 256)],
)
def test_enqueue_refuses_a_string_longer_than_its_column(option, length):
    """A DataError traceback on PostgreSQL, stored whole on SQLite: refused on both now."""
    result = run("enqueue", "tests.tasks.add", "--args", "[1, 2]", option, "k" * length)
    assert result.refused_cleanly, result
    assert f"at most {length - 1} characters" in result.err
    assert not Job.objects.exists()
    # At the column's length it fits.
    assert (
        run("enqueue", "tests.tasks.add", "--args", "[1, 2]", option, "k" * (length - 1)).code == 0
    )


def test_enqueue_refuses_a_task_path_longer_than_its_column():
    result = run("enqueue", "tests.tasks." + "a" * 250)
    assert result.refused_cleanly and "at most 255 characters" in result.err


class RefusedValue(TypeError):
    """What a backend raises for a value it cannot store (engineer D's NUL refusal is one)."""


LONG_INT = "9" * 5000  # past Python's int_max_str_digits (4300): json.loads raises ValueError


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "tests.tasks.add", "--kwargs", f'{{"a": {LONG_INT}, "b": 1}}'],
        ["enqueue", "tests.tasks.add", "--args", f"[{LONG_INT}, 1]"],
        ["workflows", "signal", "1", "go", "--payload", LONG_INT],
    ],
)
def test_json_with_an_integer_too_long_to_read_is_refused(argv):
    before = row_counts()
    result = run(*argv)
    assert result.refused_cleanly, result
    assert row_counts() == before


@pytest.mark.parametrize(
    "path",
    [
        "venv.__main__.main",  # importing it would run the script: here, make virtualenvs
        "tests.tasks.__main__",
        "tests.broken_tasks.on_import.task",  # raises its own error while imported
        "tests.broken_tasks.exits.task",  # sys.exit() while imported
    ],
)
def test_enqueue_refuses_a_task_module_that_cannot_be_imported_cleanly(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("enqueue", path)
    assert result.refused_cleanly, result
    assert "unknown task" in result.err
    assert list(tmp_path.iterdir()) == []  # no script ran
    assert not Job.objects.exists()


def test_enqueue_reports_a_backend_refusal_as_a_usage_error(monkeypatch):
    from jobqueue.backend import DatabaseBackend

    def refuse(self, task, args, kwargs):
        raise RefusedValue("Task arguments may not contain NUL characters")

    monkeypatch.setattr(DatabaseBackend, "enqueue", refuse)
    result = run("enqueue", "tests.tasks.add", "--kwargs", '{"a": "x\\u0000y", "b": 1}')
    assert result.refused_cleanly, result
    assert "may not contain NUL" in result.err


def test_enqueue_reports_a_database_refusal_as_a_usage_error(monkeypatch):
    from django.db import DataError

    from jobqueue import store

    def refuse(*args, **kwargs):
        raise DataError("unsupported Unicode escape sequence")

    monkeypatch.setattr(store, "enqueue", refuse)
    result = run("enqueue", "tests.tasks.add", "--args", "[1, 2]")
    assert result.refused_cleanly, result
    assert "unsupported Unicode escape sequence" in result.err


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("prune", ["--older-than", "1e300"]),
        ("prune", ["--older-than", "nan"]),
        ("prune", ["--counters-older-than", "-1"]),
        ("prune", ["--workers-lost-for", "inf"]),
        ("enqueue", ["tests.tasks.add", "--priority", HUGE]),
        ("enqueue", ["tests.tasks.add", "--queue", ""]),
        ("enqueue", ["tests.tasks.add", "--key", " "]),
        ("enqueue", ["tests.tasks.add", "--kwargs", "[" * 100_000]),
        ("jobs", ["--task", "a\x00b"]),
        ("jobs", ["--task", "\udcff"]),
        ("workflows", ["show", "x"]),
        ("workflows", ["show", HUGE]),
        ("workflows", ["show", "424242"]),
        ("workflows", ["list", "--state", "ready"]),
        ("workflows", ["signal", "1", ""]),
        ("workflows", ["signal", "1", "go", "--payload", "[NaN]"]),
        ("workflows", ["signal", "1", "go", "--payload", "{"]),
    ],
)
def test_other_bad_arguments_are_refused_cleanly(name, argv):
    before = row_counts()
    result = run(name, *argv)
    assert result.refused_cleanly, result
    assert row_counts() == before


def parse_only(name, argv):
    """The worker and the relay run forever: only their parsing is exercised."""
    parser = command(name).create_parser("manage.py", name)
    parser.called_from_command_line = True
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return parser.parse_args(argv), ""
        except SystemExit as exit:
            assert exit.code == 2
            assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
            return None, err.getvalue()


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("runworker", ["--lease", "nan"]),
        ("runworker", ["--lease", "1e300"]),
        ("runworker", ["--poll", "inf"]),
        ("runworker", ["--poll", "0"]),
        ("runworker", ["--grace", "-1"]),
        ("runworker", ["--grace", "nan"]),
        ("runworker", ["--concurrency", "100000000"]),
        ("runworker", ["--prefetch", HUGE]),
        ("runworker", ["--max-jobs", HUGE]),
        ("runworker", ["--id", "w" * 300]),
        ("runworker", ["--queue", "q" * 101]),
        ("runrelay", ["--batch", HUGE]),
        ("runrelay", ["--lease", "inf"]),
        ("runrelay", ["--poll", "-1"]),
        ("runrelay", ["--id", ""]),
    ],
)
def test_worker_and_relay_options_out_of_range_are_refused_before_starting(name, argv):
    parsed, err = parse_only(name, argv)  # (accepted, they would run forever)
    assert parsed is None and argv[0] in err


def test_call_command_reports_argument_errors_with_status_2_too():
    with pytest.raises(CommandError) as info:
        call_command("jobs", "--limit", "-1")
    assert info.value.returncode == 2


def manage(*argv, env=None):
    return subprocess.Popen(
        [sys.executable, "manage.py", *argv],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_jobs_piped_into_head_ends_quietly(workers):
    """`jobs | head -1`: the reader leaves after one line; the rest of the listing (larger than
    the pipe holds, so the command is still writing) must end without a traceback."""
    now = timezone.now()
    Job.objects.bulk_create(
        Job(task_path="tests.tasks.noop", args=[], kwargs={}, run_after=now, enqueued_at=now)
        for _ in range(3000)
    )
    proc = manage("jobs", "--limit", "3000", env=workers.env)
    assert proc.stdout.readline().strip()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141, err  # what a shell shows for SIGPIPE
    assert err == ""


def test_a_refusal_from_the_shell_is_one_line_without_traceback(workers):
    proc = manage("queuehealth", "--fail-if", "ready>1.2.3", env=workers.env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


# --- Hypothesis ------------------------------------------------------------------------------

INTEGERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["²", "١٢", "１２", "1_000", " 5", "+5", "-0", "0x10", "1e3", "9" * 5000]),  # noqa: RUF001
)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e-300", "1e300", "1.2.3", ".5", "5.", "٣", "1e"]),
)
TEXTS = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(codec=None, categories=None), max_size=8),  # surrogates too
    st.sampled_from(["", " ", "a\x00b", "\udcff", "x" * 101, "x" * 256, "x" * 5000, "-", "--"]),
)
JSONS = st.one_of(
    st.sampled_from(
        [
            '{"a": "x\\u0000y"}',
            '{"a": 1, "b": 2}',
            "[1, 2]",
            "[]",
            "{}",
            "[1]",
            "[NaN, 1]",
            "[1e999, 1]",
            "[" * 5000,
            "[" * 500 + "]" * 500,
            "{",
            "null",
            '"x"',
            '{"a": "\\ud800", "b": 1}',
        ]
    ),
    TEXTS,
)
EXPRESSIONS = st.one_of(
    st.tuples(
        st.sampled_from(["ready", "lost_workers", "oldest_ready_age", "nope", "READY", ""]),
        st.sampled_from([">", ">=", "<", "<=", "==", "=", "=>", "!"]),
        st.one_of(INTEGERS, NUMBERS),
    ).map("".join),
    TEXTS,
)


def options(spec: dict, positionals=None):
    """Argument lists: positionals, then options drawn (and repeated) from `spec`."""
    positionals = positionals if positionals is not None else st.just([])
    pairs = st.lists(
        st.sampled_from(sorted(spec)).flatmap(
            lambda flag: spec[flag].map(lambda v, flag=flag: [flag] if v is None else [flag, v])
        ),
        max_size=4,
    )
    return st.tuples(positionals, pairs).map(lambda t: [*t[0], *(a for p in t[1] for a in p)])


FLAG = st.none()
HYPOTHESIS = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def check(name, argv, *, allowed=(0, 2)):
    before = row_counts()
    result = run(name, *argv)
    assert result.code in allowed, result
    assert "Traceback" not in result.err, result.err
    event(f"exit {result.code}")  # --hypothesis-show-statistics: how many got through
    if result.code == 2:
        assert result.refused_cleanly, result
        assert row_counts() == before, argv
    return result


@HYPOTHESIS
@given(
    options(
        {"--state": st.one_of(st.sampled_from(["ready", "dead"]), TEXTS), "--task": TEXTS,
         "--limit": INTEGERS, "--json": FLAG}
    )
)  # fmt: skip
def test_jobs_arguments(argv):
    check("jobs", argv)


@HYPOTHESIS
@given(
    options(
        {"--json": FLAG},
        positionals=st.one_of(st.sampled_from(["1", "2"]), INTEGERS, TEXTS).map(
            lambda i: ["show", i]
        ),
    )
)
def test_jobs_show_arguments(argv):
    while Job.objects.count() < 2:
        JobFactory()
    check("jobs", argv)


@HYPOTHESIS
@given(
    options(
        {"--json": FLAG, "--runs": INTEGERS},
        positionals=st.one_of(st.just("nightly"), TEXTS).map(lambda n: ["show", n]),
    )
)
def test_schedules_show_arguments(argv):
    now = timezone.now()
    Schedule.objects.get_or_create(
        name="nightly",
        defaults={
            "task_path": "tests.tasks.noop",
            "cron": "0 3 * * *",
            "next_run_at": now,
            "created_at": now,
            "updated_at": now,
        },
    )
    check("schedules", argv)


@HYPOTHESIS
@given(
    options(
        {"--args": JSONS, "--kwargs": JSONS, "--key": TEXTS, "--queue": TEXTS,
         "--priority": INTEGERS, "--delay": NUMBERS},
        positionals=st.one_of(
            st.just(["tests.tasks.add"]),
            st.just(["tests.tasks.noop"]),
            TEXTS.map(lambda t: ["tests.tasks." + t]),
            TEXTS.map(lambda t: [t]).filter(lambda p: not p[0].startswith("-")),
        ),
    )
)  # fmt: skip
def test_enqueue_arguments(transactional_db, argv):
    # (autocommit as in a shell: on PostgreSQL a payload jsonb refuses would otherwise abort the
    # test's own transaction, not just the command's insert)
    check("enqueue", argv)


@HYPOTHESIS
@given(options({"--json": FLAG, "--fail-if": EXPRESSIONS}))
def test_queuehealth_arguments(argv):
    check("queuehealth", argv, allowed=(0, 1, 2))  # 1: a threshold crossed


@HYPOTHESIS
@given(
    st.one_of(
        st.sampled_from([["list"], ["list", "--json"], [], ["pause"], ["resume", "mail"]]),
        st.tuples(
            st.sampled_from(["pause", "resume", "list", "explode"]),
            TEXTS,
            st.sampled_from(["--reason", "--operator", "--json"]),
            TEXTS,
            st.sampled_from(["--operator", "--reason"]),
            st.one_of(st.just("queue-admin"), TEXTS),
        ).map(list),
    )
)
def test_queues_arguments(argv):
    from django.contrib.auth.models import Permission

    from tests.factories import UserFactory

    admin, _ = UserFactory._meta.model.objects.get_or_create(username="queue-admin")
    # What `act queue.pause|resume` checks (the queues command is its alias).
    admin.user_permissions.add(
        Permission.objects.get(codename="pause_queue"),
        Permission.objects.get(codename="view_deadletter", content_type__app_label="deadletters"),
    )
    before = row_counts()
    result = run("queues", *argv)
    assert result.code in (0, 2), result
    assert "Traceback" not in result.err, result.err
    if result.code == 2:
        assert result.refused_cleanly, result
        assert row_counts() == before, argv


@HYPOTHESIS
@given(
    options(
        {"--older-than": NUMBERS, "--counters-older-than": NUMBERS,
         "--workers-lost-for": st.one_of(NUMBERS, INTEGERS), "--json": FLAG}
    )
)  # fmt: skip
def test_prune_arguments(argv):
    check("prune", argv)


@HYPOTHESIS
@given(
    options(
        {"--queue": TEXTS, "--concurrency": INTEGERS, "--prefetch": INTEGERS,
         "--max-jobs": INTEGERS, "--lease": NUMBERS, "--grace": NUMBERS, "--poll": NUMBERS,
         "--id": TEXTS, "--burst": FLAG}
    )
)  # fmt: skip
def test_runworker_arguments(argv):
    parsed, _ = parse_only("runworker", argv)
    if parsed is not None:
        assert 1 <= parsed.concurrency <= 1000
        for value in (parsed.lease, parsed.poll):
            assert value is None or 0 < value < 10**6
        assert 0 <= parsed.grace <= 86400
        assert parsed.worker_id is None or 0 < len(parsed.worker_id) <= 249


@HYPOTHESIS
@given(
    options(
        {"--batch": INTEGERS, "--lease": NUMBERS, "--poll": NUMBERS, "--id": TEXTS,
         "--burst": FLAG}
    )
)  # fmt: skip
def test_runrelay_arguments(argv):
    parsed, _ = parse_only("runrelay", argv)
    if parsed is not None:
        assert parsed.batch is None or 1 <= parsed.batch <= 10_000


WORKFLOW_IDS = st.one_of(st.sampled_from(["1", "2"]), INTEGERS, TEXTS)


@HYPOTHESIS
@given(
    st.one_of(
        options(
            {"--state": st.one_of(st.sampled_from(["waiting", "dead"]), TEXTS),
             "--limit": INTEGERS, "--json": FLAG},
            positionals=st.just(["list"]),
        ),
        options(
            {"--json": FLAG, "--results": FLAG},
            positionals=WORKFLOW_IDS.map(lambda i: ["show", i]),
        ),
        options(
            {"--payload": JSONS, "--json": FLAG},
            positionals=st.tuples(WORKFLOW_IDS, st.one_of(st.just("go"), TEXTS)).map(
                lambda t: ["signal", *t]
            ),
        ),
        st.lists(TEXTS, max_size=3).map(lambda rest: ["signal", *rest]),
    )
)  # fmt: skip
def test_workflows_arguments(argv):
    now = timezone.now()
    Workflow.objects.get_or_create(
        pk=1, defaults={"task_path": "tests.tasks.noop", "started_at": now, "updated_at": now}
    )
    signals = WorkflowSignal.objects.count()
    result = check("workflows", argv)
    if result.code == 2:
        assert WorkflowSignal.objects.count() == signals, argv


def test_enqueue_of_a_payload_the_database_cannot_store_is_refused_cleanly(transactional_db):
    # (transactional_db: autocommit as in a shell, so a refused insert aborts no test block)
    """NUL in a payload: PostgreSQL's jsonb refused it with a DataError traceback and SQLite
    stored it; the backend now refuses it on both, and the command exits 2 with its message."""
    result = run("enqueue", "tests.tasks.add", "--kwargs", '{"a": "x\\u0000y", "b": 1}')
    assert result.refused_cleanly, result
    assert not Job.objects.exists()
