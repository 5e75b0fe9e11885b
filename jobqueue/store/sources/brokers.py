"""Dead letters a message broker keeps (RabbitMQ and SQS dead-letter queues), mirrored into the
dead-letter table so one console shows them beside our own.

The broker keeps each message until a replay or a discard settles it; the table holds a copy
for people and for the replay's bookkeeping. A letter's `idempotency_key` is the message's
identity at the broker (unique per source). A replayed message carries its letter's id and
replay number, so when it dies again the next sync finds that letter and returns it to pending
(one row per obligation, as for our own jobs) instead of making a second one.

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

from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from jobqueue import conf
from jobqueue.loop import FaultPoints
from jobqueue.models import MAX_ID, DeadLetter, DeadLetterState

from ..dead_letters import pending_fields, return_to_pending
from ..payloads import MAX_MESSAGE_CHARS, loads, storable_text
from . import BaseSource, Description, Replayed

log = logging.getLogger("jobqueue.sources")

# A body shown in the console is cut here; the broker keeps the whole message for the replay.
BODY_CHARS = 64_000
UNCONVERTED = "$not_json"

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


def row_id(value) -> int | None:
    """A letter id a message claims to come from: a positive integer an id column holds."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ID:
        return None
    return value


@dataclass
class Seen:
    """One message in a dead-letter queue as its source read it."""

    identity: str
    task_path: str
    queue_name: str
    args: list
    kwargs: dict
    attempts: int
    errors: list[dict]
    first_failed_at: datetime
    # The letter and replay number a replay stamped on it (0 and None when never replayed).
    letter_id: int | None = None
    replay: int = 0


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

    def line(self) -> str:
        return (
            f"source={self.source} seen={self.seen} mirrored={self.mirrored} "
            f"returned={self.returned} published={self.published} removed={self.removed}"
        )


def decide(letter: DeadLetter | None, seen: Seen, *, published_leftover: Action) -> Action:
    """What to do with a message in the dead-letter queue, given its letter as it stands.

    A copy stamped with an earlier replay number than its letter's count is the one a
    committed replay has not finished with: publish it while the letter is 'replaying'; once
    the letter is 'replayed' the source says (`published_leftover`) whether that copy can
    still be unpublished (RabbitMQ: publish and removal commit together, so yes) or must be a
    copy left after publishing (SQS: send, then record, then delete).
    """
    if letter is None:
        return Action.KEEP
    if letter.state == DeadLetterState.DISCARDED:
        return Action.REMOVE
    if letter.state == DeadLetterState.PENDING or seen.replay >= letter.replays:
        return Action.KEEP
    if letter.state == DeadLetterState.REPLAYING:
        return Action.PUBLISH
    return published_leftover


def letter_of(
    source: str, seen: Seen, *, using: str, lock: bool = False, identity_kept: bool = False
) -> DeadLetter | None:
    """The letter a message belongs to: the one its replay stamp names (where the broker keeps
    identities, only if the identities agree: a stamp can be forged), else its identity's."""
    rows = DeadLetter.objects.using(using)
    if lock:
        rows = rows.select_for_update()
    if seen.letter_id is not None:
        letter = rows.filter(pk=seen.letter_id, source=source).first()
        if letter is not None and (not identity_kept or letter.idempotency_key == seen.identity):
            return letter
    return rows.filter(source=source, idempotency_key=seen.identity).first()


def mirror(
    source: str, seen: Seen, *, now: datetime, using: str, identity_kept: bool = False
) -> tuple[DeadLetter | None, bool]:
    """Record a message in the table: a new letter, or its replay's death on its letter.
    Returns (its letter, whether this call wrote it). Idempotent: seeing it again writes
    nothing. `identity_kept`: a replayed message keeps its identity at this broker, so a
    message claiming a letter with another identity is not that letter's (a forged stamp)."""
    error = seen.errors[-1] if seen.errors else error_entry("dead-lettered", now)
    fields = pending_fields(error, attempts=seen.attempts, now=now)
    with transaction.atomic(using=using):
        letter = letter_of(source, seen, using=using, lock=True, identity_kept=identity_kept)
        if letter is not None:
            died_again = (
                seen.letter_id == letter.pk
                and seen.replay == letter.replays
                and letter.replays > 0
                and letter.state in (DeadLetterState.REPLAYING, DeadLetterState.REPLAYED)
            )
            if not died_again:
                return letter, False
            # Its new identity (SQS gives a sent message a new id) is the one to settle.
            fields["idempotency_key"] = seen.identity
            return return_to_pending(letter, fields, [error], using=using), True
        try:
            with transaction.atomic(using=using):
                letter = DeadLetter.objects.using(using).create(
                    source=source,
                    task_path=seen.task_path[:255],
                    queue_name=seen.queue_name[:100],
                    backend=source,
                    args=seen.args,
                    kwargs=seen.kwargs,
                    idempotency_key=seen.identity,
                    max_attempts=max(seen.attempts, 1),
                    errors=seen.errors,
                    first_failed_at=seen.first_failed_at,
                    **fields,
                )
        except IntegrityError:
            return None, False  # a concurrent sync recorded it
    return letter, True


def settle_replayed(pk: int, *, ref: str | None, using: str) -> None:
    """The letter's replay was published: 'replayed' (its reference kept where given)."""
    update = {"state": DeadLetterState.REPLAYED}
    if ref is not None:
        update["replay_ref"] = ref
    DeadLetter.objects.using(using).filter(
        pk=pk, state__in=(DeadLetterState.REPLAYING, DeadLetterState.REPLAYED)
    ).update(**update)


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


def settings_of(key: str) -> dict:
    value = conf.setting(key)
    return value if isinstance(value, dict) else {}


class BrokerSource(BaseSource):
    """What RabbitMQ and SQS share: replays and discards are recorded in the console's
    transaction and carried out at the broker after it commits (`finish`), a sync
    (`sync`) mirrors new messages and finishes whatever an interruption left."""

    published_leftover = Action.REMOVE
    identity_kept = False  # a replayed message keeps its identity (RabbitMQ's x-redrive-id)
    settings_key = ""
    requires_app = False  # `requires` names a library, not a Django app
    # The settings' keys besides "queues", and what each must be.
    options: dict[str, type | tuple[type, ...]] = {}

    def configured(self) -> bool:
        options = settings_of(self.settings_key)
        return bool(options.get("queues"))

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
                log.warning(
                    "event=source_unreachable source=%s error=%s (the next sync finishes)",
                    self.name,
                    exc,
                )

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
            reference=letter.idempotency_key or "",
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
        letter, wrote = mirror(
            source.name, seen, now=now, using=using, identity_kept=source.identity_kept
        )
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
    action = decide(letter, seen, published_leftover=source.published_leftover)
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
