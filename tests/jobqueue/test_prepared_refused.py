"""A transaction pooler REDRIVE["POOLER"] does not name hands our connection's session to other
clients: a statement name we prepare is already there, or one we prepared is gone. The first
such error says what to set and turns preparing off for the process, so the retry succeeds
instead of failing the same way forever (a worker looped on it every few seconds)."""

import pytest
from django.db import DatabaseError, connection
from django.tasks import task_backends

from jobqueue.models import Job
from jobqueue.store import postgresql
from tests import tasks
from tests.conftest import needs_direct_session

pytestmark = [
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
    # Behind the pooler its PREPAREs would stay on a server connection other tests then get.
    needs_direct_session("prepares statements on its own session"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def foreign_prepared_statements(monkeypatch, settings):
    """The session already holds the statement names psycopg would give ours, as a pooled
    server connection that another client prepared on does."""
    settings.REDRIVE = {**settings.REDRIVE, "POOLER": "", "PREPARED_STATEMENTS": True}
    monkeypatch.setattr(postgresql, "_prepared_refused", False)
    connection.close()
    connection.ensure_connection()
    with connection.cursor() as cursor:
        for n in range(100):
            cursor.execute(f"PREPARE _pg3_{n} AS SELECT {n}")
    yield
    connection.close()  # a fresh session for the next test: these names die with this one


def test_a_clash_says_set_pooler_and_the_retry_runs_unprepared(foreign_prepared_statements, caplog):
    with pytest.raises(DatabaseError):
        tasks.noop.enqueue()
    assert "event=prepared_statements_off" in caplog.text
    assert "REDRIVE['POOLER']" in caplog.text
    assert not Job.objects.exists()
    result = tasks.noop.enqueue()  # the retry: unprepared now
    assert Job.objects.filter(pk=result.id).exists()
    assert caplog.text.count("event=prepared_statements_off") == 1


def test_a_bulk_enqueue_clash_turns_preparing_off_too(foreign_prepared_statements, caplog):
    calls = [((n,), {}) for n in range(3 * postgresql.PostgreSQL.SEND_CHUNK)]
    with pytest.raises(DatabaseError):
        task_backends["default"].enqueue_many(tasks.noop, calls)
    assert "event=prepared_statements_off" in caplog.text
    assert not Job.objects.exists()
    assert len(task_backends["default"].enqueue_many(tasks.noop, calls)) == len(calls)
    assert Job.objects.count() == len(calls)
