"""Console speed at 1,000,000 dead letters over 20 job types, the jobs browser at 1,000,000
jobs, the JSON API's list endpoints beside the console pages, and the timing pages over a week
of timing rollups (PostgreSQL).

    uv run python bench/console.py [--rows 1000000] [--keep] [--timing-only]

Creates (and afterwards drops, unless --keep) the database `redrive_bench_console` next to the
one DATABASE_URL names (default postgres://postgres@127.0.0.1:5432/), migrates it, fills it
with generate_series, then measures server time through Django's test Client (no network):
median of 20 requests after warm-up, each next to a bare indexed SELECT of the same rows
measured in the same run, and a 10,000-item replay run at an unlimited rate.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import date, timedelta
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.benchdb import database_url, drop_database, recreate_database  # noqa: E402

# BENCH_CONSOLE_DB: another name, for two checkouts benching on one server at once.
BENCH_DB = os.environ.get("BENCH_CONSOLE_DB", "redrive_bench_console")
JOB_TYPES = 20
REPEAT = 20

FILL = """
INSERT INTO jobqueue_deadletter (
    source, original_job_id, task_path, queue_name, priority, backend, args, kwargs,
    idempotency_key, max_attempts, attempts, last_error, error_class, traceback, errors,
    first_failed_at, dead_lettered_at, state, replays, last_replayed_at, discarded_at,
    fingerprint, message_digest
)
SELECT
    'jobqueue', g,
    'bench.tasks.job_' || lpad((g %% %(types)s)::text, 2, '0'),
    (ARRAY['default', 'mail', 'billing'])[1 + g %% 3],
    0, 'default',
    jsonb_build_array(g),
    jsonb_build_object('order_id', g, 'password', 'hunter2'),
    'bench:' || g, 5, 5,
    'upstream answered 503 for order ' || g || ' (attempt 5 of 5)',
    (ARRAY['builtins.ConnectionError', 'builtins.TimeoutError', 'builtins.KeyError',
           'jobqueue.errors.PermanentError', 'httpx.HTTPStatusError'])[1 + (g / 7) %% 5],
    'Traceback (most recent call last):\n  ...\nbuiltins.ConnectionError: 503\n',
    jsonb_build_array(jsonb_build_object(
        'attempt', 5, 'at', ts, 'worker_id', 'bench:1',
        'exception_class_path', 'builtins.ConnectionError', 'message', '503',
        'traceback', 'Traceback (most recent call last):\n  ...\n')),
    ts - interval '5 minutes', ts,
    CASE WHEN (g * 7919) %% 100 < 85 THEN 'pending'
         WHEN (g * 7919) %% 100 < 93 THEN 'replayed' ELSE 'discarded' END,
    CASE WHEN (g * 7919) %% 100 BETWEEN 85 AND 92 OR g %% 40 = 0 THEN 1 ELSE 0 END,
    NULL, NULL,
    -- A dozen causes per error class, as fingerprints group them (jobqueue.fingerprints).
    substr(md5(((g / 7) %% 5)::text || ':' || (g %% 13)::text), 1, 16),
    ''  -- a broker message's digest; none for a job's letter
FROM (
    SELECT g, now() - g * (interval '30 days' / %(rows)s) AS ts
    FROM generate_series(1::bigint, %(rows)s::bigint) AS g
) AS s
"""


# The jobs browser's table: a spread of states as a busy queue holds them (mostly done).
FILL_JOBS = """
INSERT INTO jobqueue_job (
    task_path, queue_name, priority, backend, args, kwargs, idempotency_key, state, run_after,
    attempts, max_attempts, lease_token, locked_until, locked_by, worker_ids, enqueued_at,
    started_at, last_attempted_at, finished_at, errors, return_value
)
SELECT
    'bench.tasks.job_' || lpad((g %% %(types)s)::text, 2, '0'),
    (ARRAY['default', 'mail', 'billing'])[1 + g %% 3], 0, 'default',
    jsonb_build_array(g), jsonb_build_object('order_id', g, 'password', 'hunter2'),
    'job:' || g, st,
    CASE WHEN st = 'ready' AND k < 94 THEN now() + interval '1 hour' ELSE ts END,
    CASE WHEN st = 'ready' AND k >= 93 THEN 2 WHEN st = 'ready' THEN 0 ELSE 1 END, 5,
    CASE WHEN st = 'running' THEN md5(g::text) END,
    CASE WHEN st = 'running' THEN now() + interval '30 seconds' END,
    CASE WHEN st = 'running' THEN 'bench:1' END,
    '["bench:1"]', ts - interval '1 minute', ts, ts,
    CASE WHEN st IN ('done', 'dead', 'cancelled') THEN ts END,
    CASE WHEN st = 'dead' OR (st = 'ready' AND k >= 93)
         THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'message',
              'upstream answered 503 for order ' || g, 'worker_id', 'bench:1'))
         ELSE '[]' END,
    CASE WHEN st = 'done' THEN 'null'::jsonb END
