"""Table and index bloat under steady load, autovacuum at the server's settings (PostgreSQL).

    uv run python bench/bloat.py [--minutes 60] [--rate 500] [--workers 2] [--prune-days 0]

Creates (and afterwards drops, unless --keep) the database `redrive_bench_bloat`, migrates it
and runs, for --minutes: an enqueuer adding --rate jobs a second (bulk calls of 100) and
--workers `runworker` processes draining them, the way a busy queue lives (each job inserted,
claimed, acknowledged: three row versions). Every minute, and at the end, it prints the job
table's and each of its indexes' size, live and dead rows, and how often autovacuum ran, beside
the size the same live rows take freshly packed (a copy of the table, indexed alike): the ratio
is the bloat. With --prune-days D, `prune` runs every minute as a cron would (the done jobs older
than D days; 0 keeps every job, so the table only grows).
"""

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.benchdb import drop_database, recreate_database  # noqa: E402

BENCH_DB = "redrive_bench_bloat"
CALL = 100  # jobs per enqueue call

# Through the partial indexes of live rows: a count by state alone would scan the done ones.
BACKLOG = """
SELECT (SELECT count(*) FROM jobqueue_job WHERE state = 'ready' AND concurrency_key IS NULL)
     + (SELECT count(*) FROM jobqueue_job WHERE state = 'running')
"""

SIZES = """
SELECT c.relname, pg_relation_size(c.oid), coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
       coalesce(s.autovacuum_count, 0), coalesce(s.autoanalyze_count, 0)
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = 'jobqueue_job'::regclass
   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'jobqueue_job'::regclass)
ORDER BY c.relkind DESC, c.relname
"""


def sizes(cursor) -> list[tuple]:
    cursor.execute(SIZES)
    return cursor.fetchall()


def packed(cursor) -> dict[str, int]:
    """The same live rows freshly written: a copy of the table with the same indexes."""
    cursor.execute("DROP TABLE IF EXISTS bench_packed")
    cursor.execute("CREATE TABLE bench_packed (LIKE jobqueue_job INCLUDING INDEXES)")
    cursor.execute("INSERT INTO bench_packed SELECT * FROM jobqueue_job")
    cursor.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c WHERE c.oid = "
        "'bench_packed'::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid "
        "= 'bench_packed'::regclass)"
    )
    rows = cursor.fetchall()
    cursor.execute("DROP TABLE bench_packed")
    return dict(rows)


def report(cursor, label: str, *, with_packed: bool = False):
    rows = sizes(cursor)
    fresh = packed(cursor) if with_packed else {}
    fresh_sizes = sorted(fresh.values(), reverse=True)
    print(f"-- {label}")
    total = 0
    for name, size, live, dead, vacuums, analyzes in rows:
        total += size
        extra = f" live {live:,} dead {dead:,} autovacuum {vacuums} analyze {analyzes}"
        print(f"   {name:<40} {size / 2**20:9.1f} MiB" + (extra if name == "jobqueue_job" else ""))
    if fresh:
        packed_total = sum(fresh_sizes)
        print(
            f"   all together {total / 2**20:.1f} MiB; the same live rows freshly packed "
            f"{packed_total / 2**20:.1f} MiB: bloat {total / max(packed_total, 1):.2f}x"
        )


def main():
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=500.0, help="jobs enqueued per second")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prune-days", type=float, default=0.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    url = recreate_database(BENCH_DB, migrate=True)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from datetime import timedelta

    from django.db import connection, connections
    from django.tasks import task_backends

    from bench.tasks import noop
    from jobqueue import store

    env = {**os.environ, "REDRIVE_LOG_LEVEL": "WARNING"}
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "runworker", "--concurrency", "2"],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(args.workers)
    ]
    stop = threading.Event()
    enqueued = [0]

    def enqueuer():
        backend = task_backends["default"]
        payloads = [((), {}) for _ in range(CALL)]
        started = time.monotonic()
        try:
            while not stop.is_set():
                due = started + enqueued[0] / args.rate
                if time.monotonic() < due:
                    stop.wait(due - time.monotonic())
                    continue
                backend.enqueue_many(noop, payloads)
                enqueued[0] += CALL
        finally:
            connections.close_all()

    thread = threading.Thread(target=enqueuer)
    started = time.monotonic()
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings "
                "WHERE name IN ('autovacuum', 'autovacuum_naptime', "
                "'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_threshold')"
            )
            print(f"server: {cursor.fetchone()[0]}")
            report(cursor, "start")
        thread.start()
        minute = 0
        while time.monotonic() - started < args.minutes * 60:
            minute += 1
            stop.wait(max(0.0, started + minute * 60 - time.monotonic()))
            if args.prune_days:
                store.prune_finished_jobs(older_than=timedelta(days=args.prune_days))
            with connection.cursor() as cursor:
                cursor.execute(BACKLOG)
                backlog = cursor.fetchone()[0]
                last = time.monotonic() - started >= args.minutes * 60
                report(
                    cursor,
                    f"minute {minute}: {enqueued[0]:,} enqueued, backlog {backlog:,}",
                    with_packed=last,
                )
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(timeout=60)
        connections.close_all()
        if not args.keep:
            drop_database(BENCH_DB)


if __name__ == "__main__":
    main()
