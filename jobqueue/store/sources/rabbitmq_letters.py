"""Source "rabbitmq": messages RabbitMQ dead-lettered (`x-dead-letter-exchange`) into the
queues named in REDRIVE["RABBITMQ_DEAD_LETTERS"], mirrored here (jobqueue.store.sources.brokers
has the life of a letter).

    REDRIVE = {
        "SOURCES": ["jobqueue", "rabbitmq"],
        "RABBITMQ_DEAD_LETTERS": {
            "url": "amqp://guest:guest@127.0.0.1:5672/%2F",
            "queues": ["orders.dead"],     # the dead-letter queues to mirror
            "scan_limit": 10000,           # messages read per queue per sync
        },
    }

A message is read with `basic.get` and left unacknowledged, so it stays the broker's until a
replay or a discard settles it; closing the channel returns the others to their places.

Identity: the first sync stamps each message with an `x-redrive-id` header, by publishing the
stamped copy to the same queue and acknowledging the original in one AMQP transaction (so the
message is never lost or doubled, and two identical messages stay two letters). Its `x-death`
history (reason, queue, count, time of each dead-lettering) is the letter's attempts and errors.

Replay: the message, with its headers and `x-death` kept, is published to the exchange and
routing key of its latest death and the dead-letter copy acknowledged in one AMQP transaction,
committed after the letter is recorded 'replayed': killed before that commit, RabbitMQ drops
both and the copy is published by the next sync; after it, nothing is left to do. So a replay
lands once on the original queue. It is stamped `x-redrive-letter` / `x-redrive-replay`: if it
dies again the same letter returns to pending.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime

from django.utils import timezone

from . import Made
from .brokers import (
    MAX_COUNT,
    Action,
    BrokerSource,
    Refused,
    Round,
    Seen,
    Unreachable,
    body_value,
    count,
    error_entry,
    fault_point,
    handle,
    kept,
    plain,
    row_id,
    settings_of,
    settle_replayed,
)

SOURCE = "rabbitmq"
SETTINGS = "RABBITMQ_DEAD_LETTERS"
ID_HEADER = "x-redrive-id"
LETTER_HEADER = "x-redrive-letter"
REPLAY_HEADER = "x-redrive-replay"
OURS = {ID_HEADER, LETTER_HEADER, REPLAY_HEADER, "x-death"}
SKIP_NO_ORIGIN = "its x-death header names no queue it died in, so there is nowhere to replay it"
SKIP_ORIGIN_GONE = "its original queue {queue!r} no longer exists"
PROPERTIES = (
    "content_type",
    "content_encoding",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
)


def origin(headers: dict) -> dict | None:
    """Where the message was before its latest death: x-death lists deaths newest first."""
    deaths = headers.get("x-death") or []
    if not deaths or not isinstance(deaths[0], dict) or not deaths[0].get("queue"):
        return None
    latest = deaths[0]
    keys = latest.get("routing-keys") or []
    return {
        "queue": plain(latest.get("queue")),
        "exchange": plain(latest.get("exchange") or ""),
        "routing_key": plain(keys[0]) if keys else plain(latest.get("queue")),
    }


def _when(value) -> datetime | None:
    if isinstance(value, datetime):
        return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)
    return None


def deaths_as_errors(headers: dict, now: datetime) -> tuple[list[dict], int, datetime]:
    """x-death as the letter's error history (oldest first), total deaths, first death."""
    deaths = [d for d in headers.get("x-death") or [] if isinstance(d, dict)]
    errors, total, first = [], 0, now
    for death in reversed(deaths):
        n = count(death.get("count"), at_least=1)
        total = min(total + n, MAX_COUNT)
        at = _when(death.get("time")) or now
        first = min(first, at)
        reason = plain(death.get("reason") or "dead-lettered")
        queue = plain(death.get("queue") or "?")
        times = "once" if n == 1 else f"{n} times"
        entry = error_entry(
            f"{reason} in queue '{queue}' ({times})", at, attempt=total, kind=f"rabbitmq.{reason}"
        )
        entry["worker_id"] = "rabbitmq"
        errors.append(entry)
    return errors, total, first


