"""Faults only PostgreSQL has: terminated backends, table locks, planner changes, restarts."""

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest
from django.db import OperationalError, connection
from django.tasks import task_backends
from django.utils import timezone

from jobqueue.models import Execution, Job, JobState
from tests import tasks
from tests.conftest import needs_direct_session, wait_until
from tests.faults.harness import check_invariants, enqueue_ledger, unfinished


@pytest.fixture(autouse=True)
def postgres_only(transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL fault: run with DATABASE_URL=postgres://…")


def terminate(application_name_like="%") -> int:
    """pg_terminate_backend every other session on the test database matching the name."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name LIKE %s",
            [application_name_like],
        )
        return cursor.fetchone()[0]


def log(proc) -> str:
    return Path(proc.log_path).read_text()


def admin_connection():
    params = connection.get_connection_params()
    params = {k: v for k, v in params.items() if k not in {"cursor_factory", "context"}}
    return psycopg.connect(**params, autocommit=True)


@needs_direct_session("cuts the worker's own backend, found by its application_name")
def test_terminated_heartbeat_connection_stops_the_worker_trusting_its_lease(workers, tmp_path):
    gate = tmp_path / "gate"
    result = tasks.wait_for_file.enqueue(str(gate), key="heartbeat-cut")
    # No prefetch: while its lost handler runs, the first worker has no room to claim it back.
    first = workers.start("--lease", "1", "--poll", "0.05", "--prefetch", "0")
    wait_until(lambda: Path(str(gate) + ".started").exists(), message="handler start")
    # Cut the queue connection again and again until the lease has run out.
    while not (
        Job.objects.get(pk=result.id).locked_until < timezone.now()
        and "event=database_error" in log(first)
    ):
        terminate("redrive-worker%")
        time.sleep(0.05)
    Path(str(gate) + ".started").unlink()
    second = workers.start("--lease", "30", "--poll", "0.05")
    wait_until(lambda: Path(str(gate) + ".started").exists(), message="second handler start")
    gate.write_text("go")
    wait_until(lambda: Job.objects.get(pk=result.id).state == JobState.DONE, message="done")
    wait_until(lambda: "event=lease_lost" in log(first), timeout=30, message="first lets go")
    for proc in (first, second):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    job = Job.objects.get(pk=result.id)
    assert job.attempts == 2 and job.worker_ids[-1] != job.worker_ids[0]
    assert "event=succeeded" not in log(first)  # it never acknowledged the expired attempt
    assert Execution.objects.filter(idempotency_key="effect:heartbeat-cut").count() == 1


def test_terminating_every_worker_connection_under_load(workers):
    ids = enqueue_ledger(1000, "cut", work_ms=5)
    procs = [
        workers.start("--concurrency", "2", "--lease", "2", "--poll", "0.05") for _ in range(2)
    ]
    wait_until(lambda: all("event=claimed" in log(p) for p in procs), message="workers busy")
    rounds = 0
    while unfinished(ids) and rounds < 60:
        terminate()
        rounds += 1
        time.sleep(0.5)  # the fault schedule: a cut every half second
    wait_until(lambda: unfinished(ids) == 0, timeout=240, interval=0.2, message="drained")
    assert all(p.poll() is None for p in procs), "a worker crashed instead of reconnecting"
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in procs] == [0, 0]
    check_invariants(ids, log_paths=[p.log_path for p in procs], sink_lines=workers.sink_lines())
    for proc in procs:
        # Bounded reconnects: a few lines per cut, not a flood.
        assert log(proc).count("event=database_error") <= 4 * rounds + 4


def terminate_the_workers_connections() -> int:
    """The workers' queue connections, whatever each is doing, and the handlers' sessions idle
    for 20 to 40 ms: tasks.effect_first works 100 ms after its effect, so these handlers are in
    that work and their next job starts 60 ms or more after the cut. Not a handler's session in
    a statement or a transaction, nor one about to start one: that cut is the handler's
    database error, which costs its attempt by design (README, Guarantees)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend' "
            "AND (application_name LIKE 'redrive-worker%%' OR (state = 'idle' AND "
            "state_change BETWEEN clock_timestamp() - interval '40 milliseconds' "
            "AND clock_timestamp() - interval '20 milliseconds'))"
        )
        return cursor.fetchone()[0]


