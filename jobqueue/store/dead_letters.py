"""Dead letters: the operations a console calls (replay, discard), and the one way a letter is
written pending (first death) or returns to pending (its replay died too): `bury`, which every
source calls (jobs, outbox messages, workflow items, broker mirrors, django-q2 results) with a
Burial that says what died and how.

Permission checks and the audit log belong to the caller (deadletters.services), which wraps
these in its own transaction. Each source (jobqueue.store.sources) replays its own letters;
which letters are skipped before any source sees them, and why, is decided here only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from jobqueue.fingerprints import fingerprint
from jobqueue.models import DeadLetter, DeadLetterState, Job

from . import dialects, queues, sources
from .payloads import check_payload, normalized

SKIP_REASONS = {
    DeadLetterState.REPLAYING: "an earlier replay is still pending",
    DeadLetterState.REPLAYED: "already replayed successfully",
    DeadLetterState.DISCARDED: "discarded",
}
SKIP_KEY_HELD = "a live job already holds its idempotency key"
SKIP_MISSING = "no such dead letter"
SKIP_NO_SOURCE = "no dead-letter source {name!r} is registered"
SKIP_NOT_EDITABLE = "letters of source {name!r} are replayed as they are, not edited"
SKIP_FIXED_QUEUE = "letters of source {name!r} are replayed where they came from, not to a queue"


@dataclass
class Resolution:
    """What a replay or discard did: `done` maps ids to the new job (None for a discard, or for
    a replay that made no job of ours); `refs` the replay's reference where it has one."""

    done: dict[int, Job | None] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    refs: dict[int, str] = field(default_factory=dict)


def classify(ids: Sequence[int], letters: dict[int, DeadLetter], resolution: Resolution):
    """Skip what no source may act on (missing, not pending, of no registered source) in
    `resolution`; return the others grouped by their source, in the order asked."""
    by_source: dict[sources.Source, list[DeadLetter]] = {}
    for pk in ids:
        letter = letters.get(pk)
        if letter is None:
            resolution.skipped[pk] = SKIP_MISSING
        elif letter.state != DeadLetterState.PENDING:
            resolution.skipped[pk] = SKIP_REASONS[letter.state]
        else:
            try:
                source = sources.get(letter.source)
            except sources.UnknownSource:
                resolution.skipped[pk] = SKIP_NO_SOURCE.format(name=letter.source)
                continue
            by_source.setdefault(source, []).append(letter)
    return by_source


def _lock(ids: Sequence[int], using: str) -> dict[int, DeadLetter]:
    return {
        dl.pk: dl
        for dl in DeadLetter.objects.using(using)
        .select_for_update()
        .filter(pk__in=ids)
        .order_by("pk")
    }


def replay(
    dead_letter_ids: Iterable[int],
    *,
    now: datetime | None = None,
    using: str = "default",
    to_queue: str | None = None,
) -> Resolution:
    """Replay each pending dead letter through its source; nothing is replayed twice.

    A replayed letter becomes 'replaying' (replays + 1, pointing at its new job or reference)
    until its source settles it: 'replayed' once that replay succeeds, 'pending' again if it
    dies (replays kept). Letters not pending are skipped with the reason.

    `to_queue`: their jobs go to this queue instead of their own (a valid name, ValueError
    otherwise; whether it is one an operator may mean is the caller's to check). Letters of a
    source that replays where they came from (not `replays_to_queue`) are skipped then.
    """
    now = now or timezone.now()
    ids = list(dict.fromkeys(dead_letter_ids))
    moved = {} if to_queue is None else {"to_queue": queues.checked_name(to_queue)}
    resolution = Resolution()
    with transaction.atomic(using=using):
        replayed = []
        for source, letters in classify(ids, _lock(ids, using), resolution).items():
            if moved and not sources.replays_to_queue(source):
                for letter in letters:
                    resolution.skipped[letter.pk] = SKIP_FIXED_QUEUE.format(name=source.name)
                continue
            results = source.replay(letters, now=now, using=using, **moved)
            for letter in letters:
                result = results[letter.pk]
                if isinstance(result, str):
                    resolution.skipped[letter.pk] = result
                    continue
                resolution.done[letter.pk] = result.job
                if result.ref is not None:
                    resolution.refs[letter.pk] = result.ref
                replayed.append((letter.pk, result.job.pk if result.job else None, result.ref))
        if replayed:
            dialects.of(using).mark_replaying(connections[using], replayed, now=now)
    return resolution


def replay_edited(
    dead_letter_id: int,
    *,
    args,
    kwargs,
    now: datetime | None = None,
    using: str = "default",
) -> Resolution:
    """Replay one pending dead letter with a replacement payload: its new job has the letter's
    task, queue, key, attempt budget and place in its ordering key (as `replay` makes it), and
    these arguments; the letter keeps its own (it is the record of what died). Skipped for the
    same reasons as `replay`, and when its source cannot replay an edit (`sources.editable`).

    The payload must be what any job may carry (a JSON array and object, storable, within
    MAX_PAYLOAD_BYTES): TypeError or ValueError otherwise, before anything is written. Whether
    the task takes these arguments is the caller's to check.
    """
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TypeError("args must be a JSON array and kwargs a JSON object")
    args, kwargs = normalized(args, "args"), normalized(kwargs, "kwargs")
    check_payload(args, kwargs)
    now = now or timezone.now()
    pk = dead_letter_id
    resolution = Resolution()
    with transaction.atomic(using=using):
        for source, (letter,) in classify([pk], _lock([pk], using), resolution).items():
            edit = getattr(source, "replay_edited", None)
            if not callable(edit):
                resolution.skipped[pk] = SKIP_NOT_EDITABLE.format(name=source.name)
                continue
            result = edit(letter, args, kwargs, now=now, using=using)
            if isinstance(result, str):
                resolution.skipped[pk] = result
                continue
            resolution.done[pk] = result.job
            if result.ref is not None:
                resolution.refs[pk] = result.ref
            replayed = [(pk, result.job.pk if result.job else None, result.ref)]
            dialects.of(using).mark_replaying(connections[using], replayed, now=now)
    return resolution


