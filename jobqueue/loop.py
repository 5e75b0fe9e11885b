"""The long-running loops' shared control (worker, relay, runchores): stop and backoff, and
process identity. Their crash drills are jobqueue.faults'."""

import faulthandler
import logging
import os
import signal
import socket
import threading
import uuid

from jobqueue.logfmt import log_line


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
        log_line(
            self._log, logging.WARNING, "database_error", **{self._kind: self._ident},
            error=first_line(exc), retry_in=f"{self._db_backoff:.1f}s",
        )  # fmt: skip
        connections[self.using].close()
        self.wake.wait(self._db_backoff)
        self.wake.clear()
