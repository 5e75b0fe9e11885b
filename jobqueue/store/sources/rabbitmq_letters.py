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
replay or a discard settles it; closing the channel returns the others to their places. Its
properties are kept as the bytes the broker sent (jobqueue.store.sources.amqp_properties), so
no header value, however odd, stops a sync, and a republished message is the one that came.

Identity: the first sync stamps each message with an `x-redrive-id` header and its seal
`x-redrive-seal` (our signature of that id and the message's digest), by publishing the stamped
copy to the same queue and acknowledging the original in one AMQP transaction (so the message is
never lost or doubled, and two identical messages stay two letters). A message whose stamp does
not verify (copied onto another body, or written by hand) is stamped afresh: a letter of its
own; so is a second message bearing one identity in the same scan. Its `x-death` history
(reason, queue, count, time of each dead-lettering) is the letter's attempts and errors, and
where it died is recorded once, when it is first mirrored.

Replay: the letter's copy (its digest checked) is published, headers and `x-death` kept, to the
exchange and routing key the letter recorded, and acknowledged in one AMQP transaction,
committed after the letter is recorded 'replayed': killed before that commit, RabbitMQ drops
both and the copy is published by the next sync; after it, nothing is left to do. So a replay
lands once on the original queue. It is stamped `x-redrive-letter` / `x-redrive-replay` and
sealed (`x-redrive-replay-seal`): if it dies again the same letter returns to pending. A message
the broker will not take back (a stamped copy too large for a frame, a user_id not ours) is
recorded as a letter of its own that cannot be replayed, under its digest, and left in place.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from datetime import UTC, datetime

from django.utils import timezone

from jobqueue.conf import setting
from jobqueue.models import DeadLetter

from . import Made
from .brokers import (
    MAX_COUNT,
    NOT_REPLAYABLE,
    SKIP_NOT_ITS_MESSAGE,
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
    refusal,
    replay_refused,
    seal,
    sealed,
    settle_replayed,
)

SOURCE = "rabbitmq"
SETTINGS = "RABBITMQ_DEAD_LETTERS"
ID_HEADER = "x-redrive-id"  # a copy's identity in the dead-letter queue: its letter's key
SEAL_HEADER = "x-redrive-seal"  # our seal of that identity and the message's digest
LETTER_HEADER = "x-redrive-letter"  # on a replayed copy: its letter,
REPLAY_HEADER = "x-redrive-replay"  # that letter's replay number,
REPLAY_SEAL_HEADER = "x-redrive-replay-seal"  # and our seal of both and the digest
STAMP = (ID_HEADER, SEAL_HEADER)
OLD_ID = re.compile(r"[0-9a-f]{32}")  # an id stamped before seals (a letter may adopt it)
OURS = {*STAMP, LETTER_HEADER, REPLAY_HEADER, REPLAY_SEAL_HEADER}
# A quorum queue's count of its deliveries (each sync's read is one): the dead-letter queue's
# note, not the message's, so it is not shown, not part of the digest and not replayed.
DELIVERIES = "x-delivery-count"
# Not shown as headers: ours, x-death (shown as the letter's errors), the deliveries.
HIDDEN = OURS | {"x-death", DELIVERIES}
# Not part of a message's digest: those, and what the broker rewrites each time it dies.
UNDIGESTED = HIDDEN | {"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"}
SKIP_NO_ORIGIN = "its x-death header names no queue it died in, so there is nowhere to replay it"
SKIP_ORIGIN_GONE = "its original queue {queue!r} no longer exists"
SKIP_EXCHANGE_GONE = "its original exchange {exchange!r} no longer exists"
STAMPED_NOW = "stamped this round"
# A broker closing the connection for these (frame and syntax errors) refuses that message;
# any other closing (320, a shutdown) is the broker going away.
CONNECTION_FORCED = 320


def origin(deaths) -> dict | None:
    """Where the message was before its latest death: x-death lists deaths newest first. Names
    a publish cannot use (not text, longer than AMQP's 255 bytes) are no origin."""
    if not isinstance(deaths, list) or not deaths or not isinstance(deaths[0], dict):
        return None
    latest = deaths[0]
    keys = latest.get("routing-keys")
    where = {
        "queue": latest.get("queue"),
        "exchange": latest.get("exchange", ""),
        "routing_key": keys[0] if isinstance(keys, list) and keys else latest.get("queue"),
    }
    if not where["queue"] or not all(
        isinstance(name, str) and len(name.encode()) <= 255 for name in where.values()
    ):
        return None
    return {name: plain(value) for name, value in where.items()}


def _when(value) -> datetime | None:
    if isinstance(value, datetime):
        return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)
    return None


