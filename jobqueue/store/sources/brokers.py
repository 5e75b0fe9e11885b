"""Dead letters a message broker keeps (RabbitMQ and SQS dead-letter queues), mirrored into the
dead-letter table so one console shows them beside our own.

The broker keeps each message until a replay or a discard settles it; the table holds a copy
for people and for the replay's bookkeeping. A letter's `idempotency_key` is the identity of the
one message at the broker that is its copy (unique per source), its `message_digest` that
message's body and properties as first mirrored. A replayed message carries its letter's id and
replay number, sealed with our signature of both and the digest, so when it dies again the next
sync finds that letter and returns it to pending (one row per obligation, as for our own jobs)
instead of making a second one.

Anyone who may publish to a dead-letter queue can write any header or attribute, so none is
trusted: a message is a letter's copy only by an identity the broker gave it or one we sealed,
a claim to be a replayed copy counts only if its seal verifies for this very body, and anything
else is a letter of its own, shown to operators. A replay publishes the letter's own copy (its
digest checked) to where the letter recorded it came from when first mirrored.

    message first seen ───────────────────────────────▶ one pending letter
    replay ─▶ letter 'replaying' (the console's transaction commits)
           ─▶ after the commit: publish to the original queue, remove the copy ─▶ 'replayed'
    discard ─▶ letter 'discarded' (commits) ─▶ after the commit: remove the copy
    a copy seen again whose letter was replayed or discarded ─▶ what was left undone is done
    a replayed message seen dead again ───────────────▶ 'pending' again, its death appended

So an interruption anywhere (a killed process, the broker away) leaves work that the next sync
or the resumed run finishes; what the broker cannot do atomically is said by each source.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from django.core import signing
from django.db import DatabaseError, transaction
from django.utils import timezone

from jobqueue import conf
from jobqueue.faults import FaultPoints
from jobqueue.logfmt import log_line, logfmt
from jobqueue.models import DeadLetter, DeadLetterState

from .. import dead_letters
from ..payloads import MAX_MESSAGE_CHARS, loads, storable_text
from . import BaseSource, Description, Replayed

log = logging.getLogger("jobqueue.sources")

# A body shown in the console is cut here; the broker keeps the whole message for the replay.
BODY_CHARS = 64_000
UNCONVERTED = "$not_json"

NOT_REPLAYABLE = "not_replayable"  # the kwarg saying why a letter's message cannot go back
SKIP_NOT_REPUBLISHABLE = "its message cannot be republished: {why}"
SKIP_NOT_READ = (
    "its message has not been read since message digests were kept: sync the source first"
)
SKIP_NOT_ITS_MESSAGE = "the message holding its identity is not the one the letter shows"

# Crash drills for the broker sources' settling, "<point>:<n>": SIGKILL before, in the middle
# of (RabbitMQ: the letter recorded, the AMQP transaction not committed) or after the n-th
# message a round publishes or removes.
fault_point = FaultPoints(
    "REDRIVE_BROKER_FAULT",
    {"before_settle", "mid_settle", "after_settle"},
    "broker sync",
    qualified=True,
)


class Unreachable(Exception):
    """The broker cannot be reached or refused us: nothing was settled, nothing is lost."""


class Refused(Exception):
    """This message cannot be settled as its letter asks (say, it names no queue to go back
    to): it stays in the broker, named in the round's errors."""


class Action(Enum):
    KEEP = "keep"  # leave the message where it is
    PUBLISH = "publish"  # its letter's replay committed: publish it, then remove the copy
    REMOVE = "remove"  # its letter is settled (discarded, or the replay was published)


# What a broker's header or attribute may claim, bounded by what the table's columns hold (a
# count no integer column takes would fail the message's row on every sync).
MAX_COUNT = 2**31 - 1


def count(value, *, at_least: int = 0) -> int:
    """A whole number from the broker, within the columns' range; 0 when it is no number."""
    if isinstance(value, bool) or not isinstance(value, int):
        return at_least
    return min(max(value, at_least), MAX_COUNT)


@dataclass
class Seen:
    """One message in a dead-letter queue as its source read it."""

    identity: str
    digest: str  # of its body and properties, as its letter's `message_digest` keeps it
    task_path: str
    queue_name: str
    args: list
    kwargs: dict
    attempts: int
    errors: list[dict]
    first_failed_at: datetime
    # The replay (letter id, replay number) whose copy this message is: set only when the
    # replay's seal verifies for this message's digest.
    claim: tuple[int, int] | None = None
    # The identity it was given before digests were kept (RabbitMQ's unsealed x-redrive-id):
    # the letter holding it may adopt it (`adopt`).
    former: str | None = None