class RabbitMQLetters(BrokerSource):
    name = SOURCE
    label = "RabbitMQ"
    requires = ("pika", "redrive[rabbitmq]")
    settings_key = SETTINGS
    # Publishing and acknowledging the copy commit together: a copy still there was never
    # published, whatever the letter says.
    published_leftover = Action.PUBLISH
    identity_kept = True
    options = {"url": str, "scan_limit": int, "timeout": (int, float)}

    def made(self, ref):
        return Made("RabbitMQ message", ref)

    # --- the connection ----------------------------------------------------------------

    def _options(self) -> dict:
        options = settings_of(SETTINGS)
        return {
            "url": options.get("url") or "amqp://guest:guest@127.0.0.1:5672/%2F",
            "queues": list(options.get("queues") or ()),
            "scan_limit": int(options.get("scan_limit") or 10_000),
            "timeout": float(options.get("timeout") or 5.0),
        }

    def _connect(self, options):
        import pika

        try:
            parameters = pika.URLParameters(options["url"])
            parameters.socket_timeout = options["timeout"]
            parameters.blocked_connection_timeout = options["timeout"]
            parameters.connection_attempts = 1
            return pika.BlockingConnection(parameters)
        except (pika.exceptions.AMQPError, OSError, ValueError) as exc:
            raise Unreachable(_why(exc)) from exc

    def _queue_exists(self, connection, queue: str) -> bool:
        """A passive declare closes the channel it fails on: each gets its own."""
        import pika

        channel = connection.channel()
        try:
            channel.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker:
            return False
        channel.close()
        return True

    def check(self):
        import pika

        options = self._options()
        connection = self._connect(options)
        try:
            for queue in options["queues"]:
                if not self._queue_exists(connection, queue):
                    raise Unreachable(f"its dead-letter queue {queue!r} does not exist")
        except pika.exceptions.AMQPError as exc:
            raise Unreachable(_why(exc)) from exc
        finally:
            _close(connection)

    # --- replay and discard ------------------------------------------------------------

    def replay_ref(self, letter):
        return letter.idempotency_key  # the same message (its x-redrive-id kept), republished

    def unplayable(self, letters):
        """A letter whose x-death names no queue, or whose queue is gone, cannot go back (a
        publish to a queue that is gone would be dropped by the broker, and the copy with it)."""
        import pika

        found, known = {}, {}
        connection = self._connect(self._options())
        try:
            for letter in letters:
                where = kept(letter, "origin")
                if not isinstance(where, dict) or not where.get("queue"):
                    found[letter.pk] = SKIP_NO_ORIGIN
                    continue
                queue = where["queue"]
                if queue not in known:
                    known[queue] = self._queue_exists(connection, queue)
                if not known[queue]:
                    found[letter.pk] = SKIP_ORIGIN_GONE.format(queue=queue)
        except pika.exceptions.AMQPError as exc:
            raise Unreachable(_why(exc)) from exc
        finally:
            _close(connection)
        return found

    # --- the scan ----------------------------------------------------------------------

    def settle(self, wanted, *, using):
        import pika

        options = self._options()
        round_ = Round(self.name)
        remaining = set(wanted) if wanted is not None else None
        connection = self._connect(options)
        try:
            for queue in options["queues"]:
                if remaining is not None and not remaining:
                    break
                self._scan(connection, queue, options, round_, remaining, using=using)
        except pika.exceptions.AMQPError as exc:
            raise Unreachable(_why(exc)) from exc
        finally:
            _close(connection)
        return round_

    def _scan(self, connection, queue, options, round_, remaining, *, using):
        import pika

        channel = connection.channel()
        channel.tx_select()
        count = channel.queue_declare(queue, passive=True).method.message_count
        for _ in range(min(count, options["scan_limit"])):
            method, properties, body = channel.basic_get(queue, auto_ack=False)
            if method is None:
                break
            headers = dict(properties.headers or {})
            identity = headers.get(ID_HEADER)
            if isinstance(identity, bytes):
                identity = identity.decode("ascii", "replace")
            if not isinstance(identity, str) or not identity:
                # Stamped once: the stamped copy replaces the original in one transaction.
                identity = uuid.uuid4().hex
                headers[ID_HEADER] = identity
                properties = _with_headers(properties, headers)
                channel.basic_publish("", queue, body, properties)
                channel.basic_ack(method.delivery_tag)
                channel.tx_commit()
                method = None  # the copy is at the queue's tail; this round is done with it
            seen = self._seen(queue, identity, properties, headers, body)
            tag = method.delivery_tag if method is not None else None

            def publish(letter, *, headers=headers, properties=properties, body=body, tag=tag):
                where = origin(headers)
                if tag is None or where is None:
                    # A copy stamped just now is settled when a later round reads it again.
                    raise Refused(SKIP_NO_ORIGIN if where is None else "stamped this round")
                stamped = {**headers, LETTER_HEADER: letter.pk, REPLAY_HEADER: letter.replays}
                channel.basic_publish(
                    where["exchange"],
                    where["routing_key"],
                    body,
                    _with_headers(properties, stamped),
                )
                channel.basic_ack(tag)
                settle_replayed(letter.pk, ref=None, using=using)
                fault_point("mid_settle", round_.step)
                channel.tx_commit()

            def remove(tag=tag):
                if tag is None:
                    raise Refused("stamped this round")
                channel.basic_ack(tag)
                channel.tx_commit()

            letter = handle(self, seen, round_, using=using, publish=publish, remove=remove)
            if letter is not None and remaining is not None and letter.pk in remaining:
                remaining.discard(letter.pk)
                if not remaining:
                    break
        with contextlib.suppress(pika.exceptions.AMQPError):
            channel.close()  # the messages left unacknowledged go back to their places

    def _seen(self, queue, identity, properties, headers, body) -> Seen:
        now = timezone.now()
        errors, attempts, first = deaths_as_errors(headers, now)
        where = origin(headers)
        shown_properties = {
            name: plain(getattr(properties, name))
            for name in PROPERTIES
            if getattr(properties, name, None) is not None
        }
        letter_id = headers.get(LETTER_HEADER)
        replay = headers.get(REPLAY_HEADER)
        died_in = (where or {}).get("queue") or queue
        task = plain(properties.type) if properties.type else f"amqp:{died_in}"
        return Seen(
            identity=identity,
            task_path=task,
            queue_name=died_in,
            args=[body_value(body, properties.content_type)],
            kwargs={
                "dead_letter_queue": queue,
                "origin": where,
                "properties": shown_properties,
                "headers": {k: plain(v) for k, v in headers.items() if k not in OURS},
            },
            attempts=max(attempts, 1),
            errors=errors,
            first_failed_at=first,
            letter_id=row_id(letter_id),
            replay=count(replay),
        )


def _with_headers(properties, headers):
    import pika

    values = {name: getattr(properties, name) for name in PROPERTIES}
    return pika.BasicProperties(headers=headers, **values)


def _close(connection):
    # Closing a broken connection has nothing left to lose.
    with contextlib.suppress(Exception):
        connection.close()


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
