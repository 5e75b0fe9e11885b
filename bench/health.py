"""Queue health speed at 1,000,000 jobs and 1,000,000 dead letters (PostgreSQL).

    uv run python bench/health.py [--jobs 1000000] [--dead-letters 1000000] [--keep]

Creates (and afterwards drops, unless --keep) the database `redrive_bench_health`, fills it
with generate_series — mostly finished jobs, a live backlog of ready, scheduled and running
ones, 60 minutes of per-minute counters, and the console bench's dead letters — then prints the
median server time of 20 requests to the dashboard and to /metrics (Django test Client, no
network) and of `jobqueue.health.snapshot()` itself, beside a bare indexed count measured in the
same run. Target: dashboard and /metrics under 100 ms.
"""

import argparse
import os
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
BENCH_DB = "redrive_bench_health"

from bench.benchdb import drop_database, recreate_database  # noqa: E402
from bench.console import FILL as FILL_DEAD_LETTERS  # noqa: E402
from bench.console import JOB_TYPES, median_ms  # noqa: E402

FILL_JOBS = """
INSERT INTO jobqueue_job (
    task_path, queue_name, priority, backend, args, kwargs, state, run_after, attempts,
    max_attempts, lease_token, locked_until, locked_by, worker_ids, enqueued_at, started_at,
    finished_at, errors, return_value
)
SELECT
    'bench.tasks.job_' || lpad((g %% %(types)s)::text, 2, '0'),
    (ARRAY['default', 'mail', 'billing'])[1 + g %% 3], 0, 'default',
    jsonb_build_array(g), '{}'::jsonb,
    CASE WHEN g %% 1000 < 980 THEN 'done' WHEN g %% 1000 < 990 THEN 'ready'
         WHEN g %% 1000 < 995 THEN 'running' ELSE 'dead' END,
    CASE WHEN g %% 1000 BETWEEN 985 AND 989 THEN now() + interval '1 hour' ELSE ts END,
    CASE WHEN g %% 7 = 0 THEN 2 ELSE 1 END, 5,
    CASE WHEN g %% 1000 BETWEEN 990 AND 994 THEN md5(g::text) END,
    CASE WHEN g %% 1000 BETWEEN 990 AND 994
         THEN now() + (CASE WHEN g %% 2 = 0 THEN 1 ELSE -1 END) * interval '30 seconds' END,
    CASE WHEN g %% 1000 BETWEEN 990 AND 994 THEN 'bench:1' END,
    '["bench:1"]'::jsonb, ts, ts, CASE WHEN g %% 1000 < 980 THEN ts END, '[]'::jsonb, NULL
FROM (
    SELECT g, now() - g * (interval '30 days' / %(rows)s) AS ts
    FROM generate_series(1::bigint, %(rows)s::bigint) AS g
) AS s
"""

FILL_COUNTERS = """
INSERT INTO jobqueue_jobcounter
    (minute, queue_name, task_path, succeeded, failed, dead, last_success_at)
SELECT date_trunc('minute', now()) - m * interval '1 minute',
       (ARRAY['default', 'mail', 'billing'])[1 + t %% 3],
       'bench.tasks.job_' || lpad(t::text, 2, '0'), 100 + m, m %% 5, m %% 2, now()
FROM generate_series(0, 59) AS m, generate_series(0, %(types)s - 1) AS t
"""


def main():
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--dead-letters", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = recreate_database(BENCH_DB)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    try:
        run(args)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            drop_database(BENCH_DB)


def run(args):
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from deadletters import counters
    from deadletters.roles import assign
    from jobqueue.health import snapshot
    from tests.factories import UserFactory

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for sql in counters.drop_statements(connection.vendor):
            cursor.execute(sql)
        cursor.execute(FILL_JOBS, {"rows": args.jobs, "types": JOB_TYPES})
        cursor.execute(FILL_DEAD_LETTERS, {"rows": args.dead_letters, "types": JOB_TYPES})
        cursor.execute(FILL_COUNTERS, {"types": JOB_TYPES})
    counters.ensure(connection)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(
        f"filled {args.jobs:,} jobs and {args.dead_letters:,} dead letters "
        f"in {time.perf_counter() - started:.1f}s"
    )

    user = UserFactory(username="bench-staff", is_staff=True)
    assign(user, "viewer")
    client = Client()
    client.force_login(user)

    from django.conf import settings

    settings.REDRIVE = {
        **settings.REDRIVE,
        "METRICS_TOKEN": "bench-token",
    }  # as Prometheus would call it

    def get(url):
        def call():
            response = client.get(url, headers={"Authorization": "Bearer bench-token"})
            assert response.status_code == 200, (url, response.status_code)

        return call

    def bare():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM jobqueue_job WHERE state = 'ready'")
            cursor.fetchall()

    baseline = median_ms(bare)
    print(f"baseline: bare count of ready jobs (partial index)   {baseline:8.1f} ms")
    for name, fn in [
        ("health snapshot()", snapshot),
        ("dashboard (GET /)", get("/")),
        ("/metrics", get("/metrics")),
    ]:
        ms = median_ms(fn)
        verdict = "PASS" if ms < 100 or name.startswith("health") else "MISS"
        print(
            f"{name:<24} {ms:8.1f} ms  ({ms / baseline:5.1f}x baseline)"
            + ("" if name.startswith("health") else f"  target < 100 ms: {verdict}")
        )


if __name__ == "__main__":
    main()
