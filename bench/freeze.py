"""Freezing a 100,000-letter selection and previewing it, on SQLite or PostgreSQL, beside a bare
read of the same ids measured in the same run.

    uv run python bench/freeze.py [--rows 100000] [--postgres]

The two steps an operator's bulk action starts with (deadletters.actions.freeze with the ids
ticked, then the preview its answer carries, actions.describe), as the console, the API and
`manage.py act` call them, against `SELECT id FROM jobqueue_deadletter` of the same rows.
Target (issue 47): both under 1 s. SQLite: a temporary file; PostgreSQL: the database
`redrive_bench_freeze` beside the one DATABASE_URL names, dropped afterwards.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.benchdb import drop_database, recreate_database  # noqa: E402

BENCH_DB = os.environ.get("BENCH_FREEZE_DB", "redrive_bench_freeze")
REPEAT = 5

FILL = """
INSERT INTO jobqueue_deadletter (
    source, original_job_id, task_path, queue_name, priority, backend, args, kwargs,
    idempotency_key, max_attempts, attempts, last_error, error_class, traceback, errors,
    first_failed_at, dead_lettered_at, state, replays, fingerprint, message_digest
)
SELECT 'jobqueue', n, 'bench.tasks.job_' || (n % 20), 'default', 0, 'default', '[1]', '{{}}',
       'bench:' || n, 5, 5, 'boom', 'builtins.ValueError', 'tb', '[]', {now}, {now},
       CASE WHEN n % 10 = 0 THEN 'replayed' ELSE 'pending' END, n % 3, 'fp', 'md'
FROM {series}
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="redrive-bench-freeze-")
    os.environ["REDRIVE_VAR_DIR"] = folder
    if args.postgres:
        os.environ["DATABASE_URL"] = recreate_database(BENCH_DB)
    else:
        os.environ["DATABASE_URL"] = f"sqlite:///{folder}/freeze.sqlite3"
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection

    from deadletters import actions
    from jobqueue.models import AuditEntry, DeadLetter

    try:
        call_command("migrate", verbosity=0)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                series = f"generate_series(1, {args.rows}) AS g(n)"
                cursor.execute(FILL.format(now="now()", series=series))
                cursor.execute("ANALYZE jobqueue_deadletter")  # as autovacuum would by now
            else:
                series = (
                    "(WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g "
                    f"WHERE n < {args.rows}) SELECT n FROM g)"
                )
                cursor.execute(FILL.format(now="datetime('now')", series=series))
        user = User.objects.create_superuser("bench", "bench@example.com", "bench")
        ids = [str(pk) for pk in DeadLetter.objects.order_by("pk").values_list("pk", flat=True)]

        def freeze():
            return actions.freeze(
                "letters.replay", user=user, channel=AuditEntry.Channel.API, data={"ids": ids}
            )

        def bare():
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM jobqueue_deadletter ORDER BY id")
                return cursor.fetchall()

        selection = freeze()
        cases = [
            ("freeze 100,000 ticked ids", freeze),
            ("preview of the frozen selection", lambda: actions.describe(selection)),
        ]
        base_ms = median_ms(bare)
        print(f"\n{len(ids):,} dead letters on {connection.vendor}; median of {REPEAT} (ms)")
        # Other work on a shared box skews every figure: say how busy it was.
        print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
        print(f"{'step':<36} {'ms':>8} {'baseline':>9} {'ratio':>6}")
        total = 0.0
        for name, call in cases:
            ms = median_ms(call)
            total += ms
            print(f"{name:<36} {ms:>8.1f} {base_ms:>9.1f} {ms / base_ms:>6.1f}")
        verdict = "PASS" if total < 1000 else "MISS"
        print(f"{verdict}  freeze and preview under 1 s ({total:.0f} ms)")
        print(f"load average {os.getloadavg()[0]:.2f}")
    finally:
        if args.postgres:
            connection.close()
            drop_database(BENCH_DB)


def median_ms(call) -> float:
    call()  # warm-up
    times = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    main()
