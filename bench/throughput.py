"""Throughput and latency of the PostgreSQL job queue, each figure beside a raw-SQL floor.

    uv run python bench/throughput.py [--drain-jobs 20000] [--single-jobs 3000] ...

Drops and recreates its own database (BENCH_DB, default `redrive_bench`) on the cluster at
BENCH_PG (default postgres://postgres@127.0.0.1:5432), migrates it with `manage.py migrate`, then
measures, in this order:

1. enqueue, one job per transaction: `noop.enqueue(i=i)` under autocommit vs the shared bench's
   floor (one INSERT into a minimal table per transaction), and a raw INSERT into jobqueue_job;
2. bulk enqueue: `DatabaseBackend.enqueue_many(noop, calls)`, 1,000 per call, vs the shared
   floor's INSERT … SELECT unnest(jsonb[]), and a raw multi-row INSERT into jobqueue_job;
3. drain: real `manage.py runworker --burst` processes, 2 x `--concurrency 1` and 1 x
   `--concurrency 2` at the default INFO (lines to /dev/null), and 2 x 1 at WARNING, from spawn to
   the last job done (start-up included), vs the shared peer bench's floor-batch100 (two psycopg
   processes claiming 100 jobs of a minimal table per round trip); worker CPU per job; then one
   worker's resident memory after 10,000 and after --rss-jobs (default 1,000,000) jobs;
   The drain is run again with its jobs on 100 per-key ordering lines, over 100 concurrency
   keys (the fair, keyed claim), and behind a paused queue of 200,000 older jobs, beside the
   plain one: the features' cost when used, and (the plain run) that they cost nothing when not;
4. enqueue→start latency on an idle (long-running) worker woken by LISTEN/NOTIFY, p50/p99;
5. a rate limit (`--only ratelimit`, not in the default run: it lasts --rate-seconds, 60): four
   workers drain a queue limited to --rate jobs/s; the rate the jobs started at.

Prints figures and PASS/MISS against the targets of issue 14; never fails the run on a miss.
`../shared/peers/run.sh floor-batch100 redrive redrive-1x2 redrive-100k` stays the yardstick.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import database_url, recreate_database  # noqa: E402

DB = os.environ.get("BENCH_DB", "redrive_bench")
DB_URL = database_url(DB)
TASK_PATH = "bench.tasks.noop"

PAUSED_BACKLOG = 200_000  # jobs of a paused queue behind which the drain runs (they stay)
TARGETS = {
    "single": 0.60,
    "bulk": 0.50,
    "drain": 0.40,
    "drain_1x2": 0.35,
    "cpu_us": 40.0,
    "rss_growth": 0.10,
    "latency_p50_ms": 5.0,
}

COLUMNS = (
    "task_path, queue_name, priority, backend, args, kwargs, state, run_after, attempts, "
    "max_attempts, worker_ids, enqueued_at, errors"
)
ROW = "(%s, 'default', 0, 'default', '[]', '{}', 'ready', %s, 0, 5, '[]', %s, '[]')"
INSERT_ONE = f"INSERT INTO jobqueue_job ({COLUMNS}) VALUES {ROW} RETURNING id"

_start = time.monotonic()


def log(text=""):
    print(text, flush=True)


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DATABASE_URL=DB_URL, **extra)
    return env


def raw(**kwargs) -> psycopg.Connection:
    return psycopg.connect(DB_URL, autocommit=True, **kwargs)


# --- set-up -------------------------------------------------------------------------------


def setup_django():
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["DATABASE_URL"] = DB_URL
    os.chdir(ROOT)
    import django

    django.setup()


def reset(conn: psycopg.Connection):
    """Empty the queue tables and vacuum (autovacuum may be off on the bench cluster)."""
    conn.execute("TRUNCATE jobqueue_job RESTART IDENTITY CASCADE")
    conn.execute("DELETE FROM jobqueue_pausedqueue")
    conn.execute("VACUUM ANALYZE jobqueue_job")


def load(
    conn: psycopg.Connection,
    n: int,
    ordering_keys: int = 0,
    concurrency_keys: int = 0,
    paused: int = 0,
):
    """Put n due no-op jobs in the table with COPY, then vacuum so every run starts alike.
    ordering_keys: spread them over that many per-key ordering lines ("block"), round robin;
    concurrency_keys: over that many concurrency keys (limit 1,000 each), round robin;
    paused: that many more jobs, an hour older, in a queue that is paused (they stay)."""
    reset(conn)
    now = datetime.now(UTC) - timedelta(seconds=1)
    if paused:
        with conn.cursor() as cur, cur.copy(f"COPY jobqueue_job ({COLUMNS}) FROM STDIN") as copy:
            older = list(copy_row(now - timedelta(hours=1)))
            older[1] = "paused"  # queue_name
            for _ in range(paused):
                copy.write_row(older)
        conn.execute(
            "INSERT INTO jobqueue_pausedqueue (queue_name, paused_at, paused_by, reason)"
            " VALUES ('paused', now(), 'bench', 'a backlog held back')"
        )
    columns = COLUMNS
    if ordering_keys:
        columns += ", ordering_key, ordering_on_dead"
    if concurrency_keys:
        columns += ", concurrency_key, concurrency_limit"
    with conn.cursor() as cur, cur.copy(f"COPY jobqueue_job ({columns}) FROM STDIN") as copy:
        for i in range(n):
            row = copy_row(now)
            if ordering_keys:
                row = (*row, f"line:{i % ordering_keys}", "block")
            if concurrency_keys:
                row = (*row, f"tenant:{i % concurrency_keys}", 1000)
            copy.write_row(row)
    conn.execute("VACUUM ANALYZE jobqueue_job")


def copy_row(now: datetime) -> tuple:
    """One due no-op job, in COLUMNS order."""
    return (TASK_PATH, "default", 0, "default", "[]", "{}", "ready", now, 0, 5, "[]", now, "[]")


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def line(label: str, ours: float, floor: float, target: float | None = None, extra: str = ""):
    ratio = ours / floor if floor else float("nan")
    text = f"  {label:<44} {ours:>9,.0f} jobs/s  floor {floor:>9,.0f} jobs/s  ratio {ratio:5.2f}"
    if target is not None:
        text += f"  (target >= {target:.2f}: {verdict(ratio >= target)})"
    log(text + extra)
    return ratio


# The shared peer bench's floor-batch100 (../shared/peers/contenders/floor), statement for
# statement: a minimal lease table, two processes (bench/floor_worker.py) each claiming 100 jobs
# per round trip and acknowledging the batch in one statement. Measured here so every ratio below
# has the denominator of `../shared/peers/run.sh floor-batch100 redrive`.
FLOOR_SCHEMA = """
DROP TABLE IF EXISTS bench_floor_jobs;
CREATE TABLE bench_floor_jobs (
    id bigserial PRIMARY KEY, payload jsonb NOT NULL, run_after timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz, token uuid, attempts int NOT NULL DEFAULT 0,
    state text NOT NULL DEFAULT 'ready'
);
CREATE INDEX bench_floor_claimable ON bench_floor_jobs (run_after, id) WHERE locked_until IS NULL
"""


def floor_table(conn: psycopg.Connection):
    """The shared floor's minimal lease table, empty."""
    conn.execute(FLOOR_SCHEMA)