@needs_direct_session("finds the workers' queue connections by their application_name")
def test_a_flapping_database_costs_no_attempt_and_dead_letters_no_healthy_job(workers):
    """Issue 33's chaos run: each terminated connection cost about 12 attempts, so a database
    flapping long enough would dead-letter healthy jobs. A cut of the queue's connection never
    costs one (a claim or an outcome is tried again); a handler's connection ended between jobs
    is reopened before the next job. Jobs of two attempts: one lost, and a job is dead."""
    results = task_backends["default"].enqueue_many(
        tasks.effect_first, [((f"flap-{i}",), {"work_ms": 100}) for i in range(1600)]
    )
    ids = [int(r.id) for r in results]
    args = ("--concurrency", "4", "--lease", "2", "--poll", "0.05")
    procs = [workers.start(*args) for _ in range(2)]
    wait_until(lambda: all("event=claimed" in log(p) for p in procs), message="workers busy")
    cuts = 0
    while unfinished(ids) and cuts < 16:
        if terminate_the_workers_connections():
            cuts += 1
        time.sleep(1.5)  # the fault schedule: a cut every second and a half
    assert cuts >= 8, "the load should last through the flapping"
    wait_until(lambda: unfinished(ids) == 0, timeout=240, interval=0.2, message="drained")
    assert all(p.poll() is None for p in procs), "a worker crashed instead of reconnecting"
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in procs] == [0, 0]
    states = check_invariants(
        ids, log_paths=[p.log_path for p in procs], sink_lines=workers.sink_lines()
    )
    lost = sum(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) - len(ids)
    assert states[JobState.DONE] == len(ids), "a healthy job was dead-lettered"
    # Before, each cut cost an attempt per handler whose connection it ended. A backend the
    # loaded machine lets run only after the next job's check still costs one (1 in 16 cuts,
    # once in three runs under -n 4).
    assert lost * 4 < cuts, f"{lost} attempts lost to {cuts} cuts"
    assert sum(log(p).count("event=connection_reopened") for p in procs) > 0


@needs_direct_session("REDRIVE_LOCK_TIMEOUT is a session setting (README: on the role)")
def test_a_table_lock_times_claims_out_and_they_resume_without_duplicates(workers):
    ids = enqueue_ledger(300, "lock", work_ms=1)
    proc = workers.start("--poll", "0.05", env={"REDRIVE_LOCK_TIMEOUT": "0.3"})
    wait_until(lambda: "event=claimed" in log(proc), message="worker busy")
    with admin_connection() as admin, admin.transaction():
        admin.execute("LOCK TABLE jobqueue_job IN ACCESS EXCLUSIVE MODE")
        wait_until(lambda: "lock timeout" in log(proc), message="a claim timing out")
    wait_until(lambda: unfinished(ids) == 0, timeout=120, message="drained after the lock")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    check_invariants(ids, log_paths=[proc.log_path], sink_lines=workers.sink_lines())
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}


@needs_direct_session("its off-plan half sets PGOPTIONS, which PgBouncer does not pass on")
def test_claims_are_exclusive_and_bounded_even_off_the_usual_plan(workers):
    ids = enqueue_ledger(20_000, "excl", work_ms=0)
    usual = {"REDRIVE_LOG_LEVEL": "INFO"}
    off_plan = {**usual, "PGOPTIONS": "-c enable_hashjoin=off -c enable_mergejoin=off"}
    # Half on the usual plan, half pushed off it, all competing for the same rows.
    procs = [
        workers.start("--concurrency", "2", "--prefetch", "30", "--burst", env=env)
        for env in [usual] * 4 + [off_plan] * 4
    ]
    assert [p.wait(timeout=600) for p in procs] == [0] * 8
    assert unfinished(ids) == 0
    jobs = Job.objects.filter(pk__in=ids)
    assert set(jobs.values_list("attempts", flat=True)) == {1}
    assert {len(w) for w in jobs.values_list("worker_ids", flat=True)} == {1}
    batches = [
        (int(n), int(limit))
        for p in procs
        for n, limit in re.findall(r"event=claimed \S+ n=(\d+) limit=(\d+)", log(p))
    ]
    assert sum(n for n, _ in batches) == 20_000
    assert all(n <= limit for n, limit in batches)
    assert len({w[0] for w in jobs.values_list("worker_ids", flat=True)}) > 1


@pytest.mark.serial  # every other test's database goes away with it
@pytest.mark.skipif(not shutil.which("pg_ctlcluster"), reason="needs a local Debian cluster")
def test_postgres_restart_under_load_loses_no_returned_enqueue(workers):
    if not os.environ.get("REDRIVE_FAULTS_RESTART_POSTGRES"):
        pytest.skip(
            "restarts the machine's PostgreSQL: set REDRIVE_FAULTS_RESTART_POSTGRES=1 "
            "(.ci/run does)"
        )
    procs = [workers.start("--concurrency", "2", "--lease", "5", "--poll", "0.1") for _ in range(2)]
    wait_until(lambda: all("event=worker_started" in log(p) for p in procs), message="workers up")
    returned: list[int] = []
    stop = threading.Event()

    def producer():
        from django.db import connections

        while not stop.is_set():
            try:
                returned.append(int(tasks.fault_effect.enqueue(f"restart-{len(returned)}").id))
            except OperationalError:
                connections.close_all()  # the server went away: reconnect and carry on
                time.sleep(0.05)
        connections.close_all()

    thread = threading.Thread(target=producer)
    thread.start()
    wait_until(lambda: len(returned) > 100, message="load before the restart")
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        timeout=120,
    )
    count_at_restart = len(returned)
    wait_until(
        lambda: len(returned) > count_at_restart + 100,
        timeout=60,
        message="enqueues after the restart",
    )
    stop.set()
    thread.join(timeout=30)
    connection.close()
    wait_until(
        lambda: unfinished(returned) == 0,
        timeout=180,
        interval=0.5,
        message="every returned enqueue run",
    )
    assert all(p.poll() is None for p in procs), "workers should resume by themselves"
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    check_invariants(returned, sink_lines=workers.sink_lines())
