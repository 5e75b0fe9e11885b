"""Through PgBouncer in transaction pooling mode (.ci/pgbouncer.sh starts one on 127.0.0.1:6433):
real `runworker` processes claim, heartbeat, acknowledge, retry, dead-letter and carry out a
background replay run with no session state (REDRIVE["POOLER"] = "transaction": no prepared
statements, no session settings); the wake-up LISTEN goes over a direct connection
(REDRIVE["LISTEN_DSN"]), and without one the worker polls.

PostgreSQL only. Without PgBouncer these tests skip, saying how to run them; with
REDRIVE_REQUIRE_PGBOUNCER=1 (CI) a missing one fails instead.
"""

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from django.db import connection

from deadletters import services
from deadletters.models import ReplayRun
from jobqueue.models import DeadLetter, DeadLetterState, Job, JobState
from tests import tasks
from tests.conftest import Processes, database_url, needs_direct_session, wait_until
from tests.factories import UserFactory

PORT = int(os.environ.get("REDRIVE_PGBOUNCER_PORT", "6433"))

pytestmark = [
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
    # The pooler pass already runs every test through PgBouncer; these put it in front of a
    # direct test database themselves and KILL its connections to that database at the end.
    needs_direct_session("puts its own PgBouncer before the direct test database"),
    pytest.mark.django_db(transaction=True),
]


def reachable() -> bool:
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
        return True
    except OSError:
        return False


def admin(command: str) -> None:
    """A PgBouncer console command (simple query protocol: psql)."""
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", str(PORT), "-U", "postgres", "pgbouncer", "-c", command],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def bounced(tmp_path, transactional_db):
    """Workers whose database connections go through PgBouncer."""
    if not reachable():
        message = f"no PgBouncer on 127.0.0.1:{PORT}: run .ci/pgbouncer.sh"
        if os.environ.get("REDRIVE_REQUIRE_PGBOUNCER"):
            pytest.fail(message)
        pytest.skip(message)
    direct = database_url(connection)
    host_port = f"{connection.settings_dict.get('HOST') or '127.0.0.1'}:"
    through = direct.replace(host_port + str(connection.settings_dict.get("PORT") or 5432),
                             f"127.0.0.1:{PORT}")  # fmt: skip
    pool = Processes(
        tmp_path,
        "runworker",
        env={"DATABASE_URL": through, "REDRIVE_POOLER": "transaction"},
        log_prefix="bounced",
    )
    pool.direct = direct
    yield pool
    pool.stop_all()
    # PgBouncer keeps server connections to the test database open: close them, so the test
    # database can be dropped at the end of the session.
    name = connection.settings_dict["NAME"]
    admin(f"KILL {name}")
    admin(f"RESUME {name}")


def listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%'")
        return cursor.fetchone()[0] > 0


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def test_workers_through_the_pooler_run_retry_and_dead_letter_jobs(bounced):
    ok = [tasks.noop.enqueue(n) for n in range(200)]
    dying = tasks.permanent.enqueue("refused through the pooler")
    workers = [bounced.start("--poll", "0.1", "--lease", "2") for _ in range(2)]
    for proc in workers:  # both running (signal handlers installed) before any is stopped
        wait_until(
            lambda p=proc: "event=worker_started" in Path(p.log_path).read_text(), timeout=60
        )
    wait_until(
        lambda: (
            Job.objects.filter(state=JobState.DONE).count() == 200
            and DeadLetter.objects.filter(job_id=dying.id).exists()
        ),
        timeout=90,
        message="200 jobs done and one dead letter through PgBouncer",
    )
    for proc in workers:
        stop(proc)
    assert sorted(
        Job.objects.filter(state=JobState.DONE).values_list("return_value", flat=True)
    ) == [n for n in range(200)]
    assert len(ok) == 200
    logs = "".join(Path(p.log_path).read_text() for p in workers)
    assert "prepared statement" not in logs and "event=database_error" not in logs
    assert "event=listener_off reason=pooler" in logs  # no LISTEN_DSN: it polled


def test_a_direct_listen_dsn_wakes_an_idle_worker_behind_the_pooler(bounced):
    # Polling every 60 s: only the LISTEN over the direct DSN can start the job in time.
    worker = bounced.start("--poll", "60", env={"REDRIVE_LISTEN_DSN": bounced.direct})
    wait_until(lambda: "event=worker_started" in Path(worker.log_path).read_text(), timeout=60)
    wait_until(listening, timeout=30, message="the worker's LISTEN on its direct connection")
    result = tasks.noop.enqueue(7)
    wait_until(
        lambda: Job.objects.get(pk=result.id).state == JobState.DONE,
        timeout=20,
        message="the job, woken by NOTIFY through the direct connection",
    )
    stop(worker)
    assert "listener_off" not in Path(worker.log_path).read_text()


def test_a_background_replay_run_is_carried_out_through_the_pooler(bounced):
    dead = [tasks.permanent.enqueue(f"letter {n}") for n in range(5)]
    worker = bounced.start("--poll", "0.1")
    wait_until(
        lambda: DeadLetter.objects.filter(state=DeadLetterState.PENDING).count() == 5,
        timeout=60,
        message="five dead letters",
    )
    operator = UserFactory(username="pooled-operator")
    letters = list(DeadLetter.objects.order_by("pk").values_list("pk", flat=True))
    selection = services.freeze_selection(operator=operator, action="replay", ids=letters)
    run = services.start_run(
        operator=operator, selection=selection, reason="through the pooler", rate=1000
    )
    wait_until(
        lambda: ReplayRun.objects.get(pk=run.pk).state == "finished",
        timeout=60,
        message="the replay run, carried out by the worker's runner jobs",
    )
    stop(worker)
    run.refresh_from_db()
    assert (run.done, run.skipped) == (5, 0)
    assert len(dead) == 5