FROM (
    SELECT g, k, now() - g * (interval '30 days' / %(rows)s) AS ts,
           CASE WHEN k < 90 THEN 'done' WHEN k < 92 THEN 'dead' WHEN k < 95 THEN 'ready'
                WHEN k < 97 THEN 'running' WHEN k < 98 THEN 'cancelled' ELSE 'ready' END AS st
    FROM (SELECT g, (g * 7919) %% 100 AS k FROM generate_series(1::bigint, %(rows)s::bigint) g) a
) AS s
"""


# A week of timing rollups from a queue busier than a million jobs: every one of the 60 queue and
# task pairs finishes attempts every minute, in three run-time buckets and two queue-wait ones;
# each minute's rows are added to its hour's, as the store writes them.
FILL_TIMINGS = """
INSERT INTO jobqueue_jobtiming (span, minute, queue_name, task_path, kind, bucket, count, seconds)
SELECT 1, m, q, t, k, b, 1 + (p + b) %% 3, (1 + (p + b) %% 3) * 0.01 * b
FROM generate_series(date_trunc('minute', now()) - interval '7 days',
                     date_trunc('minute', now()), interval '1 minute') AS m,
     generate_series(0, 59) AS p,
     LATERAL (SELECT 'bench.tasks.job_' || lpad((p %% %(types)s)::text, 2, '0') AS t,
                     (ARRAY['default', 'mail', 'billing'])[1 + p %% 3] AS q) AS names,
     (VALUES ('run', 4), ('run', 5), ('run', 6), ('wait', 2), ('wait', 9)) AS kb(k, b);
INSERT INTO jobqueue_jobtiming (span, minute, queue_name, task_path, kind, bucket, count, seconds)
SELECT 60, date_trunc('hour', minute), queue_name, task_path, kind, bucket, sum(count),
       sum(seconds)
