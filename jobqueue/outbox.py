"""Transactional outbox: record a message in the caller's transaction; a relay publishes it.

    from django.db import transaction
    from jobqueue import outbox

    with transaction.atomic():
        order = Order.objects.create(...)
        outbox.publish("order.created", {"order_id": order.id}, key=f"order:{order.id}")

If the transaction rolls back, the message never existed. Once it commits, a relay
(`manage.py runrelay`, or `manage.py runworker --relay`) publishes it at least once, with a
stable message id (the row id, as a string) that consumers deduplicate on.

Configuration (settings.REDRIVE["OUTBOX"]; the example project reads it as JSON from the
REDRIVE_OUTBOX environment variable):

    REDRIVE["OUTBOX"] = {
        # topic pattern (fnmatch: *, ?, [..]) -> destination; the first matching pattern wins.
        "ROUTES": {
            "order.*": "jobs",                # fan out to SUBSCRIBERS as jobs in this database
            "billing.*": "webhook:billing",   # HTTP POST to DESTINATIONS["billing"]
            "audit.*": "rabbitmq:events",     # RabbitMQ via DESTINATIONS["events"]
        },
        "DESTINATIONS": {
            "billing": {
                "url": "https://billing.example/hooks/redrive",
                "secret": "…",                # HMAC-SHA256 key for the signature header
                "connect_timeout": 3.0,       # seconds (or "timeout" for both; default 5)
                "read_timeout": 10.0,
                "headers": {},                # extra request headers
                "concurrency": 8,             # requests in flight at once (1 to 512)
            },
            "events": {
                "url": "amqp://guest:guest@127.0.0.1:5672/%2F",
                "exchange": "events",         # "" is the default exchange
                "routing_key": "{topic}",     # format fields: topic, key, message_id
                "mandatory": True,            # unroutable → transient failure, not silent loss
                "timeout": 5.0,               # seconds to connect, and for a batch's confirms
            },
        },
        # topic pattern -> task paths; each subscribed task gets one job per message, called
        # with the payload as keyword arguments: on_order_created(order_id=…).
        "SUBSCRIBERS": {"order.created": ["shop.tasks.send_confirmation", "shop.tasks.reserve"]},
        # Optional, defaults shown; the retry policy falls back to REDRIVE's.
        "BATCH_SIZE": 200, "LEASE_SECONDS": 30.0, "POLL_INTERVAL": 1.0,
        "MAX_ATTEMPTS": REDRIVE["MAX_ATTEMPTS"], "BACKOFF_BASE": …, "BACKOFF_CAP": …,
        "RETENTION_DAYS": 7,                  # `manage.py prune` default
        "RELAY_IN_WORKER": False,             # runworker runs a relay thread as with --relay
    }

A destination may override "max_attempts". Keep a destination's connect + read timeout under
half of LEASE_SECONDS: the relay extends its leases between messages, not during one. One topic
goes to one destination; `jobs` fans out to many tasks. What each destination sends:

- jobs: a job per subscribed task, idempotency key `outbox:<message id>:<task path>`, enqueued
  in the same transaction that marks the message published (so a republish never makes a
  second job and a lost lease makes none).
- webhook: POST of the JSON payload; headers Idempotency-Key and X-Redrive-Message-Id (the
  message id), X-Redrive-Topic, X-Redrive-Key (if any) and X-Redrive-Signature:
  `sha256=<hex HMAC-SHA256 of the exact body bytes with the secret>`. 2xx is success; 5xx,
  408, 429 (after its Retry-After), timeouts and connection errors retry; other 4xx are
  permanent.
- rabbitmq: publisher confirms on, a batch published whole before its confirms are awaited;
  message_id = the message id, delivery_mode 2 (persistent), content_type application/json,
  type = topic, headers {"key": …}.

Failures retry with the jobs' backoff (jobqueue.backoff.retry_delay); permanent ones (4xx,
unknown route, no subscribers) and exhausted ones become dead letters with task path
`outbox:<topic>`, kwargs = the payload, idempotency key = the message id. Replaying one from the
console republishes the same row, so the same message id.

Payloads are JSON objects (dicts): the `jobs` destination passes them as keyword arguments and
the dead letter keeps them as its kwargs. Keep them small: ids, not documents.

Per-key ordering: messages with the same key are published one at a time in id order. On
PostgreSQL `publish()` with a key takes a transaction-scoped advisory lock on the key, so
concurrent producers of one key commit in id order; publish keys in a consistent order when a
transaction publishes several (like any row locks). A dead-lettered message no longer holds its
key: the later ones flow on.
"""

from __future__ import annotations

import fnmatch

from django.db import transaction
from django.utils import timezone

from jobqueue.conf import setting


def route_for(topic: str) -> str | None:
    """The destination spec for a topic ("jobs", "webhook:<name>", …), or None if unrouted."""
    for pattern, destination in setting("OUTBOX", "ROUTES").items():
        if fnmatch.fnmatchcase(topic, pattern):
            return destination
    return None


def subscribers_for(topic: str) -> list[str]:
    tasks: dict[str, None] = {}
    for pattern, paths in setting("OUTBOX", "SUBSCRIBERS").items():
        if fnmatch.fnmatchcase(topic, pattern):
            tasks.update(dict.fromkeys([paths] if isinstance(paths, str) else paths))
    return list(tasks)


def publish(topic: str, payload: dict, *, key: str | None = None, using: str = "default") -> str:
    """Record a message in the current transaction; returns its message id.

    Call it inside the transaction.atomic() that makes the business change, so the message
    exists if and only if that change commits.
    """
    from jobqueue import store
    from jobqueue.store import outbox_messages as outbox_store

    if not isinstance(topic, str) or not topic or len(topic) > 255:
        raise ValueError("topic must be a non-empty string of at most 255 characters")
    if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
        raise ValueError("key must be None or a non-empty string of at most 255 characters")
    for name, value in (("topic", topic), ("key", key)):
        if value is not None and "\x00" in value:
            raise ValueError(f"{name} must not contain NUL (\\u0000)")
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a JSON object (dict), not {type(payload).__name__}")
    try:
        # Refused, as job arguments are, rather than stored on SQLite and refused by PostgreSQL.
        body = store.storable_json(payload, "payload")
    except (TypeError, ValueError) as exc:
        raise TypeError(f"payload must be JSON-serialisable and storable: {exc}") from exc
    limit = setting("MAX_PAYLOAD_BYTES")
    if len(body.encode()) > limit:
        raise ValueError(f"payload is {len(body.encode())} bytes, over the {limit}-byte limit")
    with transaction.atomic(using=using, savepoint=False):
        message_id = outbox_store.insert(topic, body, key=key, now=timezone.now(), using=using)
    return str(message_id)
