"""The queue at ten million rows (PostgreSQL): enqueue and claim next to an empty table, the
claim statement's p99, the console and health pages, and a prune of five million rows with
the longest wait it causes a concurrent claim.

    uv run python bench/ten_million.py [--finished 10000000] [--letters 1000000] [--keep]

Creates (and afterwards drops, unless --keep) the database `redrive_bench_10m`, migrates it and
measures, in one run: the rates on the empty table; then fills it (generate_series) with
`--finished` done jobs (half finished 60 days ago, half within the week) and `--letters` dead
letters, VACUUM ANALYZE, and measures the same again; then prunes the old half (`prune`'s own
function, 5,000 rows a transaction) while a second connection claims and acknowledges jobs
one at a time, timing each claim. Ratios compare the filled table with the empty one.
"""

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.benchdb import drop_database, recreate_database  # noqa: E402

BENCH_DB = "redrive_bench_10m"
SINGLE = 2_000  # single enqueues per measurement
BULK_CALLS, BULK_SIZE = 20, 1_000
CLAIM_LIMIT = 10  # a worker's usual claim when jobs are quick: a few per round trip

FILL_FINISHED = """
INSERT INTO jobqueue_job (
    task_path, queue_name, priority, backend, args, kwargs, state, run_after, attempts,
    max_attempts, worker_ids, enqueued_at, started_at, last_attempted_at, finished_at, errors,
    return_value
)
SELECT
    'bench.tasks.job_' || lpad((g %% 20)::text, 2, '0'),
    (ARRAY['default', 'mail', 'billing'])[1 + g %% 3], 0, 'default',
    jsonb_build_array(g), jsonb_build_object('order_id', g),
    'done', ts, 1, 5, '["bench:1"]', ts, ts, ts, ts, '[]', 'null'::jsonb
FROM (
    SELECT g, CASE WHEN g %% 2 = 0 THEN now() - interval '60 days' - g * interval '1 ms'
                   ELSE now() - g * (interval '7 days' / %(total)s) END AS ts
    FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g
) AS s
"""


def timed(fn):
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def percentile(samples, q):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(label):
    """Single and bulk enqueue rates, then claim + acknowledge of those jobs CLAIM_LIMIT at a
    time: the rate and each claim statement's latency. The jobs end done (as workers leave
    them), so the next measurement sees the same table plus these."""
    from django.tasks import task_backends

    from bench.tasks import noop
    from jobqueue import store

    backend = task_backends["default"]
    single = SINGLE / timed(lambda: [backend.enqueue(noop, (), {}) for _ in range(SINGLE)])
    payloads = [((), {"i": i}) for i in range(BULK_SIZE)]
    bulk = (BULK_CALLS * BULK_SIZE) / timed(
        lambda: [backend.enqueue_many(noop, payloads) for _ in range(BULK_CALLS)]
    )
    latencies, claimed = [], 0
    started = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        jobs = store.claim(
            worker_id="bench:claim", queues=None, limit=CLAIM_LIMIT, lease_seconds=60
        )
        latencies.append((time.perf_counter() - t0) * 1000)
        if not jobs:
            break
        claimed += len(jobs)
        store.acknowledge([(job, None) for job in jobs])
    rate = claimed / (time.perf_counter() - started)
    print(
        f"{label:>12}: single enqueue {single:8.0f}/s  bulk enqueue {bulk:8.0f}/s  "
        f"claim+ack {rate:8.0f} jobs/s  claim p50 {percentile(latencies, 0.5):5.2f} ms  "
        f"p99 {percentile(latencies, 0.99):5.2f} ms  ({claimed} jobs, {CLAIM_LIMIT} a claim)"
    )
    return {"single": single, "bulk": bulk, "claim": rate, "p99": percentile(latencies, 0.99)}