@dataclass
class Round:
    """What one sync did, for the command's line and the tests."""

    source: str
    seen: int = 0
    mirrored: int = 0
    returned: int = 0
    published: int = 0
    removed: int = 0
    errors: list[str] = field(default_factory=list)
    step: str = ""  # the number of the message being settled, for the fault points

    def counts(self) -> dict[str, str | int]:
        return {
            "source": self.source, "seen": self.seen, "mirrored": self.mirrored,
            "returned": self.returned, "published": self.published, "removed": self.removed,
        }  # fmt: skip

    def line(self) -> str:
        return " ".join(f"{name}={logfmt(value)}" for name, value in self.counts().items())


def decide(letter: DeadLetter | None, *, published_leftover: Action) -> Action:
    """What to do with a letter's own copy in the dead-letter queue, given the letter as it
    stands: publish it while the letter is 'replaying'; once it is 'replayed' the source says
    (`published_leftover`) whether that copy can still be unpublished (RabbitMQ: publish and
    removal commit together, so yes) or must be a copy left after publishing (SQS: send, then
    record, then delete)."""
    if letter is None or letter.state == DeadLetterState.PENDING:
        return Action.KEEP
    if letter.state == DeadLetterState.DISCARDED:
        return Action.REMOVE
    if letter.state == DeadLetterState.REPLAYING:
        return Action.PUBLISH
    return published_leftover


def seal(source: str, *parts) -> str:
    """Our signature (SECRET_KEY, or a fallback key while it rotates) of `parts`."""
    return _signer(source).signature(":".join(map(str, parts)))


def sealed(source: str, value, *parts) -> bool:
    """Whether `value` is our seal of `parts`: what a stranger cannot write."""
    if not isinstance(value, str) or not value:
        return False
    try:
        _signer(source).unsign(f"{':'.join(map(str, parts))}:{value}")
    except signing.BadSignature:
        return False
    return True


def _signer(source: str) -> signing.Signer:
    return signing.Signer(salt=f"jobqueue.sources.{source}", algorithm="sha256")


def died_again(letter: DeadLetter, seen: Seen) -> bool:
    """Whether `seen` is the copy of the letter's latest replay, dead again."""
    return (
        seen.claim == (letter.pk, letter.replays)
        and letter.replays > 0
        and letter.state in (DeadLetterState.REPLAYING, DeadLetterState.REPLAYED)
        and letter.message_digest == seen.digest
    )


def adopt(letter: DeadLetter, seen: Seen, *, using: str) -> bool:
    """A letter mirrored before digests were kept (none) takes this message as its copy, digest
    and identity, when the message shows as the letter does (body, and all the letter shows of
    its properties)."""
    shown = letter.kwargs if isinstance(letter.kwargs, dict) else {}
    if letter.message_digest or letter.args != seen.args:
        return False
    if any(seen.kwargs.get(name) != value for name, value in shown.items()):
        return False
    letter.message_digest, letter.idempotency_key = seen.digest, seen.identity
    letter.save(using=using, update_fields=["message_digest", "idempotency_key"])
    return True


def mirror(source: str, seen: Seen, *, now: datetime, using: str) -> tuple[DeadLetter | None, bool]:
    """Record a message in the table: a new letter, or its replay's death on its letter.
    Returns (its letter, whether this call wrote it); the letter is one whose copy `seen` now
    is. Idempotent: seeing it again writes nothing."""
    error = seen.errors[-1] if seen.errors else error_entry("dead-lettered", now)
    rows = DeadLetter.objects.using(using).select_for_update().filter(source=source)
    with transaction.atomic(using=using):
        letter = rows.filter(idempotency_key=seen.identity).first()
        if letter is not None:
            adopt(letter, seen, using=using)
            return letter, False
        replayed = None
        if seen.claim is not None:
            claimed = rows.filter(pk=seen.claim[0]).first()
            if claimed is not None and died_again(claimed, seen):
                replayed = claimed
        if replayed is None and seen.former:
            letter = rows.filter(idempotency_key=seen.former, message_digest="").first()
            if letter is not None and adopt(letter, seen, using=using):
                return letter, False
        letter = dead_letters.bury(
            dead_letters.Burial(
                error,
                attempts=seen.attempts,
                now=now,
                replayed=replayed,
                appended=[error],
                # Its new identity (a new message at the broker) is the one to settle.
                renewed=("idempotency_key",),
                letter=dead_letters.NewLetter(
                    source=source,
                    task_path=seen.task_path[:255],
                    queue_name=seen.queue_name[:100],
                    backend=source,
                    args=seen.args,
                    kwargs=seen.kwargs,
                    idempotency_key=seen.identity,
                    message_digest=seen.digest,
                    max_attempts=max(seen.attempts, 1),
                    errors=seen.errors,
                    first_failed_at=seen.first_failed_at,
                    contested=True,  # a concurrent sync may record it first
                ),
            ),
            using=using,
        )
    return letter, letter is not None


