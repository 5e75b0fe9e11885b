"""Outbox relay throughput on PostgreSQL, each figure beside a raw-SQL floor from the same run.

    uv run python bench/outbox.py [--messages 20000] [--rabbit-messages 5000] [--batch 500]

Drops and recreates its own database (BENCH_DB, default `redrive_outbox_bench`) on BENCH_PG
(default postgres://postgres@127.0.0.1:5432), migrates it, then for each destination loads the
outbox with COPY (every message keyed, distinct keys, so the claim's per-key check runs) and
measures:

1. jobs: real `manage.py runrelay --burst` subprocesses (1, then 2 at once) fanning each message
   out to one subscribed task (one keyed job per message) vs a psycopg loop running only the
   relay's own statements (claim, mark, unnest INSERT … ON CONFLICT DO NOTHING of the jobs), one
   transaction per batch;
2. rabbitmq (BENCH_AMQP, default amqp://guest:guest@127.0.0.1:5672/%2F): the relay publishing
   with confirms to a queue vs a loop of raw pika basic_publish with confirms plus the claim and
   mark statements.

The relay's rate is messages / (last published_at - first claim), from the rows themselves; the
process's wall time (start-up included) is printed beside it. JOBQUEUE_LOG_LEVEL=WARNING for the
relay unless --log-level says otherwise. Target (issue 6): ≥ 5,000 messages/s to jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import database_url, recreate_database  # noqa: E402

DB = os.environ.get("BENCH_DB", "redrive_outbox_bench")
DB_URL = database_url(DB)
AMQP = os.environ.get("BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672/%2F")
TASK_PATH = "bench.tasks.noop"
TARGET_JOBS = 5_000.0

COLUMNS = "topic, key, payload, state, created_at, available_at, attempts, errors"
MARK = """
UPDATE jobqueue_outbox SET state = 'published', published_at = now(), lease_token = NULL,
    locked_until = NULL, locked_by = NULL
WHERE id = ANY(%s) AND state = 'leased' AND lease_token = %s AND locked_until > now()
"""


def log(text=""):
    print(text, flush=True)


def raw() -> psycopg.Connection:
    return psycopg.connect(DB_URL, autocommit=True)


def load(n: int, topic: str):
    """n pending messages, keyed order:<i>, loaded with COPY into emptied, vacuumed tables."""
    with raw() as conn:
        conn.execute("TRUNCATE jobqueue_outbox, jobqueue_job RESTART IDENTITY CASCADE")
        now = datetime.now(UTC) - timedelta(seconds=1)
        with conn.cursor() as cur, cur.copy(f"COPY jobqueue_outbox ({COLUMNS}) FROM STDIN") as copy:
            for i in range(n):
                copy.write_row((topic, f"order:{i}", "{}", "pending", now, now, 0, "[]"))
        conn.execute("VACUUM ANALYZE jobqueue_outbox")
        conn.execute("VACUUM ANALYZE jobqueue_job")


def relay_rate(n: int) -> float:
    with raw() as conn:
        published, first, last = conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'published'), min(last_attempted_at), "
            "max(published_at) FROM jobqueue_outbox"
        ).fetchone()
    if published != n:
        raise SystemExit(f"only {published} of {n} messages were published")
    return n / (last - first).total_seconds()


def run_relay(n: int, *, config: dict, batch: int, level: str, relays: int = 1) -> dict:
    env = {
        **os.environ,
        "DATABASE_URL": DB_URL,
        "REDRIVE_OUTBOX": json.dumps(config),
        "JOBQUEUE_LOG_LEVEL": level,
    }
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "runrelay", "--burst", "--batch", str(batch)],
            cwd=ROOT,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(relays)
    ]
    for proc in procs:
        if proc.wait(timeout=600) != 0:
            raise SystemExit(f"relay exited {proc.returncode}")
    wall = time.monotonic() - started
    return {"rate": relay_rate(n), "wall": wall}


def claim_params(batch: int) -> dict:
    return {
        "now": datetime.now(UTC),
        "lease_until": datetime.now(UTC) + timedelta(seconds=30),
        "limit": batch,
        "token": uuid.uuid4().hex,
        "relay_id": "floor",
    }


def claim_sql() -> str:
    """The store's own claim statement, so the floor claims exactly as the relay does."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["DATABASE_URL"] = DB_URL
    import django

    django.setup()
    from jobqueue.store import postgresql

    return postgresql.OUTBOX_CLAIM.replace("RETURNING m.*", "RETURNING m.id, m.payload")


def claim(conn, batch: int):
    params = claim_params(batch)
    rows = conn.execute(claim_sql(), params).fetchall()
    return rows, params["token"]