def pages():
    """Median server time of the console's and health pages (Django's test Client)."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "x")
    client = Client()
    client.force_login(user)
    found = {}
    jobs = reverse("deadletters:jobs")
    urls = [reverse(n) for n in ("deadletters:overview", "deadletters:list", "deadletters:health")]
    # The jobs browser over the ten million: newest first, and each state it filters by.
    urls += [jobs] + [
        f"{jobs}?state={state}"
        for state in ("ready", "scheduled", "retrying", "running", "done", "dead", "cancelled")
    ]
    for url in urls:
        for _ in range(2):
            assert client.get(url).status_code == 200, url
        samples = [timed(lambda url=url: client.get(url)) * 1000 for _ in range(10)]
        found[url] = statistics.median(samples)
        print(f"{'page':>12}: {url:<36} median {found[url]:6.1f} ms")
    return found


def prune_under_claims(total):
    """Prune the old half while another connection claims: the longest claim during it."""
    from datetime import timedelta

    from django.db import connections
    from django.tasks import task_backends

    from bench.tasks import noop
    from jobqueue import store

    backend = task_backends["default"]
    payloads = [((), {"i": i}) for i in range(BULK_SIZE)]
    for _ in range(50):
        backend.enqueue_many(noop, payloads)
    stop = threading.Event()
    latencies: list[float] = []

    def claimer():
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                jobs = store.claim(worker_id="bench:p", queues=None, limit=1, lease_seconds=60)
                latencies.append((time.perf_counter() - t0) * 1000)
                if jobs:
                    store.acknowledge([(jobs[0], None)])
        finally:
            connections.close_all()

    thread = threading.Thread(target=claimer)
    thread.start()
    started = time.perf_counter()
    deleted = store.prune_finished_jobs(older_than=timedelta(days=30))
    took = time.perf_counter() - started
    stop.set()
    thread.join()
    print(
        f"{'prune':>12}: {deleted} finished jobs in {took:.1f} s ({deleted / took:.0f} rows/s); "
        f"a concurrent claim: {len(latencies)} claims, p50 {percentile(latencies, 0.5):.2f} ms, "
        f"p99 {percentile(latencies, 0.99):.2f} ms, longest {max(latencies):.1f} ms"
    )
    return max(latencies)


def fill(finished, letters):
    from django.db import connection

    from bench.console import FILL

    chunk = 1_000_000
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for start in range(1, finished + 1, chunk):
            stop = min(start + chunk - 1, finished)
            cursor.execute(FILL_FINISHED, {"start": start, "stop": stop, "total": finished})
            print(f"{'fill':>12}: {stop} finished jobs ({time.perf_counter() - started:.0f} s)")
        cursor.execute(FILL, {"rows": letters, "types": 20})
        print(f"{'fill':>12}: {letters} dead letters ({time.perf_counter() - started:.0f} s)")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(f"{'fill':>12}: done, vacuumed ({time.perf_counter() - started:.0f} s)")


def main():
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--letters", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true", help="Keep the bench database.")
    args = parser.parse_args()
    os.environ["DATABASE_URL"] = recreate_database(BENCH_DB, migrate=True)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("REDRIVE_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    try:
        empty = measure("empty")
        fill(args.finished, args.letters)
        full = measure(f"{args.finished // 1_000_000}M rows")
        page_ms = pages()
        longest = prune_under_claims(args.finished)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            drop_database(BENCH_DB)
    print()
    for key, name in (("single", "single enqueue"), ("bulk", "bulk enqueue"), ("claim", "claim")):
        ratio = full[key] / empty[key]
        verdict = "PASS" if ratio >= 0.9 else "MISS"
        print(f"{name:>16} at {args.finished:,} rows vs empty: {ratio:.2f}  {verdict} (>= 0.90)")
    p99 = full["p99"]
    print(f"{'claim p99':>16}: {p99:.2f} ms  {'PASS' if p99 < 20 else 'MISS'} (< 20)")
    worst = max(page_ms.values())
    print(f"{'slowest page':>16}: {worst:.1f} ms  {'PASS' if worst < 100 else 'MISS'} (< 100)")
    print(f"{'prune':>16}: longest claim during it {longest:.1f} ms")


if __name__ == "__main__":
    main()