FROM jobqueue_jobtiming WHERE span = 1 GROUP BY 2, 3, 4, 5, 6;
"""


def median_ms(fn, repeat=REPEAT, warmup=2):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main():
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--replay", type=int, default=10_000)
    parser.add_argument("--keep", action="store_true", help="Keep the bench database.")
    parser.add_argument("--reuse", action="store_true", help="Reuse a kept, filled database.")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="rows for the jobs browser")
    parser.add_argument(
        "--timing-only",
        action="store_true",
        help="Only the jobs (for the health page's figures) and the timing pages.",
    )
    args = parser.parse_args()

    bench_url = database_url(BENCH_DB) if args.reuse else recreate_database(BENCH_DB)
    os.environ["DATABASE_URL"] = bench_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    try:
        if args.timing_only:
            timing_pages(args, None)
        else:
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

    from deadletters import counters, search, services, summaries
    from deadletters.roles import assign
    from jobqueue import store
    from jobqueue.models import DeadLetter
    from tests.factories import UserFactory

    # No setup_test_environment(): its instrumented template rendering (a context copy per
    # template for response.context) would be measured as server time.
    if not args.reuse:
        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        with connection.cursor() as cursor:
            # A bulk load goes around the counting triggers (a million updates of the same
            # hundred counter rows in one transaction); ensure() then counts once, as it would
            # after adding the console to a database that already holds dead letters.
            for sql in counters.drop_statements(connection.vendor):
                cursor.execute(sql)
            cursor.execute(FILL, {"rows": args.rows, "types": JOB_TYPES})
        counters.ensure(connection)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        print(f"filled {args.rows:,} dead letters in {time.perf_counter() - started:.1f}s")
    user = UserFactory(username="bench-admin")
    assign(user, "admin")
    client = Client()
    client.force_login(user)

    job_type = "bench.tasks.job_07"
    pending = DeadLetter.objects.filter(task_path=job_type, state="pending")
    per_type = pending.count()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT dead_lettered_at, id FROM jobqueue_deadletter WHERE task_path = %s "
            "AND state = 'pending' ORDER BY dead_lettered_at DESC, id DESC OFFSET %s LIMIT 1",
            [job_type, per_type * 9 // 10],
        )
        deep_at, deep_id = cursor.fetchone()
    from deadletters.selectors import LETTERS

    deep_cursor = LETTERS.encode(DeadLetter(pk=deep_id, dead_lettered_at=deep_at))
    letter_id = pending.order_by("-id").values_list("id", flat=True)[0]
    cause = pending.values_list("fingerprint", flat=True).first()

    def get(url, **params):
        def call():
            response = client.get(url, params)
            assert response.status_code == 200, (url, response.status_code)

        return call

    def sql(statement, params):
        def call():
            with connection.cursor() as cursor:
                cursor.execute(statement, params)
                cursor.fetchall()

        return call

    page_sql = (
        "SELECT id, task_path, queue_name, last_error, error_class, attempts, replays, state, "
        "dead_lettered_at FROM jobqueue_deadletter WHERE task_path = %s AND state = 'pending' "
        "{cursor} ORDER BY dead_lettered_at DESC, id DESC LIMIT 51"
    )
    cases = [
        (
            "overview (20 job types)",
            get("/deadletters/"),
            sql(
                "SELECT task_path, count(*) FROM jobqueue_deadletter WHERE state = 'pending' "
                "GROUP BY task_path",
                [],
            ),
            "GROUP BY task_path count",
        ),
        (
            f"list {job_type}, pending, first page",
            get("/deadletters/list/", job_type=job_type, state="pending"),
            sql(page_sql.format(cursor=""), [job_type]),
            "same 51 rows",
        ),
        (
            f"list {job_type}, pending, page at 90% ({per_type * 9 // 10:,} rows in)",
            get("/deadletters/list/", job_type=job_type, state="pending", after=deep_cursor),
            sql(
                page_sql.format(
                    cursor="AND (dead_lettered_at, id) < (%s, %s)",
                ),
                [job_type, deep_at, deep_id],
            ),
            "same 51 rows",
        ),
        (
            "list, all types, search 'order 123' (error and payload)",
            get("/deadletters/list/", q="order 123"),
            sql(
                f"SELECT id FROM jobqueue_deadletter WHERE {search.PG_MATCH} "
                "ORDER BY dead_lettered_at DESC, id DESC LIMIT 51",
                ["order 123"],
            ),
            "same search, bare",
        ),
        (
            "list, all types, search '503' (matches every letter)",
            get("/deadletters/list/", q="503"),
            sql(
                f"SELECT id FROM jobqueue_deadletter WHERE {search.PG_MATCH} "
                "ORDER BY dead_lettered_at DESC, id DESC LIMIT 51",
                ["503"],
            ),
            "same search, bare",
        ),
        (
            f"list {job_type}, one cause (fingerprint), pending",
            get("/deadletters/list/", job_type=job_type, state="pending", fingerprint=cause),
            sql(
                "SELECT id FROM jobqueue_deadletter WHERE task_path = %s AND fingerprint = %s "
                "AND state = 'pending' ORDER BY dead_lettered_at DESC, id DESC LIMIT 51",
                [job_type, cause],
            ),
            "same 51 rows",
        ),
        (
            f"causes of {job_type} (grouping by fingerprint)",
            lambda: summaries.causes(job_type),
            sql(
                "SELECT fingerprint, count(*) FROM jobqueue_deadletter WHERE task_path = %s "
                "AND state = 'pending' GROUP BY fingerprint",
                [job_type],
            ),
            "GROUP BY fingerprint count",
        ),
        (
            "list, all types, error class jobqueue.errors.PermanentError",
            get("/deadletters/list/", error_class="jobqueue.errors.PermanentError"),
            sql(
                "SELECT id FROM jobqueue_deadletter WHERE error_class = %s "
                "ORDER BY dead_lettered_at DESC, id DESC LIMIT 51",
                ["jobqueue.errors.PermanentError"],
            ),
            "same 51 rows",
        ),
        (
            "list, queue billing, pending, oldest first",
            get("/deadletters/list/", queue="billing", state="pending", order="oldest"),
            sql(
                "SELECT id FROM jobqueue_deadletter WHERE queue_name = %s AND state = 'pending' "
                "ORDER BY dead_lettered_at, id LIMIT 51",
                ["billing"],
            ),
            "same 51 rows",
        ),
        (
            f"list {job_type}, a date range 10-12 days ago",
            get(
                "/deadletters/list/",
                job_type=job_type,
                since=(date.today() - timedelta(days=12)).isoformat(),
                until=(date.today() - timedelta(days=10)).isoformat(),
            ),
            sql(
                "SELECT id FROM jobqueue_deadletter WHERE task_path = %s "
                "AND dead_lettered_at >= %s AND dead_lettered_at < %s "
                "ORDER BY dead_lettered_at DESC, id DESC LIMIT 51",
                [
                    job_type,
                    date.today() - timedelta(days=12),
                    date.today() - timedelta(days=10),
                ],
            ),
            "same 51 rows",
        ),
        (
            "select-all count (capped at 100,000)",
            get("/deadletters/list/count/", job_type=job_type, state="pending"),
            sql(
                "SELECT count(*) FROM (SELECT 1 FROM jobqueue_deadletter WHERE task_path = %s "
                "AND state = 'pending' LIMIT 100001) s",
                [job_type],
            ),
            "same capped count",
        ),
        (
            f"detail #{letter_id}",
            get(f"/deadletters/{letter_id}/"),
            sql("SELECT * FROM jobqueue_deadletter WHERE id = %s", [letter_id]),
            "SELECT by id",
        ),
    ]
    print(f"\n{args.rows:,} dead letters, {JOB_TYPES} job types; {job_type}: {per_type:,} pending")
    print(f"server time, median of {REPEAT} (ms)")
    print(f"{'page':<58} {'console':>9} {'baseline':>9} {'ratio':>6}  baseline")
    slowest = triage = 0.0
    for name, page_call, baseline_call, baseline_name in cases:
        page_ms = median_ms(page_call)
        base_ms = median_ms(baseline_call)
        slowest = max(slowest, page_ms)
        if "search" in name or "cause" in name:
            triage = max(triage, page_ms)
        print(
            f"{name:<58} {page_ms:>9.1f} {base_ms:>9.2f} {page_ms / base_ms:>6.1f}  {baseline_name}"
        )
    print(f"{'PASS' if slowest < 100 else 'MISS'}  every page under 100 ms (slowest {slowest:.1f})")
    print(
        f"{'PASS' if triage < 150 else 'MISS'}  cause grouping and search under 150 ms "
        f"(slowest {triage:.1f})"
    )

    ids = list(
        DeadLetter.objects.filter(state="pending", replays=0)
        .order_by("id")
        .values_list("id", flat=True)[: args.replay * 2]
    )
    run_ids, bare_ids = ids[: args.replay], ids[args.replay :]
    selection = services.freeze_selection(operator=user, action="replay", ids=run_ids)
    started = time.perf_counter()
    run = services.start_run(
        operator=user, selection=selection, reason="bench", rate=0, background=False
    )
    services.carry_out(run.pk, run.generation)
    run_seconds = time.perf_counter() - started
    run.refresh_from_db()
    assert run.done == args.replay, (run.done, run.skipped)
    batch = run.batch_size
    started = time.perf_counter()
    for i in range(0, len(bare_ids), batch):
        store.replay(bare_ids[i : i + batch])
    bare_seconds = time.perf_counter() - started
    print(
        f"\nreplay run of {args.replay:,} items "
        f"({run.batches} batches of {batch}, unlimited rate): "
        f"{run_seconds:.2f}s = {args.replay / run_seconds:,.0f} items/s; "
        f"bare store.replay of {len(bare_ids):,} in the same batches: {bare_seconds:.2f}s "
        f"(ratio {run_seconds / bare_seconds:.2f})"
    )
    print(f"{'PASS' if run_seconds < 30 else 'MISS'}  a {args.replay:,}-item replay run under 30 s")
    if args.jobs:
        jobs_browser(args, client)
        api_lists(user, client, job_type)
    timing_pages(args, client)


def jobs_browser(args, client):
    """The jobs browser at --jobs jobs: each state's first page and a deep one, the filters, a
    job's page; each beside the bare SELECT of its rows."""
    from django.db import connection

    if not args.reuse:
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(FILL_JOBS, {"rows": args.jobs, "types": JOB_TYPES})
            cursor.execute("VACUUM ANALYZE jobqueue_job")
        print(f"\nfilled {args.jobs:,} jobs in {time.perf_counter() - started:.1f}s")
    with connection.cursor() as cursor:
        cursor.execute("SELECT state, count(*) FROM jobqueue_job GROUP BY 1 ORDER BY 1")
        print("jobs by state: " + ", ".join(f"{s} {n:,}" for s, n in cursor.fetchall()))
        cursor.execute(
            "SELECT id FROM jobqueue_job WHERE state = 'done' ORDER BY id DESC OFFSET %s LIMIT 1",
            [args.jobs * 8 // 10],
        )
        deep_done = cursor.fetchone()[0]
        cursor.execute("SELECT max(id) FROM jobqueue_job WHERE state = 'dead'")
        dead_id = cursor.fetchone()[0]

    def get(url, **params):
        def call():
            response = client.get(url, params)
            assert response.status_code == 200, (url, response.status_code)

        return call

    def sql(where, params=()):
        def call():
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT * FROM jobqueue_job WHERE {where} ORDER BY id DESC LIMIT 51", params
                )
                cursor.fetchall()

        return call

    ready = "state = 'ready' AND run_after <= now()"
    cases = [
        ("jobs, all states, first page", get("/deadletters/jobs/"), sql("true")),
        *(
            (f"jobs, {state}, first page", get("/deadletters/jobs/", state=state), sql(where))
            for state, where in [
                ("ready", ready),
                ("scheduled", "state = 'ready' AND run_after > now() AND attempts = 0"),
                ("retrying", "state = 'ready' AND run_after > now() AND attempts > 0"),
                ("running", "state = 'running'"),
                ("done", "state = 'done'"),
                ("dead", "state = 'dead'"),
                ("cancelled", "state = 'cancelled'"),
            ]
        ),
        (
            "jobs, done, page 80% deep",
            get("/deadletters/jobs/", state="done", after=deep_done),
            sql("state = 'done' AND id < %s", [deep_done]),
        ),
        (
            "jobs, task bench.tasks.job_07",
            get("/deadletters/jobs/", task="bench.tasks.job_07"),
            sql("task_path = %s", ["bench.tasks.job_07"]),
        ),
        (
            "jobs, queue billing, running",
            get("/deadletters/jobs/", queue="billing", state="running"),
            sql("queue_name = 'billing' AND state = 'running'"),
        ),
        (
            "jobs, key job:123456",
            get("/deadletters/jobs/", key="job:123456"),
            sql("idempotency_key = 'job:123456'"),
        ),
        (
            "jobs, retrying, text '503 for order 9'",
            get("/deadletters/jobs/", state="retrying", q="503 for order 9"),
            sql(
                "state = 'ready' AND run_after > now() AND attempts > 0 "
                "AND errors::text ILIKE '%%503 for order 9%%'"
            ),
        ),
        (f"job #{dead_id}", get(f"/deadletters/jobs/{dead_id}/"), sql("id = %s", [dead_id])),
        # Fetched by the page once shown (it does not hold the page back).
        ("jobs, the tabs' counts", get("/deadletters/jobs/counts/"), sql(ready)),
    ]
    print(f"{'page':<58} {'console':>9} {'baseline':>9} {'ratio':>6}")
    slowest = triage = 0.0
    for name, page_call, baseline_call in cases:
        page_ms, base_ms = median_ms(page_call), median_ms(baseline_call)
        slowest = max(slowest, page_ms)
        if "search" in name or "cause" in name:
            triage = max(triage, page_ms)
        print(f"{name:<58} {page_ms:>9.1f} {base_ms:>9.2f} {page_ms / base_ms:>6.1f}")
    print(
        f"{'PASS' if slowest < 100 else 'MISS'}  every jobs-browser page under 100 ms "
        f"(slowest {slowest:.1f})"
    )


