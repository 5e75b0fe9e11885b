"""The LISTEN thread: woken by a notification, by its connection closing, and by stop()."""

import threading

import psycopg
import pytest
from django.db import connection

from jobqueue.listener import Listener, listen_params
from tests.conftest import needs_direct_session, wait_until

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY is PostgreSQL's"),
    needs_direct_session("a LISTEN needs a session of its own"),
]

CHANNEL = "redrive_listener_test"


@pytest.fixture
def listening(monkeypatch, transactional_db):
    # A sleep far longer than any test: only select() waking it can end a wait in time.
    monkeypatch.setattr(Listener, "IDLE_WAIT", 3600.0)
    wake = threading.Event()
    listener = Listener(listen_params(connection), CHANNEL, wake)
    listener.start()
    assert listener.listening.wait(10), "the listener never listened"
    yield listener, wake
    listener.stop()
    listener.join(timeout=10)


def notify(payload=""):
    with psycopg.connect(**listen_params(connection), autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))


def test_a_notification_wakes_it_without_waiting_out_its_sleep(listening):
    _, wake = listening
    notify("default")
    assert wake.wait(10)


def test_stop_ends_it_at_once_however_long_it_would_sleep(listening):
    listener, _ = listening
    listener.stop()
    listener.join(timeout=10)
    assert not listener.is_alive()  # it used to finish its wait first (a quarter second)


def test_it_listens_again_when_the_server_ends_its_session(listening):
    listener, wake = listening
    [first] = _listener_pids()
    with psycopg.connect(**listen_params(connection), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))
    # The closed connection wakes its select() at once: it connects and LISTENs again.
    wait_until(lambda: _listener_pids() not in ([], [first]), timeout=10, message="LISTEN again")
    wait_until(listener.listening.is_set, timeout=10, message="listening")
    wake.clear()
    notify()
    assert wake.wait(10)


def _listener_pids() -> list[int]:
    with psycopg.connect(**listen_params(connection), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE query = %s", (f"LISTEN {CHANNEL}",)
        ).fetchall()
    return [pid for (pid,) in rows]
