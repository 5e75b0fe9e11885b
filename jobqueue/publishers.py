"""Where the relay sends outbox messages: local jobs, a webhook, RabbitMQ.

A publisher turns each message into an outcome: None (the destination has it) or an exception
the relay classifies with jobqueue.errors.classify — PermanentError → dead letter at once,
RateLimited → retry after the destination's delay, anything else → retry with backoff.
Publishers never raise for a single message's failure; REDRIVE["OUTBOX"] documents the routes.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import math
import os
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.errors import PermanentError, RateLimited, TransientError
from jobqueue.faults import FaultPoints
from jobqueue.logfmt import log_line
from jobqueue.models import OutboxMessage
from jobqueue.outbox import subscribers_for

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
    # Set (≥ 1): the relay sends a batch's messages one post() each through executor(), a pool
    # of this many threads; unset (0): it hands the whole batch to publish() at once.
    concurrency = 0

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

            try:
                task = load_task(path)
            except (ImportError, AttributeError, TypeError, ValueError):
                self._tasks[path] = ("default", 0, setting("MAX_ATTEMPTS"))
            else:
                budget = getattr(task, "attempt_budget", None) or setting("MAX_ATTEMPTS")
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
                    f"no task subscribes to {message.topic!r} (REDRIVE['OUTBOX']['SUBSCRIBERS'])"
                )
                continue
            # The payload passed publish()'s size check: its JSON is made once, for every
            # subscriber's job.
            encoded = ("[]", store.dumps(message.payload))
            jobs[message.pk] = [
                store.NewJob(
                    task_path=path,
                    kwargs=message.payload,
                    encoded=encoded,
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


DEFAULT_CONCURRENCY = 8
MAX_CONCURRENCY = 512


# Seconds a destination may take to connect, and then to answer (a webhook) or confirm a batch
# (RabbitMQ), unless its settings say otherwise. Both together stay under half the relay's
# default lease (OUTBOX["LEASE_SECONDS"], 30 s), which the relay only renews between sends.
DEFAULT_TIMEOUT = 5.0


def timeouts(config: dict) -> tuple[float, float]:
    """A destination's (connect, read) timeouts: each defaults to "timeout", itself 5 s."""
    timeout = float(config.get("timeout", DEFAULT_TIMEOUT))
    return (
        float(config.get("connect_timeout", timeout)),
        float(config.get("read_timeout", timeout)),
    )