def api_lists(user, console, job_type):
    """The JSON API's list endpoints (issue 31), each beside the console page that lists the same
    rows, measured in the same run with a bearer token as a script sends it."""
    from django.test import Client

    from deadletters import tokens

    made = tokens.create(user, name="bench", scopes="read,act", channel="code")
    api = Client(headers={"Authorization": f"Bearer {made.text}"})

    def get(client, url, **params):
        def call():
            response = client.get(url, params)
            assert response.status_code == 200, (url, response.status_code, response.content[:200])

        return call

    cases = [
        ("letters by type", "/api/letters/types", {}, "/deadletters/", {}),
        (
            f"letters of {job_type}, pending",
            "/api/letters",
            {"job_type": job_type, "state": "pending"},
            "/deadletters/list/",
            {"job_type": job_type, "state": "pending"},
        ),
        (
            f"causes of {job_type}",
            "/api/letters/causes",
            {"job_type": job_type},
            "/deadletters/list/",
            {"job_type": job_type},
        ),
        ("jobs, all states", "/api/jobs", {}, "/deadletters/jobs/", {}),
        ("jobs, done", "/api/jobs", {"state": "done"}, "/deadletters/jobs/", {"state": "done"}),
        ("jobs, dead", "/api/jobs", {"state": "dead"}, "/deadletters/jobs/", {"state": "dead"}),
        ("replay runs", "/api/runs", {}, "/deadletters/audit/", {}),
        ("audit log", "/api/audit", {}, "/deadletters/audit/", {}),
        ("workflows", "/api/workflows", {}, "/deadletters/workflows/", {}),
        ("schedules", "/api/schedules", {}, "/deadletters/schedules/", {}),
    ]
    print(f"\nthe JSON API, server time, median of {REPEAT} (ms)")
    print(f"{'endpoint':<58} {'api':>9} {'console':>9} {'ratio':>6}")
    slowest = 0.0
    for name, url, params, page, page_params in cases:
        api_ms = median_ms(get(api, url, **params))
        page_ms = median_ms(get(console, page, **page_params))
        slowest = max(slowest, api_ms)
        print(f"{name:<58} {api_ms:>9.1f} {page_ms:>9.1f} {api_ms / page_ms:>6.2f}")
    print(
        f"{'PASS' if slowest < 100 else 'MISS'}  every API list endpoint under 100 ms "
        f"(slowest {slowest:.1f})"
    )


