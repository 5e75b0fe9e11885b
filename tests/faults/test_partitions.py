"""Real network partitions between hosts: worker groups in Linux network namespaces
(tests/faults/netns.py), PostgreSQL reachable from each over its own veth link, one link taken
down while the workers are busy.

A partition longer than the lease: the cut-off host's jobs are taken over by the other host
once the lease runs out, the health data shows the cut-off worker lost, and when the link comes
back its late acknowledgements are refused by the lease token (event=lease_lost) and it shows
alive again. A partition shorter than the lease: the worker carries on, nothing runs twice.

PostgreSQL only (SQLite is one host's file); needs root and iproute2, else skips
(REDRIVE_REQUIRE_NETNS=1: fails instead).
"""

import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from jobqueue.health import snapshot
from jobqueue.models import Job, JobState
from tests.conftest import needs_direct_session, wait_until
from tests.faults.harness import check_invariants, enqueue_ledger, unfinished
from tests.faults.netns import HostProcesses, Hosts, require_netns

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    # quiet() finds a host's sessions by client_port; behind PgBouncer they are the pooler's.
    needs_direct_session("tells a host's backends by their client_port in pg_stat_activity"),
]

LOST_AFTER = 7.0  # health: seconds without a worker-record refresh (every 5 s) before "lost"
LEASE_LOST = re.compile(r"event=lease_lost job_id=(\d+) .*during=(\w+)")


@pytest.fixture
def hosts(transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("a partition between hosts needs PostgreSQL: SQLite is one host's file")
    require_netns()
    sd = connection.settings_dict
    if (sd.get("HOST") or "").startswith("/"):
        pytest.skip("the test database is on a Unix socket: the forwarder needs TCP")
    machine = Hosts(("a", "b"), target=(sd.get("HOST") or "127.0.0.1", int(sd.get("PORT") or 5432)))
    yield machine
    machine.close()


@pytest.fixture
def on_hosts(tmp_path, hosts, settings):
    # The health data as the dashboard reads it, with the workers' short threshold.
    settings.REDRIVE = {**settings.REDRIVE, "WORKER_LOST_AFTER": LOST_AFTER}
    pool = HostProcesses(
        tmp_path,
        hosts,
        command="runworker",
        log_prefix="worker",
        env={"REDRIVE_WORKER_LOST_AFTER": str(LOST_AFTER)},
    )
    yield pool
    pool.stop_all()


def start(pool, host: str, lease: float):
    return pool.start(
        "--id",
        f"host-{host}",
        "--concurrency",
        "2",
        "--lease",
        str(lease),
        "--poll",
        "0.05",
        host=host,
        env={"REDRIVE_LEASE_SECONDS": str(lease)},
    )


def log(proc) -> str:
    return Path(proc.log_path).read_text()


def lost(worker_id: str) -> bool | None:
    """The health snapshot's verdict on the worker (None: no record of it)."""
    for worker in snapshot().workers:
        if worker["worker_id"] == worker_id:
            return worker["lost"]
    return None


def running_on(worker_id: str, ids) -> set[int]:
    return set(
        Job.objects.filter(pk__in=ids, state=JobState.RUNNING, locked_by=worker_id).values_list(
            "pk", flat=True
        )
    )


def quiet(hosts: Hosts, host: str) -> bool:
    """No statement of the host's is still running on the server: after a cut, what the host
    sent before it has all arrived and been carried out."""
    ports = list(hosts.database_ports(host))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND client_port = ANY(%s)",
            [ports],
        )
        return cursor.fetchone()[0] == 0


def stop(*procs):
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in procs] == [0] * len(procs)


def busy_when_cut(pool, hosts, ids, lease):
    """Workers on hosts a and b sharing the ledger; host a cut off while it runs jobs.
    Returns (a, b, the jobs a held at the cut, those of them it had begun, when the cut began)."""
    a, b = start(pool, "a", lease), start(pool, "b", lease)
    wait_until(
        lambda: lost("host-a") is False and lost("host-b") is False,
        timeout=60,
        message="both workers up and recorded",
    )
    # Jobs a has begun: their handlers are at work (the sink has their line) when the cut lands.
    wait_until(
        lambda: running_on("host-a", ids) & started(pool, ids),
        timeout=30,
        message="host a running jobs",
    )
    cut_at = time.monotonic()
    hosts.cut("a")
    wait_until(lambda: quiet(hosts, "a"), timeout=10, message="host a's last statements done")
    held = running_on("host-a", ids)
    assert held, "the cut should land while host a holds jobs"
    return a, b, held, held & started(pool, ids), cut_at


def started(pool, ids) -> set[int]:
    keys = Counter(pool.sink_lines())
    return {
        pk for pk, args in Job.objects.filter(pk__in=ids).values_list("pk", "args") if keys[args[0]]
    }


