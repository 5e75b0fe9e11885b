"""`kill -USR1 <pid>` makes a running worker write every thread's stack to its stderr and go on:
how an operator sees where a worker that will not stop, or not progress, is waiting."""

import signal
from pathlib import Path

import pytest

from jobqueue.models import Job, JobState
from tests import tasks
from tests.conftest import wait_until

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals only")


def test_sigusr1_dumps_every_thread_and_the_worker_goes_on(workers):
    proc = workers.start("--poll", "0.05")
    log = Path(proc.log_path)
    # A job done means every thread is up: a handler ran it and the settler recorded it
    # ("worker_started" is logged before the threads start, so a dump then may miss them).
    result = tasks.effect.enqueue("dump:1")
    wait_until(lambda: Job.objects.get(pk=result.id).state == JobState.DONE, timeout=30)
    proc.send_signal(signal.SIGUSR1)
    wait_until(lambda: "Current thread" in log.read_text(), timeout=10)
    dump = log.read_text()
    assert "_handler_loop" in dump and "_settle_loop" in dump  # every thread, by its function
    assert proc.poll() is None  # still running
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "event=worker_stopped" in log.read_text()
