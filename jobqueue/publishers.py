"""Where the relay sends outbox messages: local jobs, a webhook, RabbitMQ.

A publisher turns each message into an outcome: None (the destination has it) or an exception
the relay classifies with jobqueue.errors.classify — PermanentError → dead letter at once,
RateLimited → retry after the destination's delay, anything else → retry with backoff.
Publishers never raise for a single message's failure; settings.OUTBOX documents the routes.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import ssl
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from jobqueue import store
from jobqueue.errors import PermanentError, RateLimited, TransientError
from jobqueue.models import OutboxMessage
from jobqueue.outbox import setting, subscribers_for

logger = logging.getLogger("jobqueue.relay")


class UnknownRoute(PermanentError):
    """No route matches the topic, or it names a destination that is not configured."""


class NoSubscribers(PermanentError):
    """The topic goes to `jobs` but no task subscribes to it: nothing would receive it."""


class Rejected(PermanentError):
    """The destination refused the message in a way a retry cannot change (most 4xx)."""


class Unavailable(TransientError):
    """The destination could not take the message now (timeout, connection, 5xx, unroutable)."""


class Publisher:
    # True: publish() writes to the outbox's own database and runs inside the transaction that
    # marks the messages published, so a lost lease or a crash leaves no effect at all.
    transactional = False
    max_attempts: int | None = None
    # Set when the last failure was the connection itself (refused, timed out, dropped): the
    # relay then fails the rest of the batch with it instead of waiting on each message.
    down = False

    def publish(self, messages: Sequence[OutboxMessage]) -> dict[int, BaseException | None]:
        raise NotImplementedError

    def close(self):
        """Drop connections; the next publish reconnects."""


class Unrouted(Publisher):
    """Stands in for a missing or broken route so each of its messages is dead-lettered."""

    def __init__(self, reason: str):
        self.reason = reason

    def publish(self, messages):
        return {m.pk: UnknownRoute(self.reason) for m in messages}


# --- jobs ---------------------------------------------------------------------------------


class JobsPublisher(Publisher):
    """Fan out to the subscribed tasks as jobs, key `outbox:<message id>:<task path>`.

    The key makes a republish a no-op (enqueue returns the live job holding it), and the
    inserts commit with the published mark, so a message is never half fanned out.
    """

    transactional = True

    def __init__(self, config=None, *, using="default"):
        config = config or {}
        self.max_attempts = config.get("max_attempts")
        self.using = using
        self._tasks: dict[str, tuple[str, int, int]] = {}

    def _job_options(self, path: str) -> tuple[str, int, int]:
        """Queue, priority and attempt budget the subscribed task declares (cached).

        A task that does not import still gets its job, on the default queue: the worker
        dead-letters it as UnknownTask, visibly, instead of the relay dropping it.
        """
        if path not in self._tasks:
            from jobqueue.backend import load_task
            from jobqueue.conf import policy

            try:
                task = load_task(path)
            except (ImportError, AttributeError, TypeError, ValueError):
                self._tasks[path] = ("default", 0, policy("MAX_ATTEMPTS"))
            else:
                budget = getattr(task, "attempt_budget", None) or policy("MAX_ATTEMPTS")
                self._tasks[path] = (task.queue_name, task.priority, budget)
        return self._tasks[path]

    def plan(self, messages):
        """Jobs per message, or the reason it cannot be delivered; no database access."""
        jobs: dict[int, list[store.NewJob]] = {}
        failed: dict[int, BaseException] = {}
        for message in messages:
            tasks = subscribers_for(message.topic)
            if not tasks:
                failed[message.pk] = NoSubscribers(
                    f"no task subscribes to {message.topic!r} (settings.OUTBOX['SUBSCRIBERS'])"
                )
                continue
            jobs[message.pk] = [
                store.NewJob(
                    task_path=path,
                    kwargs=message.payload,
                    queue_name=queue_name,
                    priority=priority,
                    idempotency_key=f"outbox:{message.message_id}:{path}",
                    max_attempts=budget,
                )
                for path in tasks
                for queue_name, priority, budget in [self._job_options(path)]
            ]
        return jobs, failed

    def write(self, jobs: Sequence[store.NewJob]):
        from jobqueue.store import outbox_messages as outbox_store

        outbox_store.enqueue_jobs(jobs, using=self.using)

    def publish(self, messages):
        jobs, failed = self.plan(messages)
        self.write([job for planned in jobs.values() for job in planned])
        return {m.pk: failed.get(m.pk) for m in messages}


# --- webhook ------------------------------------------------------------------------------

SIGNATURE_HEADER = "X-Redrive-Signature"
RETRYABLE_STATUS = {408, 425, 429}


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Retry-After as delay-seconds or an HTTP date; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


def timeouts(config: dict) -> tuple[float, float]:
    """A destination's (connect, read) timeouts: each defaults to "timeout", itself 10 s."""
    timeout = float(config.get("timeout", 10.0))
    return (
        float(config.get("connect_timeout", timeout)),
        float(config.get("read_timeout", timeout)),
    )