def test_a_host_cut_off_past_its_lease_is_taken_over_and_its_late_acks_refused(hosts, on_hosts):
    lease = 4.0
    ids = enqueue_ledger(60, "long-cut", work_ms=250)
    a, b, held, begun, cut_at = busy_when_cut(on_hosts, hosts, ids, lease)

    # While the link is down: host b finishes every job host a held, once its lease ran out,
    # and the health data shows host a lost (no record refresh for LOST_AFTER seconds).
    def taken_over():
        jobs = Job.objects.filter(pk__in=held)
        return all(j.state == JobState.DONE and j.worker_ids[-1] == "host-b" for j in jobs)

    wait_until(taken_over, timeout=60, interval=0.2, message="host b taking over host a's jobs")
    wait_until(lambda: lost("host-a"), timeout=30, interval=0.2, message="host a shown lost")
    assert lost("host-b") is False
    assert "event=lease_lost" not in log(a)  # nothing has reached it yet
    partition = time.monotonic() - cut_at
    assert partition > lease

    hosts.restore("a")
    restored_at = time.monotonic()

    # Host a hears back: every job it held is given up with event=lease_lost, its late
    # outcomes refused by the lease token (or the heartbeat finding the lease gone first).
    def given_up() -> set[int]:
        return {int(pk) for pk, _ in LEASE_LOST.findall(log(a))}

    wait_until(
        lambda: given_up() >= held,
        timeout=90,
        interval=0.2,
        message="host a giving up every job it held (event=lease_lost)",
    )
    noticed = time.monotonic() - restored_at
    wait_until(
        lambda: lost("host-a") is False, timeout=60, interval=0.2, message="host a alive again"
    )
    alive = time.monotonic() - restored_at
    wait_until(lambda: unfinished(ids) == 0, timeout=60, interval=0.2, message="ledger drained")
    stop(a, b)

    states = check_invariants(
        ids, log_paths=[a.log_path, b.log_path], sink_lines=on_hosts.sink_lines()
    )
    assert states[JobState.DONE] == len(ids)
    for job in Job.objects.filter(pk__in=held):
        assert job.attempts >= 2 and job.worker_ids[-2:] == ["host-a", "host-b"], job.pk
    assert given_up() == held
    refused = Counter(during for _, during in LEASE_LOST.findall(log(a)))
    assert not re.search(rf"event=succeeded job_id=({'|'.join(map(str, held))}) ", log(a))
    assert "event=lease_lost" not in log(b)
    reached = Counter(on_hosts.sink_lines())
    late = {pk for pk, args in Job.objects.filter(pk__in=held - begun).values_list("pk", "args")
            if reached[args[0]] > 1}  # fmt: skip
    # A prefetched job whose lease ran out in the inbox is not begun when a handler frees up.
    assert not late, f"host a began jobs after their leases ran out: {sorted(late)}"
    print(
        f"\nlong partition: {partition:.1f}s cut "
        f"(lease {lease:.0f}s, lost after {LOST_AFTER:.0f}s); "
        f"{len(held)} jobs taken over by host b ({len(begun)} running, the rest prefetched); "
        f"host a gave up all {len(held)} (lease_lost lines by step: {dict(refused)}) within "
        f"{noticed:.1f}s of the restore, alive again after {alive:.1f}s; "
        f"prefetched jobs host a still began after the restore: {len(late)}; "
        f"effects done twice: 0"
    )


def test_a_partition_shorter_than_the_lease_runs_nothing_twice(hosts, on_hosts):
    lease = 10.0
    ids = enqueue_ledger(60, "short-cut", work_ms=250)
    a, b, held, _, cut_at = busy_when_cut(on_hosts, hosts, ids, lease)
    time.sleep(2.0)  # the partition itself: well inside the lease
    hosts.restore("a")
    partition = time.monotonic() - cut_at
    wait_until(lambda: unfinished(ids) == 0, timeout=90, interval=0.2, message="ledger drained")
    stop(a, b)

    states = check_invariants(
        ids, log_paths=[a.log_path, b.log_path], sink_lines=on_hosts.sink_lines()
    )
    assert states[JobState.DONE] == len(ids)
    attempts = Counter(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True))
    assert attempts == {1: len(ids)}, attempts
    assert "event=lease_lost" not in log(a) + log(b)
    finished_by_a = Job.objects.filter(pk__in=held, worker_ids=["host-a"]).count()
    assert finished_by_a == len(held)
    print(
        f"\nshort partition: {partition:.1f}s cut (lease {lease:.0f}s); "
        f"{len(held)} jobs held by host a through it, all finished by it; "
        f"every one of {len(ids)} jobs ran once; leases lost 0"
    )
