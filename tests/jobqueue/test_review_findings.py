"""Review findings (issue 18 triage) in jobqueue code, each pinned by a test."""

import time

from jobqueue.fingerprints import fingerprint, project_frame

TB = """Traceback (most recent call last):
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
    assert project_frame(TB) == "demo/tasks.py:send_receipt"
