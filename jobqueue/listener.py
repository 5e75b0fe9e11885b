"""Shared pieces of the long-running loops (worker and relay): the LISTEN thread, logfmt event
lines and crash-drill fault points."""

import logging
import os
import re
import signal
import threading

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