class WebhookPublisher(Publisher):
    """POST each message's JSON payload, signed; up to `concurrency` at once (default 8).

    A batch holds at most one message per key (the claim's rule), so sending its messages side
    by side never puts two of one key in flight. Each sending thread keeps its own kept-alive
    connection (http.client connections are not thread-safe).
    """

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
        concurrency = config.get("concurrency", DEFAULT_CONCURRENCY)
        if type(concurrency) is not int or not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(
                f"webhook destination {name!r}: concurrency must be an integer from 1 to "
                f"{MAX_CONCURRENCY}, not {concurrency!r}"
            )
        self.concurrency = concurrency
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: set[http.client.HTTPConnection] = set()
        self._pool: ThreadPoolExecutor | None = None

    def executor(self) -> ThreadPoolExecutor:
        """The bounded pool the relay submits this destination's sends to (made on first use)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix=f"webhook-{self.name}"
            )
        return self._pool

    def _connect(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
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
            self._local.conn = conn
            with self._lock:
                self._connections.add(conn)
        return conn

    def _drop(self):
        """Close this thread's connection (after an error or a server's Connection: close)."""
        conn, self._local.conn = getattr(self._local, "conn", None), None
        if conn is not None:
            conn.close()
            with self._lock:
                self._connections.discard(conn)

    def close(self):
        """Called by the relay with no send in flight: stop the pool, close every connection."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            conns, self._connections = self._connections, set()
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def publish(self, messages):
        """Sequentially, in this thread (the relay itself sends through executor())."""
        return {m.pk: self.post(m) for m in messages}

    def post(self, message: OutboxMessage) -> BaseException | None:
        """Send one message; thread-safe. A failure of the connection itself comes back marked
        `down` (see destination_down) so the relay fails the unsent rest of the batch at once."""
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
        for fresh in (False, True):
            reused = getattr(self._local, "conn", None) is not None
            try:
                conn = self._connect()
                conn.request("POST", self.path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as exc:
                self._drop()
                # A kept-alive connection the server closed while idle: one fresh try, not a
                # failed attempt. (A POST may repeat; the Idempotency-Key covers that.)
                if reused and not fresh:
                    continue
                return _down(Unavailable(f"webhook {self.name}: {type(exc).__name__}: {exc}"))
            except (OSError, http.client.HTTPException) as exc:  # timeouts are OSError
                self._drop()
                return _down(Unavailable(f"webhook {self.name}: {type(exc).__name__}: {exc}"))
            if response.will_close:
                self._drop()
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


def _down(exc: BaseException) -> BaseException:
    exc.destination_down = True
    return exc


def destination_down(outcome: BaseException | None) -> bool:
    """The failure was the connection itself (refused, timed out, dropped), not this message."""
    return getattr(outcome, "destination_down", False)


# --- RabbitMQ -----------------------------------------------------------------------------

# Crash drill inside the broker publisher (REDRIVE_PUBLISHER_FAULT=confirm_received): SIGKILL
# when a batch's first confirm arrives, so the broker holds messages the relay never marked.
fault_point = FaultPoints("REDRIVE_PUBLISHER_FAULT", {"confirm_received"}, "relay")


class RabbitMQPublisher(Publisher):
    """Publish a whole batch, then wait for the broker's confirms (pipelined, not one by one).

    pika's SelectConnection, driven from the relay's thread only while a batch is out: every
    message gets a delivery tag, Basic.Ack/Nack (possibly `multiple`) settle the tags, a
    Basic.Return (mandatory, unroutable) makes its message fail. Exactly the acknowledged
    messages come back as published; nacked, returned, timed-out and connection-lost ones come
    back as failures, so the relay retries only those, under the same message id.
    """

    def __init__(self, name: str, config: dict):
        if not config.get("url"):
            raise ValueError(f"rabbitmq destination {name!r} has no url")
        import pika
        from pika.adapters.select_connection import IOLoop

        self.pika = pika
        self.name = name
        self.parameters = pika.URLParameters(config["url"])
        self.timeout = float(config.get("timeout", DEFAULT_TIMEOUT))
        self.parameters.socket_timeout = self.timeout
        self.parameters.blocked_connection_timeout = self.timeout
        self.parameters.connection_attempts = 1
        # Shown by `rabbitmqctl list_connections client_properties` and the management UI,
        # unless the url's client_properties name the connection already.
        self.parameters.client_properties = {
            "connection_name": f"redrive outbox {name} pid {os.getpid()}",
            **(self.parameters.client_properties or {}),
        }
        self.exchange = config.get("exchange", "")
        self.routing_key = config.get("routing_key", "{topic}")
        self.mandatory = bool(config.get("mandatory", True))
        self.max_attempts = config.get("max_attempts")
        self._ioloop = IOLoop()
        self._connection = None
        self._channel = None
        self._opening = None
        self._failure: BaseException | None = None
        self._done: Callable[[], bool] | None = None
        self._reset_batch()

    def _reset_batch(self):
        self._unconfirmed: dict[int, OutboxMessage] = {}  # delivery tag → message, in tag order
        self._outcomes: dict[int, BaseException | None] = {}
        self._returned: dict[str, str] = {}  # message id → routing key the broker returned
        self._confirmed_any = False

    # --- driving the I/O loop ------------------------------------------------------------

    def _run_until(self, done: Callable[[], bool], deadline: float) -> bool:
        """Run the I/O loop until done() or the deadline; True if done."""
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._done = done
            timer = self._ioloop.call_later(remaining, self._ioloop.stop)
            try:
                self._ioloop.start()
            finally:
                self._done = None
                self._ioloop.remove_timeout(timer)
        return True

    def _poke(self):
        if self._done is not None and self._done():
            self._ioloop.stop()

    def _drain(self):
        """One pass of the loop: notice a connection the broker closed while the relay idled
        (the loop, and so heartbeats, run only while a batch is out)."""
        timer = self._ioloop.call_later(0, self._ioloop.stop)
        try:
            self._ioloop.start()
        finally:
            self._ioloop.remove_timeout(timer)

    # --- connection ----------------------------------------------------------------------

    def _open(self, deadline: float):
        if self._channel is not None:
            self._drain()
            if self._channel is not None:
                return self._channel
        self.close()
        self._failure = None
        self._connection = self.pika.SelectConnection(
            self.parameters,
            on_open_callback=self._on_connection_open,
            on_open_error_callback=self._on_connection_open_error,
            on_close_callback=self._on_connection_closed,
            custom_ioloop=self._ioloop,
        )
        if not self._run_until(lambda: self._channel is not None or self._failure, deadline):
            self.close()
            raise _down(Unavailable(f"rabbitmq {self.name}: no connection within the timeout"))
        if self._channel is None:
            raise self._failure
        return self._channel

    def _on_connection_open(self, connection):
        connection.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel):
        self._opening = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(self._on_confirm, callback=self._on_confirm_select)

    def _on_confirm_select(self, _frame):
        self._channel, self._opening = self._opening, None
        self._next_tag = 0
        self._poke()

    def _on_connection_open_error(self, _connection, error):
        self._connection = None
        self._lost(_down(Unavailable(f"rabbitmq {self.name}: {type(error).__name__}: {error}")))

    def _on_connection_closed(self, _connection, reason):
        self._connection = None
        self._lost(
            _down(Unavailable(f"rabbitmq {self.name}: connection closed: {_reason(reason)}"))
        )

    def _on_channel_closed(self, _channel, reason):
        exceptions = self.pika.exceptions
        if isinstance(reason, exceptions.ChannelClosedByClient):
            return
        if isinstance(reason, exceptions.ChannelClosedByBroker) and reason.reply_code == 404:
            failure = Rejected(f"rabbitmq {self.name}: {reason.reply_text}")  # no such exchange
        elif isinstance(reason, exceptions.ConnectionClosed):  # the channel went with it
            failure = Unavailable(f"rabbitmq {self.name}: connection closed: {_reason(reason)}")
        else:
            failure = Unavailable(f"rabbitmq {self.name}: channel closed: {_reason(reason)}")
        self._lost(_down(failure))
        # A fresh channel comes with a fresh connection on the next batch.
        if self._connection is not None and self._connection.is_open:
            self._connection.close()

    def _lost(self, failure: BaseException):
        """The connection or channel is gone: every message it had not confirmed fails."""
        self._failure = failure
        self._channel = self._opening = None
        for message in self._unconfirmed.values():
            self._outcomes[message.pk] = failure
        self._unconfirmed.clear()
        self._poke()

    def close(self):
        connection, self._connection, self._channel, self._opening = (
            self._connection,
            None,
            None,
            None,
        )
        if connection is not None and not (connection.is_closed or connection.is_closing):
            try:
                connection.close()
                # Let the close handshake out (bounded) so the broker does not log an abrupt end.
                self._run_until(lambda: connection.is_closed, time.monotonic() + 1.0)
            except Exception as exc:  # noqa: BLE001 - closing a broken connection may fail too
                log_line(logger, logging.DEBUG, "rabbitmq_close_failed", error=exc)

    # --- confirms ------------------------------------------------------------------------

    def _on_return(self, _channel, method, properties, _body):
        self._returned[properties.message_id] = method.routing_key

    def _on_confirm(self, frame):
        if not self._confirmed_any:
            self._confirmed_any = True
            fault_point("confirm_received")
        method = frame.method
        acked = isinstance(method, self.pika.spec.Basic.Ack)
        tag = method.delivery_tag
        if method.multiple:  # every tag up to this one
            while self._unconfirmed:
                first = next(iter(self._unconfirmed))
                if first > tag:
                    break
                self._settle(self._unconfirmed.pop(first), acked)
        elif (message := self._unconfirmed.pop(tag, None)) is not None:
            self._settle(message, acked)
        self._poke()

    def _settle(self, message: OutboxMessage, acked: bool):
        if not acked:
            outcome = Unavailable(f"rabbitmq {self.name}: the broker nacked the message")
        elif message.message_id in self._returned:
            outcome = Unavailable(
                f"rabbitmq {self.name}: no queue bound for exchange {self.exchange!r} "
                f"routing key {self._returned[message.message_id]!r}"
            )
        else:
            outcome = None
        self._outcomes[message.pk] = outcome

    # --- publishing ----------------------------------------------------------------------

    def publish(self, messages):
        pika = self.pika
        # Formatted first: a bad routing_key template is a bug recorded on every message,
        # before anything is sent.
        routing_keys = [
            self.routing_key.format(topic=m.topic, key=m.key or "", message_id=m.message_id)
            for m in messages
        ]
        self._reset_batch()
        try:
            channel = self._open(time.monotonic() + self.timeout)
        except (Unavailable, Rejected) as exc:
            return {m.pk: exc for m in messages}
        for message, routing_key in zip(messages, routing_keys, strict=True):
            channel.basic_publish(
                self.exchange,
                routing_key,
                store.dumps(message.payload).encode(),
                properties=pika.BasicProperties(
                    message_id=message.message_id,
                    delivery_mode=pika.DeliveryMode.Persistent,
                    content_type="application/json",
                    type=message.topic,
                    headers={"key": message.key} if message.key is not None else None,
                ),
                mandatory=self.mandatory,
            )
            self._next_tag += 1
            self._unconfirmed[self._next_tag] = message
        if not self._run_until(lambda: not self._unconfirmed, time.monotonic() + self.timeout):
            # Confirms for these may still come, but on a connection we no longer trust to
            # number them: drop it, and the relay retries them under the same message id.
            self._lost(
                _down(Unavailable(f"rabbitmq {self.name}: no confirm within {self.timeout}s"))
            )
            self.close()
        outcomes, self._outcomes = self._outcomes, {}
        return {m.pk: outcomes[m.pk] for m in messages}