# --- 1. single enqueue --------------------------------------------------------------------


def bench_single(n: int, rounds: int = 3) -> dict:
    """Ours and the floors in interleaved rounds; the best round of each counts (shared box).
    The floor is the shared bench's: one INSERT of a JSON payload into its minimal table per
    transaction (psycopg's server-side binding, so prepared after five)."""
    from django.db import connection

    from bench.tasks import noop

    log(f"\n1. enqueue, one job per transaction (N={n:,}: best of {rounds} interleaved rounds)")
    per = max(1, n // rounds)
    with raw() as conn:
        reset(conn)
        floor_table(conn)
        connection.ensure_connection()
        now = datetime.now(UTC)
        params = (TASK_PATH, now, now)
        for i in range(50):  # warm caches: imports, statement paths, the connections
            noop.enqueue(i=i)
            conn.execute("INSERT INTO bench_floor_jobs (payload) VALUES (%s)", [Jsonb({"i": i})])
            conn.execute(INSERT_ONE, params).fetchone()
        best = {"ours": 0.0, "floor": 0.0, "schema": 0.0}

        def ours():
            for i in range(per):
                noop.enqueue(i=i)

        def floor():
            for i in range(per):
                conn.execute(
                    "INSERT INTO bench_floor_jobs (payload) VALUES (%s)", [Jsonb({"i": i})]
                )

        def schema():
            for _ in range(per):
                conn.execute(INSERT_ONE, params).fetchone()

        runs = {"ours": ours, "floor": floor, "schema": schema}
        for r in range(rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                t = time.perf_counter()
                runs[name]()
                best[name] = max(best[name], rate(per, time.perf_counter() - t))
    connection.close()

    ratio = line(
        "noop.enqueue(i=i) vs the shared floor's INSERT",
        best["ours"],
        best["floor"],
        TARGETS["single"],
    )
    line("  (reference: raw INSERT into jobqueue_job)", best["ours"], best["schema"])
    return {"single": ratio}


# --- 2. bulk enqueue ----------------------------------------------------------------------


def bench_bulk(n: int, batch: int = 1000, rounds: int = 2) -> dict:
    """`enqueue_many` with 1,000 jobs per call (as the shared bench) vs its floor: INSERT …
    SELECT unnest(jsonb[]) into the minimal table, 1,000 per statement."""
    from django.db import connection
    from django.tasks import task_backends

    from bench.tasks import noop

    log(f"\n2. bulk enqueue (N={n:,}, {batch:,} per call; best of {rounds} interleaved rounds)")
    backend = task_backends["default"]
    values = ", ".join([ROW] * batch)
    multi = f"INSERT INTO jobqueue_job ({COLUMNS}) VALUES {values} RETURNING id"
    best = {"ours": 0.0, "floor": 0.0, "schema": 0.0}
    with raw() as conn:
        backend.enqueue_many(noop, [((), {})] * 100)  # warm-up

        def ours():
            done = 0
            for start in range(0, n, batch):
                calls = [((), {"i": i}) for i in range(start, min(start + batch, n))]
                done += len(backend.enqueue_many(noop, calls))
            return done

        def floor():
            for start in range(0, n, batch):
                payloads = [Jsonb({"i": i}) for i in range(start, min(start + batch, n))]
                conn.execute(
                    "INSERT INTO bench_floor_jobs (payload) SELECT unnest(%s::jsonb[])", [payloads]
                )
            return n

        def schema():
            now = datetime.now(UTC)
            ids = []
            with conn.transaction():
                for start in range(0, n, batch):
                    size = min(batch, n - start)
                    stmt = (
                        multi if size == batch else multi.replace(values, ", ".join([ROW] * size))
                    )
                    ids += conn.execute(stmt, (TASK_PATH, now, now) * size).fetchall()
            return len(ids)

        runs = {"ours": ours, "floor": floor, "schema": schema}
        for r in range(rounds):
            for name in list(runs) if r % 2 == 0 else list(reversed(runs)):
                reset(conn)
                floor_table(conn)
                t = time.perf_counter()
                done = runs[name]()
                best[name] = max(best[name], rate(done, time.perf_counter() - t))
    connection.close()

    ratio = line(
        "enqueue_many vs the shared floor's unnest INSERT",
        best["ours"],
        best["floor"],
        TARGETS["bulk"],
    )
    line("  (reference: multi-row INSERT into jobqueue_job)", best["ours"], best["schema"])
    return {"bulk": ratio}


# --- 3. drain -----------------------------------------------------------------------------


def floor_drain(n: int, processes: int = 2) -> dict:
    with raw() as conn:
        conn.execute(FLOOR_SCHEMA)
        conn.execute(
            "INSERT INTO bench_floor_jobs (payload) "
            "SELECT jsonb_build_object('i', g) FROM generate_series(1, %s) AS g",
            [n],
        )
        conn.execute("VACUUM ANALYZE bench_floor_jobs")
    t = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, str(ROOT / "bench" / "floor_worker.py"), DB_URL])
        for _ in range(processes)
    ]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t
    with raw() as conn:
        done = conn.execute("SELECT count(*) FROM bench_floor_jobs WHERE state = 'done'")
        done = done.fetchone()[0]
        conn.execute("DROP TABLE bench_floor_jobs")
    if codes != [0] * processes or done != n:
        log(f"  ! floor workers exited {codes}, {done:,} of {n:,} done")
    return {"rate": rate(done, wall), "wall": wall}