def timing_pages(args, client):
    """The health page and a task's timing page over each window, at --jobs jobs and a week of
    timing rollups; each beside the bare grouped SELECT of the same rollup rows."""
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Sum
    from django.test import Client

    from deadletters.roles import assign
    from jobqueue import timing
    from jobqueue.models import JobTiming
    from tests.factories import UserFactory

    if client is None:  # --timing-only: a database of its own making
        if not args.reuse:
            call_command("migrate", verbosity=0)
            with connection.cursor() as cursor:
                cursor.execute(FILL_JOBS, {"rows": args.jobs, "types": JOB_TYPES})
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.filter(username="bench-timing").first()
        if user is None:  # not made by an earlier --keep run
            user = UserFactory(username="bench-timing")
            assign(user, "admin")
        client = Client()
        client.force_login(user)
    if not args.reuse or not JobTiming.objects.exists():
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(FILL_TIMINGS, {"types": JOB_TYPES})
            cursor.execute("VACUUM ANALYZE")
        print(
            f"\nfilled {JobTiming.objects.count():,} timing rollup rows (a week) in "
            f"{time.perf_counter() - started:.1f}s"
        )

    def get(url, **params):
        def call():
            response = client.get(url, params)
            assert response.status_code == 200, (url, response.status_code)

        return call

    def sql(window, task=None):
        def call():
            from django.utils import timezone

            now = timezone.now()
            start = timing.window_start(now, timing.WINDOWS[window])
            rows = JobTiming.objects.filter(timing.spans(start, now))
            if task:
                rows = rows.filter(task_path=task)
            # The grouped read timing.timings() makes, as bare SQL.
            grouped = rows.values("queue_name", "task_path", "kind", "bucket").annotate(
                n=Sum("count"), s=Sum("seconds")
            )
            query, params = grouped.query.sql_with_params()
            with connection.cursor() as cursor:
                cursor.execute(query, params)
                cursor.fetchall()

        return call

    task = "bench.tasks.job_07"
    cases = [
        *(
            (
                f"timing of {task}, last {window}",
                get(f"/deadletters/health/tasks/{task}/", window=window),
                sql(window, task),
            )
            for window in timing.WINDOWS
        ),
        *(
            (f"health with timing, last {window}", get("/deadletters/health/", window=window),
             sql(window))
            for window in ("1h", "7d")
        ),
    ]  # fmt: skip
    print(f"{'page':<58} {'console':>9} {'baseline':>9} {'ratio':>6}")
    slowest = 0.0
    for name, page_call, baseline_call in cases:
        page_ms, base_ms = median_ms(page_call), median_ms(baseline_call)
        if name.startswith("timing"):
            slowest = max(slowest, page_ms)
        print(f"{name:<58} {page_ms:>9.1f} {base_ms:>9.2f} {page_ms / base_ms:>6.1f}")
    print(
        f"{'PASS' if slowest < 100 else 'MISS'}  every task timing page under 100 ms "
        f"(slowest {slowest:.1f})"
    )


if __name__ == "__main__":
    main()