def _reason(reason) -> str:
    return f"{type(reason).__name__}: {reason}"


# --- routing ------------------------------------------------------------------------------

KINDS = {"webhook": WebhookPublisher, "rabbitmq": RabbitMQPublisher}

NUMBER = (int, float)
# What a destination's settings (OUTBOX["DESTINATIONS"][name]) may hold, by the kind of route
# that sends to it, and the kind of each value (`manage.py check`: jobqueue/checks.py).
OPTIONS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "jobs": {"max_attempts": int},
    "webhook": {
        "url": str,
        "secret": str,
        "timeout": NUMBER,
        "connect_timeout": NUMBER,
        "read_timeout": NUMBER,
        "headers": dict,
        "concurrency": int,
        "max_attempts": int,
    },
    "rabbitmq": {
        "url": str,
        "exchange": str,
        "routing_key": str,
        "mandatory": bool,
        "timeout": NUMBER,
        "max_attempts": int,
    },
}


def destination_problems(kind: str, name: str, config) -> list[str]:
    """What would keep the relay from sending to a destination of this kind, in words (its
    keys outside OPTIONS aside): each is a message the relay would otherwise dead-letter."""
    if not isinstance(config, dict):
        return [f"must be a dict, not {type(config).__name__}"]
    found = []
    for key, wanted in OPTIONS[kind].items():
        if key not in config:
            continue
        value = config[key]
        if isinstance(value, bool) is not (wanted is bool) or not isinstance(value, wanted):
            found.append(f"{key!r} has the wrong kind of value: {value!r}")
        elif wanted is NUMBER and not (0 < value < math.inf):
            found.append(f"{key!r} must be a positive number of seconds, not {value!r}")
        elif key == "max_attempts" and value < 1:
            found.append(f"'max_attempts' must be at least 1, not {value!r}")
    if found:
        return found
    if kind == "webhook":
        headers = config.get("headers", {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            found.append("'headers' must map header names to text")
        try:
            WebhookPublisher(name, config)
        except ValueError as exc:
            found.append(str(exc))
    elif kind == "rabbitmq":
        if not config.get("url"):
            found.append(f"rabbitmq destination {name!r} has no url")
        try:
            config.get("routing_key", "{topic}").format(topic="t", key="k", message_id="1")
        except (KeyError, IndexError, ValueError) as exc:
            found.append(f"'routing_key' must be a format of topic, key and message_id: {exc!r}")
    return found


def build(spec: str | None, *, using: str = "default") -> Publisher:
    """The publisher for a route spec ("jobs", "webhook:<name>", "rabbitmq:<name>")."""
    if spec is None:
        return Unrouted("no route in REDRIVE['OUTBOX']['ROUTES'] matches the topic")
    kind, _, name = spec.partition(":")
    destinations = setting("OUTBOX", "DESTINATIONS")
    if kind == "jobs":
        return JobsPublisher(destinations.get(name) if name else None, using=using)
    if kind not in KINDS:
        return Unrouted(f"route {spec!r}: unknown destination kind {kind!r}")
    if name not in destinations:
        return Unrouted(f"route {spec!r}: no {name!r} in REDRIVE['OUTBOX']['DESTINATIONS']")
    try:
        return KINDS[kind](name, destinations[name])
    except ValueError as exc:
        return Unrouted(f"route {spec!r}: {exc}")