def run_workers(
    n: int,
    *,
    processes: int,
    concurrency: int,
    level: str,
    timeout: float,
    rss_at=(),
    ordering_keys: int = 0,
    concurrency_keys: int = 0,
    paused: int = 0,
) -> dict:
    """`processes` x `runworker --concurrency C --burst` on n loaded jobs, at a log level (lines
    to /dev/null). The rate counts from spawning the workers, start-up included, as the shared
    bench does; `steady` from the first job's start. rss_at: done counts at which to read the
    first worker's resident memory."""
    with raw() as conn:
        load(conn, n, ordering_keys, concurrency_keys, paused)
    cmd = [
        sys.executable, "manage.py", "runworker", "--concurrency", str(concurrency), "--burst"
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine_before = machine_cpu_seconds()
    rss, pending = {}, sorted(rss_at)
    t = time.perf_counter()
    procs = [
        subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=child_env(REDRIVE_LOG_LEVEL=level),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]
    code, last_rss, last_count = 0, None, 0.0
    with raw() as conn:
        while any(p.poll() is None for p in procs):
            if time.perf_counter() - t > timeout:
                code = "partial"  # a time cap keeps a slow box's run bounded; rate still counts
                for p in procs:
                    p.send_signal(signal.SIGTERM)
                break
            if rss_at:
                last_rss = resident_kb(procs[0].pid) or last_rss  # the last one before it exits
            if pending and time.perf_counter() - last_count > 0.5:
                # Done = loaded - ready - running, from the partial indexes on the live rows
                # (counting done rows would scan the table a million rows deep, twice a second).
                last_count = time.perf_counter()
                live = conn.execute(
                    "SELECT count(*) FROM jobqueue_job WHERE state IN ('ready', 'running')"
                ).fetchone()[0]
                while pending and n - live >= pending[0] and pending[0] < n:
                    rss[pending.pop(0)] = resident_kb(procs[0].pid)
            time.sleep(0.05 if rss_at else 0.01)
        codes = [p.wait() for p in procs]
    if n in pending and last_rss:
        rss[n] = last_rss  # read within 50 ms of its last job
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    machine = machine_cpu_seconds() - machine_before
    with raw() as conn:
        done, first, last = conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'done'), min(started_at), max(finished_at)"
            " FROM jobqueue_job"
        ).fetchone()
    if code != "partial" and set(codes) != {0}:
        code = codes
        log(f"  ! worker exit codes {codes}")
    steady = rate(done, (last - first).total_seconds()) if done else float("nan")
    return {"done": done, "wall": wall, "rate": rate(done, wall), "steady": steady,
            "code": code, "cpu": cpu, "rss": rss, "machine": machine}  # fmt: skip


def machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine (every core) since boot, from /proc/stat. During a
    drain, minus the workers' own, it is PostgreSQL's (and this bench's polling): the figure
    for sizing its cores."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def resident_kb(pid: int) -> int | None:
    try:
        for text in Path(f"/proc/{pid}/status").read_text().splitlines():
            if text.startswith("VmRSS:"):
                return int(text.split()[1])
    except OSError:
        return None
    return None


def bench_drain(n: int, timeout: float, rss_jobs: int) -> dict:
    log(f"\n3. drain {n:,} no-op jobs: workers spawned → every job done (start-up included)")
    floor = floor_drain(n)
    idle = run_workers(0, processes=1, concurrency=1, level="INFO", timeout=timeout)
    shapes = [(2, 1, "INFO"), (1, 2, "INFO"), (2, 1, "WARNING")]
    runs = {shape: run_workers(n, processes=shape[0], concurrency=shape[1], level=shape[2],
                               timeout=timeout) for shape in shapes}  # fmt: skip
    floor = max(floor, floor_drain(n), key=lambda f: f["rate"])  # after the workers: the better
    log(f"  floor (2 processes, 100 per round trip, the shared bench's): {floor['rate']:>9,.0f}")
    log(f"  one worker's start→exit on an empty queue: {idle['wall']:.2f}s, CPU {idle['cpu']:.2f}s")
    results = {}
    for (procs, conc, level), r in runs.items():
        target = {(2, 1, "INFO"): TARGETS["drain"], (1, 2, "INFO"): TARGETS["drain_1x2"]}
        label = f"{procs} x runworker --concurrency {conc}, log {level}"
        ratio = line(label, r["rate"], floor["rate"], target.get((procs, conc, level)))
        per_job = 1e6 * (r["cpu"] - procs * idle["cpu"]) / max(r["done"], 1)
        log(
            f"      done {r['done']:,}/{n:,} in {r['wall']:.2f}s; steady {r['steady']:,.0f} jobs/s "
            f"(ratio {r['steady'] / floor['rate']:.2f}); worker CPU {per_job:.0f} µs/job "
            f"(start-up subtracted); PostgreSQL and the rest of the machine "
            f"{1e6 * (r['machine'] - r['cpu']) / max(r['done'], 1):.0f} µs/job"
            + ("; PARTIAL: stopped at --drain-timeout" if r["code"] == "partial" else "")
        )
        if (procs, conc, level) == (2, 1, "INFO"):
            results["drain"] = ratio
            results["cpu_us"] = per_job
        if (procs, conc, level) == (1, 2, "INFO"):
            results["drain_1x2"] = ratio
    # Per-key ordering in use: the same jobs on 100 ordering lines, so at most 100 can run at
    # once and each claim must look past the jobs whose line is busy.
    keyed = run_workers(
        n, processes=2, concurrency=1, level="INFO", timeout=timeout, ordering_keys=100
    )
    line("2 x 1, INFO, 100 ordering keys", keyed["rate"], floor["rate"])
    results["drain_ordered"] = keyed["rate"] / floor["rate"]
    # Concurrency keys in use: the same jobs over 100 tenants, each claim ranking every
    # tenant's next jobs (the fair, keyed claim) instead of taking the plain index's first.
    tenants = run_workers(
        n, processes=2, concurrency=1, level="INFO", timeout=timeout, concurrency_keys=100
    )
    line("2 x 1, INFO, 100 concurrency keys", tenants["rate"], floor["rate"])
    results["drain_tenants"] = tenants["rate"] / floor["rate"]
    # A paused queue holding 200,000 older jobs: claims go queue by queue past it rather than
    # stepping over its jobs (they stay ready). Beside the plain run, the backlog's cost.
    held = run_workers(
        n, processes=2, concurrency=1, level="INFO", timeout=timeout, paused=PAUSED_BACKLOG
    )
    line(f"2 x 1, INFO, {PAUSED_BACKLOG:,} paused jobs ahead", held["rate"], floor["rate"])
    plain = runs[2, 1, "INFO"]
    log(f"      {held['rate'] / plain['rate']:.2f} of the same drain with no paused queue")
    results["drain_paused"] = held["rate"] / floor["rate"]
    if rss_jobs:
        small = min(10_000, rss_jobs)
        log(f"\n   memory: one worker (--concurrency 1, INFO) through {rss_jobs:,} jobs")
        cap = max(timeout, rss_jobs / 2000)
        r = run_workers(
            rss_jobs,
            processes=1,
            concurrency=1,
            level="INFO",
            timeout=cap,
            rss_at=(small, rss_jobs),
        )
        first, last = r["rss"].get(small), r["rss"].get(rss_jobs)
        if first and last:
            growth = last / first - 1
            results["rss_growth"] = growth
            log(
                f"  RSS after {small:,} jobs {first / 1024:.1f} MiB, after {rss_jobs:,} "
                f"{last / 1024:.1f} MiB: {growth:+.1%} (target within 10%: "
                f"{verdict(abs(growth) <= TARGETS['rss_growth'])})"
            )
        else:
            log(f"  ! RSS not read (samples {r['rss']}); done {r['done']:,}")
    return results


# --- 5. rate limit -------------------------------------------------------------------------


def bench_rate_limit(rate: float, seconds: float) -> dict:
    """Four workers on a queue limited to `rate` jobs per second, `seconds` long: the rate the
    jobs started at after the first second's burst."""
    n = int(rate * seconds)
    log(f"\n5. rate limit {rate:g}/s: {n:,} jobs, four workers, about {seconds:g} s")
    with raw() as conn:
        load(conn, n)
        conn.execute("UPDATE jobqueue_job SET queue_name = 'limited'")
        conn.execute("TRUNCATE jobqueue_ratebucket")
    cmd = [sys.executable, "manage.py", "runworker", "--burst", "--poll", "0.02"]
    env = child_env(REDRIVE_RATE_LIMITS=f'{{"limited": {rate}}}', REDRIVE_LOG_LEVEL="WARNING")
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL) for _ in range(4)]
    codes = [p.wait(timeout=seconds * 3 + 60) for p in procs]
    with raw() as conn:
        starts = [
            row[0]
            for row in conn.execute(
                "SELECT started_at FROM jobqueue_job WHERE state = 'done' ORDER BY started_at"
            )
        ]
    burst = int(max(1, rate))
    measured = (len(starts) - burst - 1) / (starts[-1] - starts[burst]).total_seconds()
    log(
        f"  {len(starts):,}/{n:,} done (exit codes {codes}); started at {measured:.2f} jobs/s "
        f"after the first second: {measured / rate - 1:+.1%} of the limit (target within 10%: "
        f"{verdict(abs(measured / rate - 1) <= 0.10)})"
    )
    return {"rate_limit_error": measured / rate - 1}


