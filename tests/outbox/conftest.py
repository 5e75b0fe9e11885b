"""Fixtures for the outbox: a real HTTP endpoint, relay processes, settings, RabbitMQ."""

import hashlib
import hmac
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.utils import timezone

from tests.conftest import Processes

SECRET = "test-webhook-secret"


@dataclass
class Received:
    message_id: str
    key: str | None
    topic: str
    payload: dict
    signed: bool  # the signature header matched an HMAC of the body with SECRET
    idempotency_key: str


class Clock:
    """The relay's clock, a minute ahead of the wall clock that stamps published rows."""

    def __init__(self):
        self.now = timezone.now() + timedelta(minutes=1)

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock():
    return Clock()


@dataclass
class HookServer:
    """A webhook receiver on 127.0.0.1 in a thread: records every request it answers.

    A payload may steer the answer: {"status": 400}, {"status": 429, "retry_after": "120"},
    {"delay": 1.0} (seconds before answering). `overlaps` lists message ids or keys that had
    two requests in flight at once; `most_at_once` is the most requests it ever had in flight.
    """

    received: list[Received] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    delay: float = 0.0
    in_flight: Counter = field(default_factory=Counter)
    most_at_once: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the relay expects

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                payload = json.loads(body)
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                message_id = self.headers["X-Redrive-Message-Id"]
                key = self.headers.get("X-Redrive-Key")
                flights = ["all", f"id:{message_id}"] + ([f"key:{key}"] if key else [])
                with server.lock:
                    for flight in flights:
                        server.in_flight[flight] += 1
                        if server.in_flight[flight] > 1 and flight != "all":
                            server.overlaps.append(flight)
                    server.most_at_once = max(server.most_at_once, server.in_flight["all"])
                    server.received.append(
                        Received(
                            message_id=message_id,
                            key=key,
                            topic=self.headers["X-Redrive-Topic"],
                            payload=payload,
                            signed=hmac.compare_digest(
                                expected, self.headers.get("X-Redrive-Signature", "")
                            ),
                            idempotency_key=self.headers["Idempotency-Key"],
                        )
                    )
                time.sleep(payload.get("delay", server.delay))
                with server.lock:
                    for flight in flights:
                        server.in_flight[flight] -= 1
                self.send_response(payload.get("status", 200))
                if "retry_after" in payload:
                    self.send_header("Retry-After", payload["retry_after"])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks"

    def ids(self) -> list[str]:
        with self.lock:
            return [r.message_id for r in self.received]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hook_server():
    server = HookServer().start()
    yield server
    server.stop()


def outbox_config(hook_url=None, **extra):
    """An OUTBOX setting routing `hook.*` to the test server and `order.*` to jobs."""
    config = {
        "ROUTES": {"order.*": "jobs", "hook.*": "webhook:hooks", "audit.*": "rabbitmq:events"},
        "DESTINATIONS": {
            "hooks": {
                "url": hook_url or "http://127.0.0.1:9/unused",
                "secret": SECRET,
                "connect_timeout": 2.0,
                "read_timeout": 5.0,
            },
            # Nothing listens there: the RabbitMQ tests point it at their broker.
            "events": {"url": "amqp://guest:guest@127.0.0.1:9/%2F", "exchange": "events"},
        },
        "SUBSCRIBERS": {
            "order.created": ["tests.tasks.effect", "tests.outbox.tasks.on_order_created"]
        },
        "MAX_ATTEMPTS": 3,
        "BACKOFF_BASE": 1.0,
        "BACKOFF_CAP": 60.0,
    }
    config.update(extra)
    return config


def relay_pool(tmp_path, config) -> Processes:
    """Real `manage.py runrelay` processes with this outbox configuration."""
    return Processes(tmp_path, "runrelay", env={"REDRIVE_OUTBOX": json.dumps(config)})


def log_of(proc) -> str:
    return Path(proc.log_path).read_text()


@pytest.fixture
def relays(tmp_path, transactional_db, hook_server):
    pool = relay_pool(tmp_path, outbox_config(hook_server.url))
    yield pool
    pool.stop_all()
