"""Outbox relay throughput on PostgreSQL, each figure beside a raw-SQL floor from the same run.

    uv run python bench/outbox.py [--messages 20000] [--rabbit-messages 20000] [--batch 500]
        [--webhook-messages 10000] [--webhook-latency 0.05] [--webhook-concurrency 256]

Drops and recreates its own database (BENCH_DB, default `redrive_outbox_bench`) on BENCH_PG
(default postgres://postgres@127.0.0.1:5432), migrates it, then for each destination loads the
outbox with COPY (every message keyed, distinct keys, so the claim's per-key check runs) and
measures:

1. jobs: real `manage.py runrelay --burst` subprocesses (1, then 2 at once) fanning each message
   out to one subscribed task (one keyed job per message) vs a psycopg loop running only the
   relay's own statements (claim, mark, the keyed unnest INSERT … ON CONFLICT DO NOTHING of the
   jobs: INSERT_KEYED_MANY), one transaction per batch;
2. rabbitmq (BENCH_AMQP, default amqp://guest:guest@127.0.0.1:5672/%2F): the relay publishing
   with confirms to a queue vs a raw pika loop with pipelined confirms (claim; basic_publish the
   whole batch on a SelectConnection; wait for the broker's acks; mark), the relay's own scheme;
3. webhook: the relay POSTing to a local receiver (a separate process answering each request
   after --webhook-latency seconds) with the destination's concurrency set to
   --webhook-concurrency vs a loop of raw http.client POSTs from a thread pool of that size (one
   kept-alive connection per thread) plus the claim and mark statements.

The relay's rate is messages / (last published_at - first claim), from the rows themselves; the
process's wall time (start-up included) is printed beside it. REDRIVE_LOG_LEVEL=WARNING for the
relay unless --log-level says otherwise. Targets: ≥ 5,000 messages/s to jobs (issue 6); to
RabbitMQ ≥ 5,000 messages/s and ≥ 60% of its floor, to a 50 ms webhook ≥ 2,000 messages/s
(issue 21). The machine may be shared: read the ratios to the floor, measured in the same run.
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
TARGET_RABBIT = 5_000.0
TARGET_RABBIT_OF_FLOOR = 0.60
TARGET_WEBHOOK = 2_000.0
WEBHOOK_SECRET = "bench-secret"

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
        "REDRIVE_LOG_LEVEL": level,
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

    statement = postgresql.OUTBOX_CLAIM
    return statement[: statement.rindex("RETURNING")] + "RETURNING m.id, m.payload"


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
                now = datetime.now(UTC)
                head = f'["{TASK_PATH}","default",0,"default","{now.isoformat()}",5,[],'
                document = ",".join(
                    f'{head}{json.dumps(payload)},"outbox:{message_id}:{TASK_PATH}"'
                    + ",null" * 6
                    + "]"
                    for message_id, payload in rows
                )
                conn.execute(postgresql.INSERT_KEYED_MANY, {"now": now, "rows": f"[{document}]"})
            done += len(rows)
    assert done == n, f"floor published {done} of {n}"
    return n / (time.monotonic() - started)


def floor_rabbit(n: int, batch: int, queue: str) -> float:
    """Raw pika, pipelined confirms: publish a claimed batch whole, wait for its acks, mark."""
    import pika
    from pika.adapters.select_connection import SelectConnection

    state = {"channel": None, "next_tag": 0, "unconfirmed": {}, "nacked": 0}

    def on_channel(channel):
        channel.confirm_delivery(on_confirm, callback=lambda _: ready(channel))

    def ready(channel):
        state["channel"] = channel
        connection.ioloop.stop()

    def on_confirm(frame):
        method, unconfirmed = frame.method, state["unconfirmed"]
        if not isinstance(method, pika.spec.Basic.Ack):
            state["nacked"] += 1
        if method.multiple:
            while unconfirmed and next(iter(unconfirmed)) <= method.delivery_tag:
                del unconfirmed[next(iter(unconfirmed))]
        else:
            unconfirmed.pop(method.delivery_tag, None)
        if not unconfirmed:
            connection.ioloop.stop()

    connection = SelectConnection(
        pika.URLParameters(AMQP),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda *_: connection.ioloop.stop(),
    )
    connection.ioloop.start()
    channel = state["channel"]
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
                state["next_tag"] += 1
                state["unconfirmed"][state["next_tag"]] = message_id
            connection.ioloop.start()  # until the last ack
            conn.execute(MARK, ([r[0] for r in rows], token))
            done += len(rows)
    elapsed = time.monotonic() - started
    connection.close()
    connection.ioloop.start()  # the close handshake; on_close stops the loop
    assert done == n and not state["nacked"], f"floor published {done} of {n}, {state['nacked']}"
    return n / elapsed


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


def receiver(latency: float):
    """The webhook receiver (run as its own process): answers every POST with 204 after
    `latency` seconds, connections kept alive, prints its port, then serves. asyncio and a
    minimal HTTP/1.1 reading, so that on a small machine the receiver is not the bottleneck."""
    import asyncio

    async def serve(reader, writer):
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = 0
                for header in head.split(b"\r\n"):
                    name, _, value = header.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                await asyncio.sleep(latency)
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())


def start_receiver(latency: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--receiver", "--webhook-latency", str(latency)],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/hooks"


def floor_webhook(n: int, batch: int, url: str, concurrency: int) -> float:
    """Raw http.client POSTs from a pool (a kept-alive connection per thread): claim a batch,
    send it through the pool, mark."""
    import hashlib
    import hmac
    import http.client
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlsplit

    target = urlsplit(url)
    local = threading.local()

    def post(row):
        message_id, payload = row
        body = json.dumps(payload).encode()
        if getattr(local, "conn", None) is None:
            local.conn = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        local.conn.request(
            "POST",
            target.path,
            body=body,
            headers={
                "Content-Type": "application/json",
                "Idempotency-Key": str(message_id),
                "X-Redrive-Signature": "sha256="
                + hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest(),
            },
        )
        response = local.conn.getresponse()
        response.read()
        assert 200 <= response.status < 300, response.status

    started, done = time.monotonic(), 0
    with raw() as conn, ThreadPoolExecutor(concurrency) as pool:
        while True:
            rows, token = claim(conn, batch)
            if not rows:
                break
            list(pool.map(post, rows))
            conn.execute(MARK, ([r[0] for r in rows], token))
            done += len(rows)
    assert done == n, f"floor published {done} of {n}"
    return n / (time.monotonic() - started)


def line(label: str, ours: float, floor: float, extra: str = ""):
    log(
        f"  {label:<34} {ours:>9,.0f} msg/s   floor {floor:>9,.0f} msg/s   "
        f"({ours / floor:.0%} of floor){extra}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rabbit-messages", type=int, default=20_000)
    parser.add_argument("--webhook-messages", type=int, default=10_000)
    parser.add_argument("--webhook-latency", type=float, default=0.05)
    # 2,000 messages/s at 50 ms each needs 100 requests in flight at the very least; with
    # threads on two cores the floor itself reaches ~1,850/s at 128 and ~2,400/s at 256.
    parser.add_argument("--webhook-concurrency", type=int, default=256)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--skip-jobs", action="store_true")
    parser.add_argument("--skip-rabbit", action="store_true")
    parser.add_argument("--skip-webhook", action="store_true")
    parser.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.receiver:
        return receiver(args.webhook_latency)
    os.chdir(ROOT)
    log(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    recreate_database(DB, migrate=True)

    if not args.skip_jobs:
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
        met = ours["rate"] >= TARGET_RABBIT and ours["rate"] / floor >= TARGET_RABBIT_OF_FLOOR
        mark = "PASS" if met else "MISS"
        log(
            f"  target ≥ {TARGET_RABBIT:,.0f} msg/s and ≥ {TARGET_RABBIT_OF_FLOOR:.0%} of floor: "
            f"{mark}"
        )
        rabbit_queue()

    if not args.skip_webhook:
        n, latency, width = args.webhook_messages, args.webhook_latency, args.webhook_concurrency
        log(
            f"\n3. relay → webhook, {n:,} messages, {latency * 1000:.0f} ms per request, "
            f"concurrency {width}"
        )
        server, url = start_receiver(latency)
        try:
            hook = {
                "ROUTES": {"hook.*": "webhook:bench"},
                "DESTINATIONS": {
                    "bench": {"url": url, "secret": WEBHOOK_SECRET, "concurrency": width}
                },
            }
            load(n, "hook.sent")
            floor = floor_webhook(n, args.batch, url, width)
            load(n, "hook.sent")
            ours = run_relay(n, config=hook, batch=args.batch, level=args.log_level)
        finally:
            server.kill()
            server.wait()
        line("1 relay", ours["rate"], floor, f"   wall {ours['wall']:.1f}s")
        mark = "PASS" if ours["rate"] >= TARGET_WEBHOOK else "MISS"
        log(f"  target ≥ {TARGET_WEBHOOK:,.0f} msg/s: {mark}")
    log(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
