"""The LISTEN thread that wakes a worker or relay when PostgreSQL notifies its channel."""

import logging
import selectors
import socket
import threading
from contextlib import suppress

from jobqueue.logfmt import log_line

logger = logging.getLogger("jobqueue")


def listen_params(connection) -> dict | None:
    """How the wake-up LISTEN connects for `connection`'s database: REDRIVE["LISTEN_DSN"] if set
    (a connection string, or a dict of one per database alias, for queues on several databases);
    else the database's own parameters, except behind a transaction pooler (a LISTEN needs a
    session of its own): None, and the caller polls."""
    from jobqueue.conf import setting

    if connection.vendor != "postgresql":
        return None
    dsn = setting("LISTEN_DSN")
    if isinstance(dsn, dict):
        dsn = dsn.get(connection.alias, "")
    if dsn:
        return {"conninfo": dsn}
    if setting("POOLER") == "transaction":
        log_line(
            logger, logging.INFO, "listener_off", reason="pooler",
            hint="set REDRIVE['LISTEN_DSN'] to a direct connection to be woken at once",
        )  # fmt: skip
        return None
    return connection.get_connection_params()


class Listener(threading.Thread):
    """LISTEN on a dedicated autocommit connection and set `wake` on each notification (only
    those whose payload is in `payloads`, if given); polling covers any gap while it reconnects.

    It sleeps in a selector on its connection and on a socket of its own that stop() writes
    to, so it ends as soon as it is told (a `--burst` worker waited up to a quarter second).
    """

    # The longest it sleeps without looking at its connection: the selector wakes it for a
    # notification, for the server closing the connection and for stop().
    IDLE_WAIT = 1.0

    def __init__(self, params, channel: str, wake: threading.Event, payloads=None, name="listener"):
        super().__init__(name=name, daemon=True)
        self.params = {k: v for k, v in params.items() if k not in {"cursor_factory", "context"}}
        self.channel = channel
        self.payloads = set(payloads) if payloads else None
        self.wake = wake
        self._stop_event = threading.Event()
        self._interrupt, self._interrupter = socket.socketpair()
        self.listening = threading.Event()

    def stop(self):
        self._stop_event.set()
        with suppress(OSError):  # already closed: the thread has ended
            self._interrupter.send(b"\0")

    def run(self):
        try:
            self._listen()
        finally:
            self._interrupt.close()
            self._interrupter.close()

    def _listen(self):
        import psycopg

        backoff = 0.1
        while not self._stop_event.is_set():
            try:
                # A selector, not select(): that refuses descriptors past 1,024, and a worker's
                # tasks may hold that many files and sockets.
                with (
                    psycopg.connect(**self.params, autocommit=True) as conn,
                    selectors.DefaultSelector() as selector,
                ):
                    conn.execute(f"LISTEN {self.channel}")
                    selector.register(conn.fileno(), selectors.EVENT_READ)
                    selector.register(self._interrupt, selectors.EVENT_READ)
                    self.listening.set()
                    backoff = 0.1
                    while not self._stop_event.is_set():
                        # What arrived, and what psycopg kept aside while LISTEN ran; a closed
                        # connection raises here and is opened again.
                        for note in conn.notifies(timeout=0):
                            if self.payloads is None or note.payload in self.payloads:
                                self.wake.set()
                        selector.select(self.IDLE_WAIT)
            except Exception as exc:  # noqa: BLE001 - reconnect; polling covers the gap
                self.listening.clear()
                log_line(logger, logging.DEBUG, "listener_error", error=exc)
                self._stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
