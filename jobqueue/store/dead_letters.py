"""Dead letters: the operations a console calls (replay, discard), and the one way a letter is
written pending (first death) or returns to pending (its replay died too).

Permission checks and the audit log belong to the caller (deadletters.services), which wraps
these in its own transaction. Each source (jobqueue.store.sources) replays its own letters;
which letters are skipped before any source sees them, and why, is decided here only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connections, transaction
from django.utils import timezone

from jobqueue.fingerprints import fingerprint
from jobqueue.models import DeadLetter, DeadLetterState, Job

from . import dialects, sources
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
    dead_letter_ids: Iterable[int], *, now: datetime | None = None, using: str = "default"
) -> Resolution:
    """Replay each pending dead letter through its source; nothing is replayed twice.

    A replayed letter becomes 'replaying' (replays + 1, pointing at its new job or reference)
    until its source settles it: 'replayed' once that replay succeeds, 'pending' again if it
    dies (replays kept). Letters not pending are skipped with the reason.
    """
    now = now or timezone.now()
    ids = list(dict.fromkeys(dead_letter_ids))
    resolution = Resolution()
    with transaction.atomic(using=using):
        replayed = []
        for source, letters in classify(ids, _lock(ids, using), resolution).items():
            results = source.replay(letters, now=now, using=using)
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


def pending_fields(
    error: dict, *, attempts: int, now: datetime, last_error: str | None = None, **extra
) -> dict:
    """A dead letter's columns for a death whose last error is `error` (an error entry)."""
    if last_error is None:
        last_error = error["message"] or error["exception_class_path"]
    return {
        "attempts": attempts,
        **extra,
        "last_error": last_error,
        "error_class": error["exception_class_path"],
        "fingerprint": fingerprint(
            error["exception_class_path"], error["message"], error["traceback"]
        ),
        "traceback": error["traceback"],
        "dead_lettered_at": now,
        "state": DeadLetterState.PENDING,
    }


def return_to_pending(letter: DeadLetter, fields: dict, errors: list, *, using: str) -> DeadLetter:
    """The replay of a locked letter died too: the same letter returns to pending with this
    death's fields and its errors appended, so the item's history follows it across cycles."""
    for name, value in fields.items():
        setattr(letter, name, value)
    letter.errors = [*letter.errors, *errors]
    letter.save(using=using, update_fields=[*fields, "errors"])
    return letter