# --- 4. latency ---------------------------------------------------------------------------


def bench_latency(n: int, spacing: float) -> dict:
    from django.db import connection

    from bench.tasks import noop

    log(f"\n4. enqueue→start latency on an idle worker ({n} jobs, {spacing * 1000:.0f} ms apart)")
    with raw() as conn:
        reset(conn)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--concurrency", "2"],
        cwd=ROOT,
        env=child_env(REDRIVE_LOG_LEVEL="WARNING"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with raw() as conn:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                listening = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query ILIKE "
                    "'LISTEN%%'",
                    (DB,),
                ).fetchone()[0]
                if listening:
                    break
                time.sleep(0.05)
            else:
                log("  ! worker never issued LISTEN; latency is the polling fallback")
            time.sleep(1.5)  # past its first empty claim: asleep on the wake event
            connection.ensure_connection()
            next_at = time.perf_counter()
            for _ in range(n):
                next_at += spacing
                noop.enqueue()
                time.sleep(max(0.0, next_at - time.perf_counter()))
            connection.close()
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                done = conn.execute(
                    "SELECT count(*) FROM jobqueue_job WHERE state = 'done'"
                ).fetchone()[0]
                if done >= n:
                    break
                time.sleep(0.05)
            lat = [
                row[0]
                for row in conn.execute(
                    "SELECT extract(epoch FROM started_at - enqueued_at) * 1000 FROM jobqueue_job "
                    "WHERE started_at IS NOT NULL ORDER BY id"
                )
            ]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=35)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if not lat:
        log("  ! no job started")
        return {"latency_p50_ms": float("inf")}
    lat = sorted(float(x) for x in lat)
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, round(0.99 * len(lat)) - 1)]
    ok = p50 < TARGETS["latency_p50_ms"]
    log(
        f"  started {len(lat)}/{n}: p50 {p50:.1f} ms  p99 {p99:.1f} ms  max {lat[-1]:.1f} ms"
        f"  (target p50 < {TARGETS['latency_p50_ms']:.0f} ms: {verdict(ok)})"
    )
    return {"latency_p50_ms": p50}