def settle_replayed(pk: int, *, ref: str | None, using: str) -> None:
    """The letter's replay was published: 'replayed' (its reference kept where given)."""
    update = {"state": DeadLetterState.REPLAYED}
    if ref is not None:
        update["replay_ref"] = ref
    DeadLetter.objects.using(using).filter(
        pk=pk, state__in=(DeadLetterState.REPLAYING, DeadLetterState.REPLAYED)
    ).update(**update)


def replay_refused(source: str, pk: int, reason: str, *, now: datetime, using: str) -> None:
    """The broker refused to take a letter's replay: the letter is pending again, with the
    refusal as its last error (not left 'replaying' for every later sync to fail on)."""
    with transaction.atomic(using=using):
        letter = (
            DeadLetter.objects.using(using)
            .select_for_update()
            .filter(pk=pk, state__in=(DeadLetterState.REPLAYING, DeadLetterState.REPLAYED))
            .first()
        )
        if letter is not None:
            error = error_entry(reason, now, attempt=letter.attempts, kind=f"{source}.refused")
            error["worker_id"] = source
            dead_letters.bury(
                dead_letters.Burial(
                    error,
                    attempts=letter.attempts,
                    now=now,
                    letter=None,
                    replayed=letter,
                    appended=[error],
                ),
                using=using,
            )


def error_entry(message: str, at: datetime, *, attempt: int = 0, kind: str = "") -> dict:
    """One entry of a letter's error history, in the shape the worker writes."""
    return {
        "attempt": attempt,
        "at": at.isoformat(),
        "worker_id": "",
        "exception_class_path": kind,
        "message": storable_text(message, MAX_MESSAGE_CHARS),
        "traceback": "",
    }


