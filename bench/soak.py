"""Soak: jobs through several worker processes for minutes, with faults on a schedule.

    uv run python bench/soak.py [--jobs 50000] [--minutes 10] [--workers 4] [--no-restart]

Runs against its own PostgreSQL database (redrive_soak, dropped and re-created). Jobs are
enqueued at an even pace over the run (all of them, however slow the database gets). Every few
seconds one fault: SIGKILL a worker (a replacement starts), SIGSTOP one past its lease and
SIGCONT it, terminate every worker connection, hold an ACCESS EXCLUSIVE lock on the job table,
and restart the cluster (where pg_ctlcluster exists, unless --no-restart). Prints what ran and
what the invariants say: missing and duplicate effects must both be 0. Not a test: figures, not
assertions.
"""

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import recreate_database  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--fault-every", type=float, default=3.0, metavar="SECONDS")
    parser.add_argument("--no-restart", action="store_true", help="Never restart PostgreSQL.")
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()

    URL = recreate_database("redrive_soak", migrate=True)
    env = {**os.environ, "DATABASE_URL": URL, "REDRIVE_LOCK_TIMEOUT": "1"}
    os.environ.update(DATABASE_URL=URL, DJANGO_SETTINGS_MODULE="config.settings")
    import django

    django.setup()
    from django.db import connections
    from django.tasks import task_backends

    from jobqueue.models import DeadLetter, Execution, Job
    from tests import tasks

    workdir = Path(tempfile.mkdtemp(prefix="redrive-soak-"))
    env["REDRIVE_TEST_SINK"] = str(workdir / "sink.log")
    rng = random.Random(opts.seed)
    procs: list[subprocess.Popen] = []
    faults = Counter()

    def start_worker():
        log = open(workdir / f"worker-{len(procs)}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "runworker",
                "--concurrency",
                "2",
                "--lease",
                "2",
                "--poll",
                "0.1",
                "--grace",
                "5",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        return proc

    live = [start_worker() for _ in range(opts.workers)]
    ids: list[int] = []
    started = time.monotonic()
    deadline = started + opts.minutes * 60

    def produce():
        from django.db import OperationalError

        n = 0
        while n < opts.jobs:
            # An even pace: by now, this share of the jobs should be in.
            due = opts.jobs * (time.monotonic() - started) / (deadline - started)
            size = min(500, opts.jobs - n, max(0, int(due) - n))
            if size == 0:
                time.sleep(0.05)
                continue
            batch = [((f"soak-{n + i}",), {"work_ms": rng.uniform(0, 4)}) for i in range(size)]
            try:
                results = task_backends["default"].enqueue_many(tasks.fault_effect, batch)
            except OperationalError:
                connections.close_all()
                faults["enqueue_retries"] += 1
                time.sleep(0.2)
                continue
            ids.extend(int(r.id) for r in results)  # only enqueues that returned count
            n += len(batch)
        connections.close_all()

    producer = threading.Thread(target=produce)
    producer.start()

    restart = shutil.which("pg_ctlcluster") and not opts.no_restart
    kinds = ["kill", "stop", "terminate", "lock"] + (["restart"] if restart else [])
    while time.monotonic() < deadline:
        time.sleep(opts.fault_every)
        kind = rng.choice(kinds)
        try:
            if kind == "kill":
                victim = live.pop(rng.randrange(len(live)))
                victim.kill()
                victim.wait()
                live.append(start_worker())
            elif kind == "stop":
                victim = rng.choice(live)
                victim.send_signal(signal.SIGSTOP)
                time.sleep(2.5)  # past its 2 s lease
                victim.send_signal(signal.SIGCONT)
            elif kind == "terminate":
                with psycopg.connect(URL, autocommit=True) as conn:
                    conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                        "datname = 'redrive_soak' AND pid <> pg_backend_pid()"
                    )
            elif kind == "lock":
                with psycopg.connect(URL) as conn, conn.transaction():
                    conn.execute("LOCK TABLE jobqueue_job IN ACCESS EXCLUSIVE MODE")
                    time.sleep(2)
            elif kind == "restart":
                version = sorted(os.listdir("/etc/postgresql"))[-1]
                subprocess.run(
                    ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
                    check=True,
                    timeout=120,
                )
            faults[kind] += 1
        except Exception as exc:  # noqa: BLE001 - a fault that failed to fire is reported
            faults[f"{kind}_failed"] += 1
            print(f"fault {kind} failed: {exc}", file=sys.stderr)
    producer.join()  # every job goes in, even when the faults slowed the producer down

    connections.close_all()
    drain_until = time.monotonic() + 300
    while time.monotonic() < drain_until:
        try:
            left = Job.objects.filter(pk__in=ids).exclude(state__in=["done", "dead"]).count()
        except Exception:  # noqa: BLE001 - the database may still be coming back
            connections.close_all()
            left = -1
        if left == 0:
            break
        time.sleep(1)
    alive = [p for p in live if p.poll() is None]
    for proc in alive:
        proc.send_signal(signal.SIGTERM)
    exits = [proc.wait(timeout=60) for proc in alive]

    states = Counter(Job.objects.filter(pk__in=ids).values_list("state", flat=True))
    keys = [f"effect:soak-{n}" for n in range(opts.jobs)]
    effects = Counter(
        Execution.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", flat=True)
    )
    duplicate_effects = sum(n - 1 for n in effects.values() if n > 1)
    done_keys = [
        a[0] for a in Job.objects.filter(pk__in=ids, state="done").values_list("args", flat=True)
    ]
    done_without_effect = sum(f"effect:{k}" not in effects for k in done_keys)
    sink = Counter(Path(env["REDRIVE_TEST_SINK"]).read_text().splitlines())
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM "
            "started_at - run_after)) FROM jobqueue_job WHERE id = ANY(%s) AND attempts = 1",
            [ids],
        )
        p99_wait = cursor.fetchone()[0]
    logs = [(workdir / f"worker-{i}.log").read_text() for i in range(len(procs))]
    db_errors = sum(text.count("event=database_error") for text in logs)
    claims = sorted(
        float(ms)
        for text in logs
        for ms in re.findall(r"event=claimed .*duration_ms=([\d.]+)", text)
    )
    p99_claim = claims[int(len(claims) * 0.99)] if claims else float("nan")
    print(f"soak: {opts.minutes:g} min, {opts.workers} workers, {len(ids)} jobs enqueued")
    print(
        f"  done {states.get('done', 0)}, dead {states.get('dead', 0)}, "
        f"dead letters {DeadLetter.objects.filter(job_id__in=ids).count()}"
    )
    print(
        f"  faults: {dict(faults)}; worker processes started {len(procs)}; "
        f"database errors logged {db_errors}; clean exits {exits.count(0)}/{len(exits)}"
    )
    print(
        f"  attempts > 1: {Job.objects.filter(pk__in=ids, attempts__gt=1).count()}; "
        f"effect attempts repeated at the sink: {sum(1 for n in sink.values() if n > 1)}"
    )
    print(
        f"  missing (not done/dead): {len(ids) - states.get('done', 0) - states.get('dead', 0)}"
        f"  (must be 0)"
    )
    print(
        f"  duplicate effects: {duplicate_effects}, done without effect: "
        f"{done_without_effect}  (must be 0); distinct effects {len(effects)} "
        f"(done {states.get('done', 0)})"
    )
    print(
        f"  p99 claim latency: {p99_claim:.1f} ms over {len(claims)} claim statements; "
        f"p99 queue wait (first attempts, run_after -> started): {p99_wait * 1000:.0f} ms"
    )
    print(f"  logs: {workdir}")


if __name__ == "__main__":
    main()