# --- main ---------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single-jobs", type=int, default=3000)
    parser.add_argument("--bulk-jobs", type=int, default=20000)
    parser.add_argument("--drain-jobs", type=int, default=20000)
    parser.add_argument(
        "--rss-jobs", type=int, default=1_000_000, help="jobs for the memory check (0: skip)"
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=60.0, help="cap per worker run, seconds"
    )
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--latency-spacing", type=float, default=0.02, help="seconds")
    parser.add_argument("--rate", type=float, default=50.0, help="jobs/s of the rate-limit run")
    parser.add_argument("--rate-seconds", type=float, default=60.0)
    parser.add_argument(
        "--only", choices=["single", "bulk", "drain", "latency", "ratelimit"], action="append"
    )
    args = parser.parse_args(argv)
    only = set(args.only or ["single", "bulk", "drain", "latency"])

    log(f"Redrive throughput bench on {DB_URL} ({os.cpu_count()} CPUs), {datetime.now(UTC):%c} UTC")
    log(f"load average {os.getloadavg()[0]:.2f} (other work on this box skews every figure)")
    recreate_database(DB, migrate=True)
    setup_django()
    results = {}
    if "single" in only:
        results |= bench_single(args.single_jobs)
    if "bulk" in only:
        results |= bench_bulk(args.bulk_jobs)
    if "drain" in only:
        results |= bench_drain(args.drain_jobs, args.drain_timeout, args.rss_jobs)
    if "latency" in only:
        results |= bench_latency(args.latency_jobs, args.latency_spacing)
    if "ratelimit" in only:
        results |= bench_rate_limit(args.rate, args.rate_seconds)

    log("\nSummary (targets of issue 14; the shared bench is the yardstick)")
    for key, label in [
        ("single", "single enqueue >= 60% of floor"),
        ("bulk", "bulk enqueue >= 50% of floor"),
        ("drain", "drain, 2 x 1, >= 40% of the 2-process floor"),
        ("drain_1x2", "drain, 1 x 2, >= 35% of the 2-process floor"),
    ]:
        if key in results:
            ok = results[key] >= TARGETS[key]
            log(f"  {verdict(ok)}  {label:<46} ratio {results[key]:.2f}")
    for key, label in [
        ("drain_ordered", "drain, 2 x 1, 100 ordering keys (no target)"),
        ("drain_tenants", "drain, 2 x 1, 100 concurrency keys (no target)"),
        ("drain_paused", f"drain, 2 x 1, {PAUSED_BACKLOG:,} paused ahead (no target)"),
    ]:
        if key in results:
            log(f"  ----  {label:<46} ratio {results[key]:.2f}")
    if "cpu_us" in results:
        ok = results["cpu_us"] <= TARGETS["cpu_us"]
        label = "worker CPU per job at INFO <= 40 µs"
        log(f"  {verdict(ok)}  {label:<46} {results['cpu_us']:.0f} µs")
    if "rss_growth" in results:
        ok = abs(results["rss_growth"]) <= TARGETS["rss_growth"]
        label = "worker RSS flat (1M vs 10k jobs, within 10%)"
        log(f"  {verdict(ok)}  {label:<46} {results['rss_growth']:+.1%}")
    if "latency_p50_ms" in results:
        p50 = results["latency_p50_ms"]
        ok = p50 < TARGETS["latency_p50_ms"]
        log(f"  {verdict(ok)}  {'idle enqueue→start latency p50 < 5 ms':<46} {p50:.1f} ms")
    log(
        f"\ntotal bench time {time.monotonic() - _start:.0f}s; "
        f"load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
