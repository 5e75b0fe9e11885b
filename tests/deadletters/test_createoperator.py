"""createoperator's password: asked twice at a terminal (both must match, and pass the
validators), or read from stdin or REDRIVE_OPERATOR_PASSWORD, never needing it on the command
line; and it runs without a SECRET_KEY, as it signs nothing."""

import io
import os
import subprocess
import sys

import pytest
from django.conf import global_settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection

from tests.cli import row_counts, run
from tests.conftest import BASE_DIR, database_url

pytestmark = pytest.mark.django_db

GOOD = "a-long-enough-pass"


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def terminal(monkeypatch):
    """A terminal on stdin whose getpass answers are `answers` (an exception is raised)."""
    monkeypatch.delenv("REDRIVE_OPERATOR_PASSWORD", raising=False)
    monkeypatch.setattr(sys, "stdin", Terminal())
    answers, prompts = [], []

    def getpass(prompt):
        prompts.append(prompt)
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr("getpass.getpass", getpass)
    return answers, prompts


@pytest.fixture
def piped(monkeypatch):
    """stdin is a pipe holding the given text."""
    monkeypatch.delenv("REDRIVE_OPERATOR_PASSWORD", raising=False)

    def pipe(text):
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))

    return pipe


def test_an_asked_password_is_asked_again_until_both_match(terminal):
    answers, prompts = terminal
    answers += ["first-long-pass", "other-long-pass", GOOD, GOOD]
    result = run("createoperator", "vic", "--role", "viewer")
    assert result.code == 0, result
    assert prompts == ["Password for vic: ", "Password (again): "] * 2
    assert "The passwords did not match." in result.err
    assert User.objects.get(username="vic").check_password(GOOD)


def test_an_asked_password_must_pass_the_validators(terminal):
    answers, _ = terminal
    answers += ["short", "short", GOOD, GOOD]
    result = run("createoperator", "vic", "--role", "viewer")
    assert result.code == 0, result
    assert "This password is too short." in result.err
    assert User.objects.get(username="vic").check_password(GOOD)


@pytest.mark.parametrize("stop", [EOFError(), KeyboardInterrupt()], ids=["ctrl-d", "ctrl-c"])
def test_giving_up_at_the_prompt_writes_nothing(terminal, stop):
    answers, _ = terminal
    answers += [GOOD, stop]
    before = row_counts()
    result = run("createoperator", "vic", "--role", "viewer")
    assert result.refused_cleanly, result
    assert "Cancelled" in result.err
    assert row_counts() == before and not User.objects.filter(username="vic").exists()


def test_the_password_is_read_from_stdin(piped):
    piped(GOOD + "\n")
    result = run("createoperator", "vic", "--role", "viewer", "--password-stdin")
    assert result.code == 0 and result.err == "", result
    assert User.objects.get(username="vic").check_password(GOOD)
    piped("another-long-pass\r\n")  # an existing user's password changes too
    assert run("createoperator", "vic", "--role", "operator", "--password-stdin").code == 0
    assert User.objects.get(username="vic").check_password("another-long-pass")


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "may not be empty"),
        ("\n", "may not be empty"),
        ("short\n", "too short"),
        (f"{GOOD}\nsecond line\n", "reads one line"),
    ],
)
def test_a_bad_password_on_stdin_is_refused_and_writes_nothing(piped, text, says):
    piped(text)
    before = row_counts()
    result = run("createoperator", "vic", "--role", "viewer", "--password-stdin")
    assert result.refused_cleanly, result
    assert says in result.err
    assert row_counts() == before


def test_the_password_once_only(piped):
    piped(GOOD)
    result = run("createoperator", "vic", "--role", "viewer", "--password-stdin", "--password", "x")
    assert result.refused_cleanly and "once" in result.err, result


def test_a_new_users_password_comes_from_the_environment(piped, monkeypatch):
    piped("")
    monkeypatch.setenv("REDRIVE_OPERATOR_PASSWORD", GOOD)
    assert run("createoperator", "vic", "--role", "viewer").code == 0
    assert User.objects.get(username="vic").check_password(GOOD)
    # Only a new user's: a role change leaves an existing password alone.
    monkeypatch.setenv("REDRIVE_OPERATOR_PASSWORD", "another-long-pass")
    assert run("createoperator", "vic", "--role", "operator").code == 0
    assert User.objects.get(username="vic").check_password(GOOD)


def test_without_a_terminal_or_a_password_it_says_how_to_give_one(piped):
    piped("")
    result = run("createoperator", "vic", "--role", "viewer")
    assert result.refused_cleanly, result
    assert "--password-stdin" in result.err and "REDRIVE_OPERATOR_PASSWORD" in result.err


def test_a_password_on_the_command_line_still_works_but_is_warned_of(piped):
    piped("")
    result = run("createoperator", "vic", "--role", "viewer", "--password", GOOD)
    assert result.code == 0, result
    assert "--password is visible to other users" in result.err
    assert User.objects.get(username="vic").check_password(GOOD)
    # From code (the demo's accounts) there is no command line to see it on.
    err = io.StringIO()
    call_command("createoperator", "ada", "--role", "viewer", "--password", GOOD, stderr=err)
    assert err.getvalue() == ""


@pytest.mark.django_db(transaction=True)
def test_it_runs_without_a_secret_key(tmp_path, settings):
    """A checkout after `manage.py demo`: the demo keeps its key in var/, the shell has none;
    createoperator, like enqueue, needs none (the web app and the workers still do)."""
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")},
        "DATABASE_URL": database_url(connection),
        "REDRIVE_VAR_DIR": str(tmp_path),
    }
    (tmp_path / "secret_key").write_text("the-demos-own-key\n")
    made = subprocess.run(
        [sys.executable, "manage.py", "createoperator", "bob", "--role", "viewer",
         "--password-stdin"],
        cwd=BASE_DIR, env=env, input=GOOD + "\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout == "Created viewer bob\n"
    # Hashed by the project's own hasher (this package's tests use a faster one).
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    assert User.objects.get(username="bob").check_password(GOOD)
    worker = subprocess.run(
        [sys.executable, "manage.py", "runworker", "--burst"],
        cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert worker.returncode != 0 and "SECRET_KEY is not set" in worker.stderr
