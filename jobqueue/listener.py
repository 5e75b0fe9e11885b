"""Shared pieces of the long-running loops (worker and relay): their stop/backoff control, the
LISTEN thread, logfmt event lines and crash-drill fault points."""

import logging
import os
import re
import signal
import socket
import threading
import uuid

logger = logging.getLogger("jobqueue")


_NEEDS_QUOTES = re.compile(r'[ "=\n]').search


def logfmt(value) -> str:
    """A value for a key=value log line, quoted when it holds spaces, quotes, = or newlines.
    (Runs for every field of every job event: a compiled search, not a Python loop.)"""
    text = value if type(value) is str else str(value)
    if text and _NEEDS_QUOTES(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def log_line(log: logging.Logger, level: int, event: str, **fields):
    """One logfmt line, greppable and parseable: event=… key=value …"""
    if log.isEnabledFor(level):
        log.log(level, " ".join(f"{k}={logfmt(v)}" for k, v in {"event": event, **fields}.items()))


def show_event_lines(level: str | int | None = None) -> logging.Logger:
    """Make the worker's and relay's event lines visible, as other queues' worker commands do.

    A host that configured logging for `jobqueue` (or the root logger) keeps its configuration,
    except for an explicit `level` (the commands' --log-level). Otherwise, as under Django's
    default LOGGING, lines go to stderr at INFO: a worker whose events vanish is a silent
    failure."""
    if level is not None and not isinstance(level, int):
        level = logging.getLevelNamesMapping()[str(level).upper()]
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    if level is not None:
        logger.setLevel(level)
    return logger


def add_log_level_argument(parser):
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        default=None,
        help="Level of the event lines (default INFO, or what the project's LOGGING sets).",
    )


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

    def __init__(self, variable: str, points: set[str], who: str):
        self.chosen = os.environ.get(variable, "")
        self.who = who
        if self.chosen and self.chosen not in points:
            raise RuntimeError(f"{variable} must be one of {sorted(points)}, not {self.chosen!r}")

    def __call__(self, name: str):
        if name == self.chosen:
            os.write(2, f"{self.who}: fault point {name}: SIGKILL\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)


class Listener(threading.Thread):
    """LISTEN on a dedicated autocommit connection and set `wake` on each notification (only
    those whose payload is in `payloads`, if given); polling covers any gap while it reconnects.
    """

    def __init__(self, params, channel: str, wake: threading.Event, payloads=None, name="listener"):
        super().__init__(name=name, daemon=True)
        self.params = {k: v for k, v in params.items() if k not in {"cursor_factory", "context"}}
        self.channel = channel
        self.payloads = set(payloads) if payloads else None
        self.wake = wake
        self._stop_event = threading.Event()
        self.listening = threading.Event()

    def stop(self):
        self._stop_event.set()

    def run(self):
        import psycopg

        backoff = 0.1
        while not self._stop_event.is_set():
            try:
                with psycopg.connect(**self.params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.listening.set()
                    backoff = 0.1
                    while not self._stop_event.is_set():
                        for note in conn.notifies(timeout=0.25):
                            if self.payloads is None or note.payload in self.payloads:
                                self.wake.set()
            except Exception as exc:  # noqa: BLE001 - reconnect; polling covers the gap
                self.listening.clear()
                logger.debug("event=listener_error error=%s", logfmt(exc))
                self._stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