def body_value(body: bytes, content_type: str | None = None):
    """A message body as the console shows it: JSON data when it is JSON, else its text, else
    a marked summary of bytes. Never used to replay: the broker's copy is republished."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {UNCONVERTED: "bytes", "summary": f"{len(body)} bytes, not UTF-8"}
    if len(text) <= BODY_CHARS:
        try:
            return plain(loads(text, "a message body"))
        except ValueError:  # not JSON, or nested deeper than any stored value may (its text)
            pass
    return storable_text(text, BODY_CHARS)


def plain(value):
    """A broker value (AMQP tables hold bytes, datetimes, decimals) as JSON data."""
    if value is None or isinstance(value, bool | int | str):
        return storable_text(value, BODY_CHARS) if isinstance(value, str) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        return plain(value.decode("utf-8", "backslashreplace"))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {storable_text(str(k), MAX_MESSAGE_CHARS): plain(v) for k, v in value.items()}
    return storable_text(str(value), MAX_MESSAGE_CHARS)


class BrokerSource(BaseSource):
    """What RabbitMQ and SQS share: replays and discards are recorded in the console's
    transaction and carried out at the broker after it commits (`finish`), a sync
    (`sync`) mirrors new messages and finishes whatever an interruption left."""

    published_leftover = Action.REMOVE
    settings_key = ""
    requires_app = False  # `requires` names a library, not a Django app
    # The settings' keys besides "queues", and what each must be.
    options: dict[str, type | tuple[type, ...]] = {}

    def configured(self) -> bool:
        return bool(conf.setting(self.settings_key, "queues"))

    def problems(self) -> list[str]:
        """What is wrong with the source's settings (for `manage.py check`), in words."""
        value = conf.setting(self.settings_key)
        where = f"REDRIVE[{self.settings_key!r}]"
        if not isinstance(value, dict):
            return [f"{where} must be a dict, not {type(value).__name__}"]
        found = []
        queues = value.get("queues")
        if not queues:
            found.append(f'{where} names no "queues" to mirror')
        elif not isinstance(queues, list | tuple) or not all(
            isinstance(q, str) and q.strip() for q in queues
        ):
            found.append(f'{where}["queues"] must be a list of queue names or URLs')
        for key in value:
            if key != "queues" and key not in self.options:
                known = ", ".join(sorted(["queues", *self.options]))
                found.append(f"{where} has an unknown key {key!r} (known: {known})")
            elif key in self.options and not isinstance(value[key], self.options[key]):
                found.append(f"{where}[{key!r}] has the wrong kind of value: {value[key]!r}")
        return found

    # The broker's side, per source.
    def check(self) -> None:
        """Raise Unreachable when the broker cannot be reached (checked before a replay or a
        discard is recorded, so an operator sees why instead of a letter left waiting)."""
        raise NotImplementedError

    def settle(self, wanted: set[int] | None, *, using: str) -> Round:
        """Scan the dead-letter queues: mirror new messages and finish settled letters (only
        those in `wanted` when given, stopping once all are found)."""
        raise NotImplementedError

    def _after_commit(self, letters, *, using: str):
        ids = {letter.pk for letter in letters}

        def finish():
            try:
                self.settle(ids, using=using)
            except Unreachable as exc:
                log_line(
                    log, logging.WARNING, "source_unreachable", source=self.name, error=exc,
                    then="the next sync finishes",
                )  # fmt: skip

        transaction.on_commit(finish, using=using, robust=True)

    def _refuse_unreachable(self, letters) -> dict[int, str] | None:
        try:
            self.check()
        except Unreachable as exc:
            reason = f"{self.label} is unreachable: {exc}"
            return {letter.pk: reason for letter in letters}
        return None

    def unplayable(self, letters) -> dict[int, str]:
        """The letters that cannot go back, each with why (asked of the broker once for all);
        Unreachable when the broker cannot be asked. A source that knows no reason to refuse a
        letter still asks whether its broker answers, so a replay of it is refused up front."""
        self.check()
        return {}

    def replay_ref(self, letter) -> str | None:
        """The reference recorded for a replay at commit time (None: set when it is sent)."""
        return None

    def replay(self, letters, *, now, using):
        """Recorded in the caller's transaction; published after it commits (`_after_commit`)."""
        try:
            results: dict[int, Replayed | str] = dict(self.unplayable(letters))
        except Unreachable as exc:
            return {letter.pk: f"{self.label} is unreachable: {exc}" for letter in letters}
        ready = [letter for letter in letters if letter.pk not in results]
        if ready:
            self._after_commit(ready, using=using)
        results.update({letter.pk: Replayed(ref=self.replay_ref(letter)) for letter in ready})
        return results

    def discard(self, letters, *, now, using):
        refused = self._refuse_unreachable(letters)
        if refused is not None:
            return refused
        self._after_commit(letters, using=using)
        return {letter.pk: None for letter in letters}

    def sync(self, *, using: str = "default") -> Round:
        return self.settle(None, using=using)

    def describe(self, letter, *, payload=None) -> Description:
        return Description(
            label=self.label,
            reference_name="message",
            # A settled copy's identity is let go (RabbitMQ); the replay's reference remains.
            reference=letter.idempotency_key or letter.replay_ref or "",
        )


def handle(
    source: BrokerSource,
    seen: Seen,
    round_: Round,
    *,
    using: str,
    publish: Callable[[DeadLetter], None],
    remove: Callable[[], None],
    now: datetime | None = None,
) -> DeadLetter | None:
    """One message of a scan: mirror it, then do what its letter asks of the broker. Returns
    its letter, None if a concurrent sync recorded it first."""
    now = now or timezone.now()
    round_.seen += 1
    try:
        letter, wrote = mirror(source.name, seen, now=now, using=using)
    except (DatabaseError, ValueError, TypeError) as exc:
        # One message the table refuses must not stop every later sync at the same place: it
        # stays in the broker, named in the round's errors (logged by the worker, printed by
        # the command).
        round_.errors.append(f"{seen.identity}: not recorded: {exc}"[:500])
        return None
    if wrote:
        if letter is not None and letter.replays:
            round_.returned += 1
        else:
            round_.mirrored += 1
    action = decide(letter, published_leftover=source.published_leftover)
    if action is not Action.KEEP:
        round_.step = str(round_.published + round_.removed + 1)
        fault_point("before_settle", round_.step)
        try:
            if action is Action.PUBLISH:
                publish(letter)
                round_.published += 1
            else:
                remove()
                round_.removed += 1
        except Refused as exc:
            round_.errors.append(f"{seen.identity}: {exc}"[:500])
            return letter
        fault_point("after_settle", round_.step)
    return letter


def kept(letter: DeadLetter, name: str):
    """A value the sync kept in the letter's shown kwargs (where the message came from)."""
    return letter.kwargs.get(name) if isinstance(letter.kwargs, dict) else None


def refusal(letter: DeadLetter) -> str | None:
    """Why a letter's message cannot be replayed whatever the broker says, or None."""
    why = kept(letter, NOT_REPLAYABLE)
    if why:
        return SKIP_NOT_REPUBLISHABLE.format(why=why)
    return None if letter.message_digest else SKIP_NOT_READ