class WebhookPublisher(Publisher):
    """POST each message's JSON payload, signed, over one kept-alive connection."""

    def __init__(self, name: str, config: dict):
        if not config.get("url"):
            raise ValueError(f"webhook destination {name!r} has no url")
        if not config.get("secret"):
            raise ValueError(f"webhook destination {name!r} has no secret to sign with")
        self.name = name
        self.url = urlsplit(config["url"])
        if self.url.scheme not in ("http", "https"):
            raise ValueError(f"webhook destination {name!r}: url must be http or https")
        self.path = (self.url.path or "/") + (f"?{self.url.query}" if self.url.query else "")
        self.secret = config["secret"]
        self.connect_timeout, self.read_timeout = timeouts(config)
        self.headers = dict(config.get("headers", {}))
        self.max_attempts = config.get("max_attempts")
        self._conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self._conn is None:
            host, port = self.url.hostname, self.url.port
            if self.url.scheme == "https":
                conn = http.client.HTTPSConnection(
                    host, port, timeout=self.connect_timeout, context=ssl.create_default_context()
                )
            else:
                conn = http.client.HTTPConnection(host, port, timeout=self.connect_timeout)
            conn.connect()
            # The connect timeout bounded the handshake; the read timeout bounds each wait for
            # the server from here on.
            conn.sock.settimeout(self.read_timeout)
            self._conn = conn
        return self._conn

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def publish(self, messages):
        return {m.pk: self.post(m) for m in messages}

    def post(self, message: OutboxMessage) -> BaseException | None:
        body = store.dumps(message.payload).encode()
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "Idempotency-Key": message.message_id,
            "X-Redrive-Message-Id": message.message_id,
            "X-Redrive-Topic": message.topic,
            SIGNATURE_HEADER: signature(self.secret, body),
        }
        if message.key is not None:
            headers["X-Redrive-Key"] = message.key
        self.down = False
        for fresh in (False, True):
            reused = self._conn is not None
            try:
                conn = self._connect()
                conn.request("POST", self.path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as exc:
                self.close()
                # A kept-alive connection the server closed while idle: one fresh try, not a
                # failed attempt. (A POST may repeat; the Idempotency-Key covers that.)
                if reused and not fresh:
                    continue
                self.down = True
                return Unavailable(f"webhook {self.name}: {type(exc).__name__}: {exc}")
            except (OSError, http.client.HTTPException) as exc:  # timeouts are OSError
                self.close()
                self.down = True
                return Unavailable(f"webhook {self.name}: {type(exc).__name__}: {exc}")
            if response.will_close:
                self.close()
            return self._outcome(response)
        raise AssertionError("unreachable")

    def _outcome(self, response) -> BaseException | None:
        status = response.status
        if 200 <= status < 300:
            return None
        text = f"webhook {self.name}: HTTP {status} {response.reason}"
        if status == 429:
            delay = retry_after_seconds(response.getheader("Retry-After"))
            return RateLimited(delay, text) if delay is not None else Unavailable(text)
        if status >= 500 or status in RETRYABLE_STATUS:
            return Unavailable(text)
        return Rejected(text)  # 3xx (not followed) and the other 4xx


# --- RabbitMQ -----------------------------------------------------------------------------


class RabbitMQPublisher(Publisher):
    """Publish with confirms: basic_publish returns only once the broker has the message."""

    def __init__(self, name: str, config: dict):
        if not config.get("url"):
            raise ValueError(f"rabbitmq destination {name!r} has no url")
        import pika

        self.pika = pika
        self.name = name
        self.parameters = pika.URLParameters(config["url"])
        timeout = float(config.get("timeout", 10.0))
        self.parameters.socket_timeout = timeout
        self.parameters.blocked_connection_timeout = timeout
        self.parameters.connection_attempts = 1
        self.exchange = config.get("exchange", "")
        self.routing_key = config.get("routing_key", "{topic}")
        self.mandatory = bool(config.get("mandatory", True))
        self.max_attempts = config.get("max_attempts")
        self._connection = None
        self._channel = None

    def _open_channel(self):
        if self._channel is None or not self._channel.is_open:
            self.close()
            self._connection = self.pika.BlockingConnection(self.parameters)
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
        return self._channel

    def close(self):
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception as exc:  # noqa: BLE001 - closing a broken connection may fail too
                logger.debug("event=rabbitmq_close_failed error=%s", exc)

    def publish(self, messages):
        outcomes: dict[int, BaseException | None] = {}
        self.down = False
        failure: BaseException | None = None
        for message in messages:
            if self.down:
                outcomes[message.pk] = failure
                continue
            outcomes[message.pk] = failure = self._publish_one(message)
            self.down = failure is not None and self._channel is None
        return outcomes

    def _publish_one(self, message) -> BaseException | None:
        pika = self.pika
        properties = pika.BasicProperties(
            message_id=message.message_id,
            delivery_mode=pika.DeliveryMode.Persistent,
            content_type="application/json",
            type=message.topic,
            headers={"key": message.key} if message.key is not None else None,
        )
        routing_key = self.routing_key.format(
            topic=message.topic, key=message.key or "", message_id=message.message_id
        )
        try:
            self._open_channel().basic_publish(
                self.exchange,
                routing_key,
                store.dumps(message.payload).encode(),
                properties=properties,
                mandatory=self.mandatory,
            )
        except pika.exceptions.UnroutableError:
            return Unavailable(
                f"rabbitmq {self.name}: no queue bound for exchange {self.exchange!r} "
                f"routing key {routing_key!r}"
            )
        except pika.exceptions.NackError:
            return Unavailable(f"rabbitmq {self.name}: the broker nacked the message")
        except pika.exceptions.ChannelClosedByBroker as exc:
            self.close()
            if exc.reply_code == 404:  # no such exchange: a configuration error
                return Rejected(f"rabbitmq {self.name}: {exc.reply_text}")
            return Unavailable(f"rabbitmq {self.name}: channel closed: {exc.reply_text}")
        except (pika.exceptions.AMQPError, OSError) as exc:
            self.close()
            return Unavailable(f"rabbitmq {self.name}: {type(exc).__name__}: {exc}")
        return None


# --- routing ------------------------------------------------------------------------------

KINDS = {"webhook": WebhookPublisher, "rabbitmq": RabbitMQPublisher}


def build(spec: str | None, *, using: str = "default") -> Publisher:
    """The publisher for a route spec ("jobs", "webhook:<name>", "rabbitmq:<name>")."""
    if spec is None:
        return Unrouted("no route in settings.OUTBOX['ROUTES'] matches the topic")
    kind, _, name = spec.partition(":")
    destinations = setting("DESTINATIONS")
    if kind == "jobs":
        return JobsPublisher(destinations.get(name) if name else None, using=using)
    if kind not in KINDS:
        return Unrouted(f"route {spec!r}: unknown destination kind {kind!r}")
    if name not in destinations:
        return Unrouted(f"route {spec!r}: no {name!r} in settings.OUTBOX['DESTINATIONS']")
    try:
        return KINDS[kind](name, destinations[name])
    except ValueError as exc:
        return Unrouted(f"route {spec!r}: {exc}")