def floor_jobs(n: int, batch: int) -> float:
    """The relay's own statements to jobs with nothing around them: claim; insert; mark."""
    claim_sql()  # sets Django up
    from jobqueue.store import postgresql

    started, done = time.monotonic(), 0
    with raw() as conn:
        while True:
            rows, token = claim(conn, batch)
            if not rows:
                break
            with conn.transaction():
                conn.execute(MARK, ([r[0] for r in rows], token))
                size = len(rows)
                conn.execute(
                    postgresql.OUTBOX_INSERT_JOBS,
                    {
                        "now": datetime.now(UTC),
                        "task_paths": [TASK_PATH] * size,
                        "queue_names": ["default"] * size,
                        "priorities": [0] * size,
                        "backends": ["default"] * size,
                        "args": ["[]"] * size,
                        "kwargs": [json.dumps(payload) for _, payload in rows],
                        "keys": [f"outbox:{message_id}:{TASK_PATH}" for message_id, _ in rows],
                        "max_attempts": [5] * size,
                    },
                )
            done += len(rows)
    assert done == n, f"floor published {done} of {n}"
    return n / (time.monotonic() - started)


def floor_rabbit(n: int, batch: int, queue: str) -> float:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(AMQP))
    channel = connection.channel()
    channel.confirm_delivery()
    started, done = time.monotonic(), 0
    with raw() as conn:
        while True:
            rows, token = claim(conn, batch)
            if not rows:
                break
            for message_id, payload in rows:
                channel.basic_publish(
                    "",
                    queue,
                    json.dumps(payload).encode(),
                    properties=pika.BasicProperties(
                        message_id=str(message_id), delivery_mode=2, content_type="application/json"
                    ),
                    mandatory=True,
                )
            conn.execute(MARK, ([r[0] for r in rows], token))
            done += len(rows)
    connection.close()
    assert done == n, f"floor published {done} of {n}"
    return n / (time.monotonic() - started)


def rabbit_queue(purge: bool = True) -> str:
    import pika

    queue = "redrive-bench-outbox"
    connection = pika.BlockingConnection(pika.URLParameters(AMQP))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    if purge:
        channel.queue_purge(queue)
    connection.close()
    return queue


def line(label: str, ours: float, floor: float, extra: str = ""):
    log(
        f"  {label:<34} {ours:>9,.0f} msg/s   floor {floor:>9,.0f} msg/s   "
        f"({ours / floor:.0%} of floor){extra}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rabbit-messages", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--skip-rabbit", action="store_true")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    log(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    recreate_database(DB, migrate=True)

    config = {"ROUTES": {"order.*": "jobs"}, "SUBSCRIBERS": {"order.created": [TASK_PATH]}}
    n = args.messages
    log(f"\n1. relay → jobs, {n:,} keyed messages, batch {args.batch}, one subscriber each")
    load(n, "order.created")
    floor = floor_jobs(n, args.batch)
    load(n, "order.created")
    one = run_relay(n, config=config, batch=args.batch, level=args.log_level)
    load(n, "order.created")
    two = run_relay(n, config=config, batch=args.batch, level=args.log_level, relays=2)
    with raw() as conn:
        jobs = conn.execute("SELECT count(*) FROM jobqueue_job").fetchone()[0]
    assert jobs == n, f"{jobs} jobs for {n} messages"
    mark = "PASS" if max(one["rate"], two["rate"]) >= TARGET_JOBS else "MISS"
    line("1 relay", one["rate"], floor, f"   wall {one['wall']:.1f}s")
    line("2 relays", two["rate"], floor, f"   wall {two['wall']:.1f}s")
    log(f"  target ≥ {TARGET_JOBS:,.0f} msg/s to jobs: {mark}")

    if not args.skip_rabbit:
        n = args.rabbit_messages
        log(f"\n2. relay → RabbitMQ ({AMQP.rsplit('@', 1)[-1]}), {n:,} messages, confirms on")
        queue = rabbit_queue()
        rabbit = {
            "ROUTES": {"audit.*": "rabbitmq:bench"},
            "DESTINATIONS": {"bench": {"url": AMQP, "exchange": "", "routing_key": queue}},
        }
        load(n, "audit.logged")
        floor = floor_rabbit(n, args.batch, queue)
        rabbit_queue()
        load(n, "audit.logged")
        ours = run_relay(n, config=rabbit, batch=args.batch, level=args.log_level)
        line("1 relay", ours["rate"], floor, f"   wall {ours['wall']:.1f}s")
        rabbit_queue()
    log(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