def discard(
    dead_letter_ids: Iterable[int], *, now: datetime | None = None, using: str = "default"
) -> Resolution:
    """Resolve pending dead letters without replay. Rows are kept, marked discarded."""
    now = now or timezone.now()
    ids = list(dict.fromkeys(dead_letter_ids))
    resolution = Resolution()
    with transaction.atomic(using=using):
        for source, letters in classify(ids, _lock(ids, using), resolution).items():
            for pk, reason in source.discard(letters, now=now, using=using).items():
                if reason is None:
                    resolution.done[pk] = None
                else:
                    resolution.skipped[pk] = reason
        DeadLetter.objects.using(using).filter(pk__in=list(resolution.done)).update(
            state=DeadLetterState.DISCARDED, discarded_at=now
        )
    return resolution


def settle_replayed(using: str = "default", **match) -> int:
    """Replays that succeeded: their letters, still 'replaying', become 'replayed'."""
    return (
        DeadLetter.objects.using(using)
        .filter(state=DeadLetterState.REPLAYING, **match)
        .update(state=DeadLetterState.REPLAYED)
    )


@dataclass(slots=True)
class NewLetter:
    """What a first death's letter records of the thing that died, as the console shows it and
    its source replays it (the death itself is the Burial's)."""

    task_path: str
    queue_name: str
    errors: list  # its whole error history
    max_attempts: int
    source: str = "jobqueue"
    backend: str = "default"
    priority: int = 0
    args: Any = field(default_factory=list)
    kwargs: Any = field(default_factory=dict)
    idempotency_key: str | None = None
    message_digest: str = ""
    job_id: int | None = None
    original_job_id: int | None = None
    first_failed_at: datetime | None = None  # None: when its first error was
    # Its identity is unique (a broker message, a django-q2 task), so a concurrent writer may
    # record it first: written in a savepoint, and bury returns None if it lost.
    contested: bool = False


@dataclass(slots=True)
class Burial:
    """One death, of a job, an outbox message, a workflow's item or a source's task."""

    error: dict  # its last error entry
    attempts: int
    now: datetime
    # What a first death writes; None where only a replay's death is recorded.
    letter: NewLetter | None
    # The letter whose replay this death is (locked already, or its id, locked here): it
    # returns to pending with this death, and no second letter is made.
    replayed: DeadLetter | int | None = None
    appended: list | None = None  # what that letter's errors gain (None: letter.errors)
    last_error: str | None = None  # None: the error's message, else its class
    # Fields of the new letter a replay's death writes on its letter too.
    renewed: tuple[str, ...] = ()


def bury(burial: Burial, *, using: str = "default") -> DeadLetter | None:
    """The one way a death is recorded, for every source: the replayed letter back to pending
    with this attempt's fields and its errors appended, so the item's history follows it across
    cycles; else (no replay, or its letter is gone) a new pending letter. In the caller's
    transaction. None: nothing written (a contested letter someone else recorded, or a replay's
    death with no letter to return to)."""
    fields = _death_fields(burial)
    letter = burial.replayed
    if isinstance(letter, int):
        letter = DeadLetter.objects.using(using).select_for_update().filter(pk=letter).first()
    if letter is not None:
        for name in burial.renewed:
            fields[name] = getattr(burial.letter, name)
        for name, value in fields.items():
            setattr(letter, name, value)
        appended = burial.appended if burial.appended is not None else burial.letter.errors
        letter.errors = [*letter.errors, *appended]
        letter.save(using=using, update_fields=[*fields, "errors"])
        return letter
    new = burial.letter
    if new is None:
        return None
    row = {name: getattr(new, name) for name in _LETTER_COLUMNS}
    if new.first_failed_at is None:
        row["first_failed_at"] = datetime.fromisoformat(new.errors[0]["at"])
    if not new.contested:
        return DeadLetter.objects.using(using).create(**row, **fields)
    try:
        with transaction.atomic(using=using):
            return DeadLetter.objects.using(using).create(**row, **fields)
    except IntegrityError:
        return None


_LETTER_COLUMNS = [name for name in NewLetter.__dataclass_fields__ if name != "contested"]


def _death_fields(burial: Burial) -> dict:
    """A letter's columns for a death whose last error is `burial.error` (an error entry)."""
    error = burial.error
    last_error = burial.last_error
    if last_error is None:
        last_error = error["message"] or error["exception_class_path"]
    return {
        "attempts": burial.attempts,
        "last_error": last_error,
        "error_class": error["exception_class_path"],
        "fingerprint": fingerprint(
            error["exception_class_path"], error["message"], error["traceback"]
        ),
        "traceback": error["traceback"],
        "dead_lettered_at": burial.now,
        "state": DeadLetterState.PENDING,
    }
