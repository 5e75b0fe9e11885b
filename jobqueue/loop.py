"""The long-running loops' shared control (worker and relay): stop and backoff, process
identity, and crash-drill fault points."""

import faulthandler
import logging
import os
import signal
import socket
import threading
import uuid

from jobqueue.logfmt import logfmt


def first_line(exc: BaseException) -> str:
    """An exception as one log field: database errors carry multi-line details."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def next_backoff(previous: float) -> float:
    """0.1 s, doubling, at most 5 s: quick after a blip, no crash loop through an outage."""
    return min(max(previous * 2, 0.1), 5.0)


def process_id() -> str:
    """host:pid:random, so a restarted process on the same host and pid is a new owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Loop:
    """Control shared by the worker and the relay: a wake event, a first SIGTERM/SIGINT that
    stops the loop gracefully and a second that exits at once, and a bounded backoff with a
    reconnect while the database is away. Subclasses keep `stats.db_errors`."""

    def __init__(self, *, who: str, kind: str, ident: str, using: str, log: logging.Logger):
        self._who, self._kind, self._ident, self._log = who, kind, ident, log
        self.using = using
        self.wake = threading.Event()
        self.stopping = False
        self.signals = 0
        self._db_backoff = 0.0

    def install_signal_handlers(self):
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        # `kill -USR1 <pid>`: every thread's stack to stderr, the process going on as it was:
        # where a worker that will not stop, or not progress, is waiting (faulthandler writes
        # from C, so it answers even while a thread holds the GIL or a lock).
        if hasattr(signal, "SIGUSR1"):
            faulthandler.register(signal.SIGUSR1, all_threads=True)

    def _on_signal(self, signum, frame):
        self.signals += 1
        if self.signals > 1:
            # Leases left behind expire and are swept; nothing is lost, only delayed.
            os.write(2, f"{self._who}: second signal, exiting now\n".encode())
            os._exit(1)
        # os.write, not logging: a handler can interrupt code that holds the logging lock.
        os.write(
            2,
            f"{self._who}: {signal.Signals(signum).name} received, stopping; "
            f"a second signal exits at once\n".encode(),
        )
        self.stop()

    def stop(self):
        self.stopping = True
        self.wake.set()

    def _database_trouble(self, exc):
        """Back off (bounded) and reconnect instead of crash-looping while the database is away."""
        from django.db import connections

        self.stats.db_errors += 1
        self._db_backoff = next_backoff(self._db_backoff)
        self._log.warning(
            "event=database_error %s=%s error=%s retry_in=%.1fs",
            self._kind,
            self._ident,
            logfmt(first_line(exc)),
            self._db_backoff,
        )
        connections[self.using].close()
        self.wake.wait(self._db_backoff)
        self.wake.clear()


class FaultPoints:
    """Crash drills: the environment variable names one point where the process SIGKILLs
    itself, so tests and operators can rehearse recovery with real processes."""

    def __init__(self, variable: str, points: set[str], who: str, *, qualified: bool = False):
        """`qualified`: the variable names a point and what it applies to, "point:name"
        (a workflow's step), so a drill can stop at one step of many."""
        self.chosen = os.environ.get(variable, "")
        self.who = who
        point = self.chosen.partition(":")[0] if qualified else self.chosen
        if self.chosen and (point not in points or (qualified and ":" not in self.chosen)):
            form = "<point>:<name>, <point> one of " if qualified else ""
            raise RuntimeError(f"{variable} must be {form}{sorted(points)}, not {self.chosen!r}")

    def __call__(self, name: str, qualifier: str | None = None):
        if self.chosen and self.chosen == (name if qualifier is None else f"{name}:{qualifier}"):
            os.write(2, f"{self.who}: fault point {self.chosen}: SIGKILL\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)


# JOBQUEUE_FAULT=after_claim|after_effect|after_ack|heartbeat|in_tick: a worker SIGKILLs itself
# at that point (in_tick: a periodic job's tick enqueued by the chores, its transaction not yet
# committed). Here, not in the worker, because the worker and its chores (jobqueue.chores) share
# the one variable.
worker_fault_point = FaultPoints(
    "JOBQUEUE_FAULT",
    {"after_claim", "after_effect", "after_ack", "heartbeat", "in_tick"},
    "jobqueue",
)