def deaths_as_errors(deaths, now: datetime) -> tuple[list[dict], int, datetime]:
    """x-death as the letter's error history (oldest first), total deaths, first death."""
    deaths = [d for d in deaths if isinstance(d, dict)] if isinstance(deaths, list) else []
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


class _ChannelLost(Exception):
    """The broker closed the channel (or the connection) refusing one message's publish: this
    queue's scan ends here, the message recorded; the next scan gets past it."""


def _refused(exc) -> bool:
    """Whether a pika error is the broker refusing what was sent, not the broker going away."""
    import pika

    if isinstance(exc, pika.exceptions.ChannelClosedByBroker):
        return True
    return (
        isinstance(exc, pika.exceptions.ConnectionClosedByBroker)
        and exc.reply_code != CONNECTION_FORCED
    )


class RabbitMQLetters(BrokerSource):
    name = SOURCE
    label = "RabbitMQ"
    requires = ("pika", "redrive[rabbitmq]")
    settings_key = SETTINGS
    # Publishing and acknowledging the copy commit together: a copy still there was never
    # published, whatever the letter says.
    published_leftover = Action.PUBLISH
    options = {"url": str, "scan_limit": int, "timeout": (int, float)}

    def made(self, ref):
        return Made("RabbitMQ message", ref)

    # --- the connection ----------------------------------------------------------------

    def _options(self) -> dict:
        return {
            "url": setting(SETTINGS, "url") or "amqp://guest:guest@127.0.0.1:5672/%2F",
            "queues": list(setting(SETTINGS, "queues") or ()),
            "scan_limit": int(setting(SETTINGS, "scan_limit") or 10_000),
            "timeout": float(setting(SETTINGS, "timeout") or 5.0),
        }

    def _connect(self, options):
        import pika

        from .amqp_properties import Connection

        try:
            parameters = pika.URLParameters(options["url"])
            parameters.socket_timeout = options["timeout"]
            parameters.blocked_connection_timeout = options["timeout"]
            parameters.connection_attempts = 1
            return pika.BlockingConnection(parameters, _impl_class=Connection)
        except (pika.exceptions.AMQPError, OSError, ValueError) as exc:
            raise Unreachable(_why(exc)) from exc

    def _exists(self, connection, kind: str, name: str) -> bool:
        """A passive declare closes the channel it fails on: each gets its own."""
        import pika

        channel = connection.channel()
        try:
            if kind == "queue":
                channel.queue_declare(name, passive=True)
            else:
                channel.exchange_declare(name, passive=True)
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
                if not self._exists(connection, "queue", queue):
                    raise Unreachable(f"its dead-letter queue {queue!r} does not exist")
        except pika.exceptions.AMQPError as exc:
            raise Unreachable(_why(exc)) from exc
        finally:
            _close(connection)

    # --- replay and discard ------------------------------------------------------------

    def replay_ref(self, letter):
        return letter.idempotency_key  # the copy the replay publishes

    def unplayable(self, letters):
        """A letter whose message cannot be republished, whose x-death named no queue, or
        whose queue or exchange is gone cannot go back (a publish to a queue that is gone
        would be dropped by the broker, and the copy with it)."""
        import pika

        found, known = {}, {}
        connection = self._connect(self._options())
        try:
            for letter in letters:
                where = kept(letter, "origin")
                why = refusal(letter) or (None if _usable(where) else SKIP_NO_ORIGIN)
                why = why or self._gone(connection, where, known)
                if why is not None:
                    found[letter.pk] = why
        except pika.exceptions.AMQPError as exc:
            raise Unreachable(_why(exc)) from exc
        finally:
            _close(connection)
        return found

    def _gone(self, connection, where: dict, known: dict) -> str | None:
        """Why the letter's origin cannot take it back (asked of the broker once a name)."""
        for kind, skip in (("queue", SKIP_ORIGIN_GONE), ("exchange", SKIP_EXCHANGE_GONE)):
            name = where[kind]
            if name and (kind, name) not in known:  # "" is the default exchange
                known[kind, name] = self._exists(connection, kind, name)
            if name and not known[kind, name]:
                return skip.format(**{kind: name})
        return None

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
                if not connection.is_open:  # closed by the broker refusing one message
                    connection = self._connect(options)
                try:
                    self._scan(connection, queue, options, round_, remaining, using=using)
                except _ChannelLost as exc:
                    round_.errors.append(str(exc)[:500])
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
        held: set[str] = set()  # the identities read this scan: a second bearer is not the copy
        for _ in range(min(count, options["scan_limit"])):
            method, properties, body = channel.basic_get(queue, auto_ack=False)
            if method is None:
                break
            letter = self._one(
                channel, queue, method.delivery_tag, properties.raw, body, held, round_, using
            )
            if letter is not None and remaining is not None and letter.pk in remaining:
                remaining.discard(letter.pk)
                if not remaining:
                    break
        with contextlib.suppress(pika.exceptions.AMQPError):
            channel.close()  # the messages left unacknowledged go back to their places

    def _one(self, channel, queue, tag, raw, body, held, round_, using):
        """Mirror one message read from `queue` and do what its letter asks; its letter."""
        import pika

        from .amqp_properties import Message, Properties, Unreadable, integer, text

        try:
            message = Message.read(raw, body)
        except Unreadable as exc:
            seen = self._unreadable(queue, raw, body, f"its properties cannot be read: {exc}")
            remove = _remover(channel, tag, seen.identity, using)
            return handle(self, seen, round_, using=using, publish=_cannot, remove=remove)
        digest = message.digest(UNDIGESTED)
        identity, former = message.header(ID_HEADER), None
        if (
            isinstance(identity, str)
            and identity not in held
            and sealed(SOURCE, message.header(SEAL_HEADER), "copy", identity, digest)
        ):
            held.add(identity)
        elif self._known(f"sha256:{digest}", using):
            identity = f"sha256:{digest}"  # a message recorded as one the broker refused
        else:
            # Stamped once: the stamped copy replaces the original in one transaction.
            former = identity if isinstance(identity, str) and OLD_ID.fullmatch(identity) else None
            identity = uuid.uuid4().hex
            stamp = [(ID_HEADER, text(identity))]
            stamp.append((SEAL_HEADER, text(seal(SOURCE, "copy", identity, digest))))
            try:
                stamped = Properties(message.with_headers(STAMP, stamp).encode())
                channel.basic_publish("", queue, body, stamped)
                channel.basic_ack(tag)
                channel.tx_commit()
            except pika.exceptions.AMQPError as exc:
                if not _refused(exc):
                    raise
                why = f"RabbitMQ refused a stamped copy of it: {_why(exc)}"
                seen = self._seen(queue, f"sha256:{digest}", message, digest, unplayable=why)
                handle(self, seen, round_, using=using, publish=_cannot, remove=_cannot)
                raise _ChannelLost(f"{seen.identity}: {why}") from exc
            tag = None  # the copy is at the queue's tail; this round is done with it
        seen = self._seen(queue, identity, message, digest, former=former)

        def publish(letter):
            where = kept(letter, "origin")
            if tag is None:
                raise Refused(STAMPED_NOW)  # settled when a later round reads it again
            if not _usable(where):
                raise Refused(SKIP_NO_ORIGIN)
            if letter.message_digest != digest:
                raise Refused(SKIP_NOT_ITS_MESSAGE)
            replayed = message.with_headers(
                OURS | {DELIVERIES},
                [
                    (LETTER_HEADER, integer(letter.pk)),
                    (REPLAY_HEADER, integer(letter.replays)),
                    (REPLAY_SEAL_HEADER, text(_replay_seal(letter.pk, letter.replays, digest))),
                ],
            )
            try:
                channel.basic_publish(
                    where["exchange"], where["routing_key"], body, Properties(replayed.encode())
                )
                channel.basic_ack(tag)
                settle_replayed(letter.pk, ref=None, using=using)
                fault_point("mid_settle", round_.step)
                channel.tx_commit()
            except pika.exceptions.AMQPError as exc:
                if not _refused(exc):
                    raise
                why = f"RabbitMQ refused the replay: {_why(exc)}"
                replay_refused(SOURCE, letter.pk, why, now=timezone.now(), using=using)
                raise _ChannelLost(f"{identity}: {why}") from exc
            _let_go(identity, using)

        remove = _remover(channel, tag, identity, using)
        return handle(self, seen, round_, using=using, publish=publish, remove=remove)

    def _known(self, identity: str, using: str) -> bool:
        rows = DeadLetter.objects.using(using).filter(source=SOURCE, idempotency_key=identity)
        return rows.exists()

    def _seen(self, queue, identity, message, digest, *, former=None, unplayable="") -> Seen:
        now = timezone.now()
        deaths = message.header("x-death")
        errors, attempts, first = deaths_as_errors(deaths, now)
        where = origin(deaths)
        properties = {name: plain(v) for name, v in message.shown_properties().items()}
        died_in = (where or {}).get("queue") or queue
        kwargs = {
            "dead_letter_queue": queue,
            "origin": where,
            "properties": properties,
            # kwargs > headers > a header's value: two levels of the stored value's depth.
            "headers": plain(message.shown_headers(HIDDEN, depth=3)),
        }
        if unplayable:
            kwargs[NOT_REPLAYABLE] = unplayable
        return Seen(
            identity=identity,
            digest=digest,
            task_path=properties.get("type") or f"amqp:{died_in}",
            queue_name=died_in,
            args=[body_value(message.body)],
            kwargs=kwargs,
            attempts=max(attempts, 1),
            errors=errors,
            first_failed_at=first,
            claim=_claim(message, digest),
            former=former,
        )

    def _unreadable(self, queue, raw, body, why) -> Seen:
        """A message whose properties cannot be taken apart: its own letter, shown as text,
        named by its digest (nothing can be stamped on it) and never republished."""
        from .amqp_properties import raw_digest

        digest = raw_digest(raw, body)
        now = timezone.now()
        return Seen(
            identity=f"sha256:{digest}",
            digest=digest,
            task_path=f"amqp:{queue}",
            queue_name=queue,
            args=[body_value(body)],
            kwargs={
                "dead_letter_queue": queue,
                "origin": None,
                "properties": plain(raw),
                NOT_REPLAYABLE: why,
            },
            attempts=1,
            errors=[error_entry(why, now, attempt=1, kind="rabbitmq.unreadable")],
            first_failed_at=now,
        )


