"""Source "sqs": messages an SQS redrive policy (`maxReceiveCount`) moved into the dead-letter
queues named in REDRIVE["SQS_DEAD_LETTERS"], mirrored here (jobqueue.store.sources.brokers has
the life of a letter).

    REDRIVE = {
        "SOURCES": ["jobqueue", "sqs"],
        "SQS_DEAD_LETTERS": {
            "queues": ["https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq"],
            "region_name": "eu-west-1",
            # optional: "endpoint_url" (a local SQS), "aws_access_key_id",
            # "aws_secret_access_key" (else boto3's own chain: environment, profile, role),
            # "scan_limit" (messages read per queue per sync), "visibility_timeout" (seconds
            # a message read by a sync stays hidden from other readers while it is handled)
        },
    }

A sync receives each message with a short visibility timeout and makes the ones it leaves
visible again at once; the message stays in the queue until a replay or a discard deletes it.
Identity: its SQS message id (SQS gives it; no sender chooses it). Attempts: its
`ApproximateReceiveCount` when first seen (less the sync's own receive). The source queue is the
one whose redrive policy targets this queue (`ListDeadLetterSourceQueues`); a queue that is the
target of several is replayed to the `DeadLetterQueueSourceArn` SQS gave the message when it was
first mirrored (kept as the letter's `origin`), and otherwise not at all.

Replay, like SQS's own redrive: the body and message attributes are sent to the source queue,
the letter is recorded 'replayed' with the new message's id, then the dead-letter copy is
deleted. SQS has no transaction over a send and a delete: a process killed between the send
and the record sends again on the next sync (for FIFO queues SQS itself drops that second send,
by its deduplication id `redrive-<letter>-<replay>`; standard queues' consumers can deduplicate
on the `redrive` attribute); killed after the record, the next sync only deletes the copy.
The `redrive` attribute, "<letter>:<replay>:<seal>", is sealed with our signature of both and
the message's digest: a message sent to the dead-letter queue with one that does not verify for
its own body is a letter of its own, never the named letter's.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from datetime import UTC, datetime

from django.utils import timezone

from jobqueue.conf import setting

from ..payloads import storable_text
from . import Made
from .brokers import (
    BODY_CHARS,
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
    handle,
    kept,
    refusal,
    seal,
    sealed,
    settle_replayed,
)

SOURCE = "sqs"
SETTINGS = "SQS_DEAD_LETTERS"
MARK = "redrive"  # message attribute "<letter id>:<replay number>:<seal>" on a replayed message
MAX_ATTRIBUTES = 10  # SQS's limit per message
SKIP_NO_SOURCE_QUEUE = "no source queue: {why}"


def queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def digest(message: dict) -> str:
    """SHA-256 of what a replay sends: the body and the message attributes but our mark."""
    attributes = sorted(
        [
            name,
            value.get("DataType", ""),
            value.get("StringValue"),
            base64.b64encode(value.get("BinaryValue") or b"").decode(),
        ]
        for name, value in (message.get("MessageAttributes") or {}).items()
        if name != MARK
    )
    canonical = json.dumps([message.get("Body", ""), attributes])
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _claim(attributes: dict, digest: str) -> tuple[int, int] | None:
    """The replay whose copy this message is, if its mark is ours for this very message."""
    value = (attributes.get(MARK) or {}).get("StringValue")
    parts = value.split(":") if isinstance(value, str) else []
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts[:2]):
        return None
    letter, replay, mark_seal = parts
    if not sealed(SOURCE, mark_seal, "replay", letter, replay, digest):
        return None
    return int(letter), int(replay)


def _shown_attributes(attributes: dict) -> dict:
    shown = {}
    for name, value in attributes.items():
        if name == MARK:
            continue
        if "StringValue" in value:
            shown[name] = storable_text(value["StringValue"], BODY_CHARS)
        else:
            shown[name] = {"$not_json": value.get("DataType", "Binary"), "summary": "binary value"}
    return shown


class SQSLetters(BrokerSource):
    name = SOURCE
    label = "SQS"
    requires = ("boto3", "redrive[sqs]")
    settings_key = SETTINGS
    # Sent, recorded, then deleted: a copy whose letter is 'replayed' was sent already.
    published_leftover = Action.REMOVE
    options = {
        "endpoint_url": str,
        "region_name": str,
        "aws_access_key_id": str,
        "aws_secret_access_key": str,
        "aws_session_token": str,
        "scan_limit": int,
        "visibility_timeout": int,
        "timeout": (int, float),
    }

    def made(self, ref):
        return Made("SQS message", ref)

    def _options(self) -> dict:
        return {
            "queues": list(setting(SETTINGS, "queues") or ()),
            "scan_limit": int(setting(SETTINGS, "scan_limit") or 10_000),
            "visibility_timeout": int(setting(SETTINGS, "visibility_timeout") or 60),
            "client": {
                key: value
                for key in (
                    "endpoint_url",
                    "region_name",
                    "aws_access_key_id",
                    "aws_secret_access_key",
                    "aws_session_token",
                )
                if (value := setting(SETTINGS, key))
            },
            "timeout": float(setting(SETTINGS, "timeout") or 5.0),
        }

    def _client(self, options):
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=options["timeout"],
            read_timeout=options["timeout"],
            retries={"max_attempts": 1},
        )
        return boto3.client("sqs", config=config, **options["client"])

    def _call(self, method, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return method(**kwargs)
        except (BotoCoreError, ClientError) as exc:
            raise Unreachable(str(exc)[:300] or type(exc).__name__) from exc

    def check(self):
        options = self._options()
        client = self._client(options)
        for url in options["queues"]:
            self._call(client.get_queue_attributes, QueueUrl=url, AttributeNames=["QueueArn"])

    def _sources(self, client, dlq_url: str) -> list[str]:
        """The queues whose redrive policy targets this dead-letter queue."""
        reply = self._call(client.list_dead_letter_source_queues, QueueUrl=dlq_url)
        return reply.get("queueUrls", [])

    @staticmethod
    def _source_queue(sources: list[str], arn) -> str | None:
        """Where a letter goes back to: the one source queue, or the one SQS named for it."""
        if isinstance(arn, str) and arn:
            for url in sources:
                if queue_name(url) == arn.rsplit(":", 1)[-1]:
                    return url
        return sources[0] if len(sources) == 1 else None

    def settle(self, wanted, *, using):
        options = self._options()
        client = self._client(options)
        round_ = Round(self.name)
        remaining = set(wanted) if wanted is not None else None
        for url in options["queues"]:
            if remaining is not None and not remaining:
                break
            self._scan(client, url, options, round_, remaining, using=using)
        return round_

    def _scan(self, client, url, options, round_, remaining, *, using):
        kept: list[str] = []
        read: set[str] = set()
        sources: dict[str, list[str]] = {}  # asked once a scan, when a replay needs it
        try:
            while len(read) < options["scan_limit"]:
                batch = self._call(
                    client.receive_message,
                    QueueUrl=url,
                    MaxNumberOfMessages=10,
                    VisibilityTimeout=options["visibility_timeout"],
                    WaitTimeSeconds=0,
                    AttributeNames=["All"],
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                ).get("Messages", [])
                fresh = [m for m in batch if m["MessageId"] not in read]
                if not fresh:
                    break
                for message in fresh:
                    read.add(message["MessageId"])
                    done = self._one(client, url, message, round_, sources, using=using)
                    if done is None:
                        kept.append(message["ReceiptHandle"])
                    elif remaining is not None and done in remaining:
                        remaining.discard(done)
                if remaining is not None and not remaining:
                    break
        finally:
            # What this round left is visible again at once, for the next reader.
            for start in range(0, len(kept), 10):
                entries = [
                    {"Id": str(i), "ReceiptHandle": handle_, "VisibilityTimeout": 0}
                    for i, handle_ in enumerate(kept[start : start + 10])
                ]
                # Failing, they reappear when their timeout ends anyway.
                with contextlib.suppress(Exception):
                    client.change_message_visibility_batch(QueueUrl=url, Entries=entries)

    def _one(self, client, url, message, round_, sources, *, using) -> int | None:
        """Handle one received message; its letter's id once it is settled (deleted), or None
        while it stays in the queue."""
        seen = self._seen(url, message)
        outcome: dict[str, int] = {}

        def publish(letter):
            if letter.message_digest != seen.digest:
                raise Refused(SKIP_NOT_ITS_MESSAGE)
            if url not in sources:
                sources[url] = self._sources(client, url)
            source = self._source_queue(sources[url], kept(letter, "origin"))
            if source is None:
                raise Refused(
                    SKIP_NO_SOURCE_QUEUE.format(why=f"no single queue sends to {queue_name(url)!r}")
                )
            attributes = dict(message.get("MessageAttributes") or {})
            attributes.pop(MARK, None)
            if len(attributes) < MAX_ATTRIBUTES:
                mark_seal = seal(SOURCE, "replay", letter.pk, letter.replays, seen.digest)
                attributes[MARK] = {
                    "DataType": "String",
                    "StringValue": f"{letter.pk}:{letter.replays}:{mark_seal}",
                }
            sent = {"QueueUrl": source, "MessageBody": message["Body"]}
            if attributes:
                sent["MessageAttributes"] = attributes
            if source.endswith(".fifo"):
                group = (message.get("Attributes") or {}).get("MessageGroupId") or "redrive"
                sent["MessageGroupId"] = group
                sent["MessageDeduplicationId"] = f"redrive-{letter.pk}-{letter.replays}"
            new_id = self._call(client.send_message, **sent)["MessageId"]
            settle_replayed(letter.pk, ref=new_id.replace("-", "")[:32], using=using)
            remove()

        def remove():
            self._call(client.delete_message, QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            outcome["settled"] = 1

        try:
            letter = handle(self, seen, round_, using=using, publish=publish, remove=remove)
        except Unreachable as exc:
            round_.errors.append(f"{message['MessageId']}: {exc}")
            return None
        if not outcome:
            return None
        return letter.pk if letter is not None else -1

    def unplayable(self, letters):
        """A letter goes back to the queue whose redrive policy targets its dead-letter queue:
        one without such a queue cannot."""
        client = self._client(self._options())
        found, sources_of = {}, {}
        for letter in letters:
            dlq = kept(letter, "dead_letter_queue")
            why = refusal(letter)
            if why is not None:
                found[letter.pk] = why
            elif not isinstance(dlq, str) or not dlq:
                found[letter.pk] = SKIP_NO_SOURCE_QUEUE.format(
                    why="its dead-letter queue is unknown"
                )
                continue
            if dlq not in sources_of:
                sources_of[dlq] = self._sources(client, dlq)
            if not sources_of[dlq]:
                found[letter.pk] = SKIP_NO_SOURCE_QUEUE.format(
                    why=f"no queue's redrive policy targets {queue_name(dlq)!r}"
                )
        return found

    def _seen(self, url: str, message: dict) -> Seen:
        now = timezone.now()
        attributes = message.get("Attributes") or {}
        # Our own receive counts too: what the source queue's consumers made of it is one less.
        raw_count = str(attributes.get("ApproximateReceiveCount") or "")
        received = count(
            int(raw_count[:20]) - 1 if raw_count.isascii() and raw_count.isdigit() else 1,
            at_least=1,
        )
        sent = attributes.get("SentTimestamp")
        try:
            first = datetime.fromtimestamp(int(sent[:20]) / 1000, tz=UTC) if sent else now
        except (ValueError, OverflowError, OSError):
            first = now
        message_attributes = message.get("MessageAttributes") or {}
        message_digest = digest(message)
        error = error_entry(
            f"received {received} times from its source queue without being deleted; "
            f"moved to {queue_name(url)!r} by its redrive policy",
            now,
            attempt=received,
            kind="sqs.maxReceiveCount",
        )
        error["worker_id"] = "sqs"
        kind = (message_attributes.get("type") or {}).get("StringValue")
        return Seen(
            identity=message["MessageId"],
            digest=message_digest,
            task_path=kind if isinstance(kind, str) and kind else f"sqs:{queue_name(url)}",
            queue_name=queue_name(url),
            args=[body_value(message.get("Body", "").encode("utf-8", "surrogatepass"))],
            kwargs={
                "dead_letter_queue": url,
                # The queue SQS moved it from: where a replay goes when several send here.
                "origin": attributes.get("DeadLetterQueueSourceArn"),
                "attributes": _shown_attributes(message_attributes),
            },
            attempts=received,
            errors=[error],
            first_failed_at=first,
            claim=_claim(message_attributes, message_digest),
        )
