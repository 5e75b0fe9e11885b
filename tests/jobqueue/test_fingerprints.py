"""Error fingerprints (jobqueue.fingerprints): the same cause, one fingerprint; another cause,
another. Pure functions, no database."""

import time

import pytest

from jobqueue.fingerprints import fingerprint, normalized_message, project_frame

TB_DEMO = """Traceback (most recent call last):
  File "/srv/app/jobqueue/worker.py", line 630, in _execute
    value = task.func(*job.args, **job.kwargs)
  File "/srv/app/demo/tasks.py", line {line}, in send_receipt
    raise ConnectionError("down")
  File "/usr/lib/python3.13/socket.py", line 2, in create_connection
    raise err
ConnectionError: down
"""
TB_OTHER_HOST = TB_DEMO.replace("/srv/app/", "/home/deploy/releases/42/")
TB_LIBRARY_ONLY = """Traceback (most recent call last):
  File "/venv/lib/python3.13/site-packages/requests/api.py", line 9, in get
  File "/venv/lib/python3.13/site-packages/requests/sessions.py", line 99, in send
"""


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("order 7 not found", "order 1234 not found"),
        ("user 'bob' missing", 'user "alice" missing'),
        ("timeout after 30.5s", "timeout after 2s"),
        ("at 2026-12-01T01:02:03Z", "at 2025-01-31 23:59:59.123+02:00"),
        (
            "job 6f1c2d3e-1a2b-4c5d-8e9f-0a1b2c3d4e5f died",
            "job 00000000-0000-0000-0000-000000000000 died",
        ),
        ("object at 0x7f3a9c", "object at 0xDEADBEEF"),
        ("digest 3f9a8b7c6d5e4f30 bad", "digest a1b2c3d4e5f60718 bad"),
        ("bounce from ann@example.com", "bounce from bob.smith+x@mail.example.org"),
        ("connect to 10.0.0.1:5432 refused", "connect to 192.168.1.20:6432 refused"),
        ("GET /api/v1/orders?id=9&page=2 failed", "GET /api/v1/orders?id=10 failed"),
        ("tok_9f8e7d declined", "tok_1a2b3c declined"),
        ("at 12:00:01", "at 23:59:59"),
        ("spaces   and\ttabs", "spaces and tabs"),
    ],
)
def test_volatile_parts_do_not_split_one_cause(a, b):
    assert normalized_message(a) == normalized_message(b)
    assert fingerprint("x.E", a, TB_DEMO) == fingerprint("x.E", b, TB_DEMO)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("order not found", "card declined"),
        ("receipt service down", "ledger service down"),
        ("api v1 refused", "api v2 refused"),  # a version is part of the word, not a count
    ],
)
def test_different_messages_are_different_causes(a, b):
    assert fingerprint("x.E", a, TB_DEMO) != fingerprint("x.E", b, TB_DEMO)


def test_the_class_and_the_frame_in_our_code_are_part_of_the_cause():
    tb = TB_DEMO.format(line=20)
    base = fingerprint("builtins.ConnectionError", "down", tb)
    assert fingerprint("builtins.TimeoutError", "down", tb) != base
    elsewhere = tb.replace("send_receipt", "notify_webhook")
    assert fingerprint("builtins.ConnectionError", "down", elsewhere) != base
    # A deploy that moves the line or the directory is the same cause.
    assert fingerprint("builtins.ConnectionError", "down", TB_DEMO.format(line=31)) == base
    assert fingerprint("builtins.ConnectionError", "down", TB_OTHER_HOST.format(line=20)) == base


def test_the_innermost_project_frame_skips_the_standard_library_and_packages():
    assert project_frame(TB_DEMO.format(line=20)) == "demo/tasks.py:send_receipt"
    assert project_frame(TB_LIBRARY_ONLY) == "requests/sessions.py:send"  # no frame of ours
    assert project_frame("") == ""


def test_a_fingerprint_is_sixteen_hex_characters_for_any_text():
    for message in ("", "\x00\ud800 odd", "x" * 100_000):
        value = fingerprint("e", message, "not a traceback")
        assert len(value) == 16 and int(value, 16) >= 0


TB_BLANK_LINE_BETWEEN_FRAMES = """Traceback (most recent call last):
  File "/srv/app/jobqueue/worker.py", line 630, in _execute
    value = task.func(*job.args, **job.kwargs)

  File "/srv/app/demo/tasks.py", line 12, in send_receipt
    raise ConnectionError("down")
ConnectionError: down
"""


def test_a_traceback_of_blank_lines_is_fingerprinted_in_linear_time():
    """`^\\s*File` under re.M let \\s* run over every following newline from every line start:
    quadratic in the traceback, ten seconds for a 64,000-character one (an exception message of
    blank lines), inside the transaction that buries the job. Kept to spaces and tabs."""
    for hostile in ("\n" * 64_000, " \n" * 32_000):
        started = time.perf_counter()
        fingerprint("builtins.ValueError", "blank", hostile)
        assert time.perf_counter() - started < 1.0
    # Real tracebacks read as before, a blank line between frames included.
    assert project_frame(TB_BLANK_LINE_BETWEEN_FRAMES) == "demo/tasks.py:send_receipt"