def _replay_seal(letter: int, replay: int, digest: str) -> str:
    return seal(SOURCE, "replay", letter, replay, digest)


def _claim(message, digest: str) -> tuple[int, int] | None:
    """The replay this message is a copy of, if its replay stamp is ours for this body."""
    letter, replay = message.header(LETTER_HEADER), message.header(REPLAY_HEADER)
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (letter, replay)):
        return None
    if not sealed(SOURCE, message.header(REPLAY_SEAL_HEADER), "replay", letter, replay, digest):
        return None
    return letter, replay


def _usable(where) -> bool:
    return (
        isinstance(where, dict)
        and isinstance(where.get("queue"), str)
        and bool(where["queue"])
        and isinstance(where.get("exchange"), str)
        and isinstance(where.get("routing_key"), str)
    )


def _remover(channel, tag, identity: str, using: str):
    def remove():
        if tag is None:
            raise Refused(STAMPED_NOW)  # settled when a later round reads it again
        channel.basic_ack(tag)
        channel.tx_commit()
        _let_go(identity, using)

    return remove


def _let_go(identity: str, using: str) -> None:
    """The letter's copy is gone from the broker (its publish or removal committed): no later
    message bearing its identity (a copy of the copy, by someone who can read the queue) is
    that letter's. A process killed just before this leaves the copy's identity to a copy left
    unpublished, which is what the next sync looks for."""
    rows = DeadLetter.objects.using(using).filter(source=SOURCE, idempotency_key=identity)
    rows.update(idempotency_key=None)


def _cannot(*_args):
    raise Refused("its message cannot be republished")


def _close(connection):
    # Closing a broken connection has nothing left to lose.
    with contextlib.suppress(Exception):
        connection.close()


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
