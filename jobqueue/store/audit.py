"""The one audit log of what operators do, from every channel (console, command line, API, code).

`record` appends an entry in the caller's transaction, so an action and its entry commit or
roll back together. Entries form a hash chain: each row's hash covers its content and the hash
of the row before it, and the chain's head (AuditChain) names the newest. Appends take the
head's row lock, so concurrent appends form one line; `verify` walks the chain and reports any
row edited, removed or inserted out of line. The ORM refuses to update or delete an entry
(jobqueue.models.AuditQuerySet); the chain is what catches a change made past it.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from jobqueue.models import AuditChain, AuditEntry, AuditTarget

from .payloads import MAX_REASON_CHARS, operator_action, storable_text

GENESIS = "0" * 64
ACTOR_CHARS = AuditEntry._meta.get_field("actor").max_length
CHANNELS = frozenset(AuditEntry.Channel.values)
_HEAD = 1  # the chain's one head row

# The API token acting in this context (`acting`): every entry recorded inside names it, so a
# service called by the API need not thread the token through to the store.
_TOKEN: contextvars.ContextVar[str] = contextvars.ContextVar("redrive_audit_token", default="")


@contextlib.contextmanager
def acting(*, token: str):
    """Every entry recorded inside this block names `token` (the API token that acts)."""
    reset = _TOKEN.set(token)
    try:
        yield
    finally:
        _TOKEN.reset(reset)


def entry_hash(entry) -> str:
    """The hash of an entry's content and of the entry before it (`entry.prev_hash`): canonical
    JSON (sorted keys, the time in UTC to the microsecond), so it reads the same from either
    database however a JSON column orders its keys."""
    content = [
        entry.seq,
        entry.at.astimezone(UTC).isoformat(timespec="microseconds"),
        entry.actor,
        entry.channel,
        entry.token,
        entry.action,
        entry.target_kind,
        entry.targets,
        entry.reason,
        entry.params,
        entry.outcome,
        entry.prev_hash,
    ]
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _head(using: str) -> AuditChain:
    head = AuditChain.objects.using(using).select_for_update().filter(pk=_HEAD).first()
    if head is not None:
        return head
    try:  # a database whose head row is gone (flushed tables): the chain starts again
        with transaction.atomic(using=using):
            AuditChain.objects.using(using).create(pk=_HEAD, seq=0, hash=GENESIS)
    except IntegrityError:  # made at the same moment by another append
        pass
    return AuditChain.objects.using(using).select_for_update().get(pk=_HEAD)


def record(
    action: str,
    *,
    actor: str,
    channel: str,
    target_kind: str,
    targets: Iterable = (),
    reason: str = "",
    params: dict | None = None,
    outcome: str = "done",
    token: str = "",
    at: datetime | None = None,
    using: str = "default",
) -> AuditEntry:
    """Append one entry to the audit log of the database `using`, in the caller's transaction
    (an atomic block of its own where there is none). `params` must already be masked where it
    holds payload values; `targets` are ids or names, kept as text."""
    return record_many(
        [(action, target_kind, list(targets), params or {}, outcome)],
        actor=actor,
        channel=channel,
        reason=reason,
        token=token,
        at=at,
        using=using,
    )[0]


def record_many(
    entries: list[tuple[str, str, list, dict, str]],
    *,
    actor: str,
    channel: str,
    reason: str = "",
    token: str = "",
    at: datetime | None = None,
    using: str = "default",
) -> list[AuditEntry]:
    """Append several entries (action, target kind, targets, params, outcome) by one actor at
    one time: one lock of the chain's head, one insert."""
    if channel not in CHANNELS:
        raise ValueError(f"an audit channel is one of {', '.join(sorted(CHANNELS))}")
    if not isinstance(actor, str) or not actor.strip():
        raise ValueError("the operator's name is required")
    actor = storable_text(actor.strip(), ACTOR_CHARS)
    reason = storable_text(reason.strip(), MAX_REASON_CHARS) if reason else ""
    token = token or _TOKEN.get()
    at = at or timezone.now()
    with transaction.atomic(using=using):
        head = _head(using)
        rows = []
        for action, kind, targets, params, outcome in entries:
            entry = AuditEntry(
                seq=head.seq + 1,
                at=at,
                actor=actor,
                channel=channel,
                token=token,
                action=action,
                target_kind=kind,
                targets=[str(t) for t in targets],
                reason=reason,
                params=params,
                outcome=outcome,
                prev_hash=head.hash,
            )
            entry.hash = entry_hash(entry)
            head.seq, head.hash = entry.seq, entry.hash
            rows.append(entry)
        AuditEntry.objects.using(using).bulk_create(rows)
        AuditChain.objects.using(using).filter(pk=_HEAD).update(seq=head.seq, hash=head.hash)
        AuditTarget.objects.using(using).bulk_create(
            AuditTarget(entry=entry, kind=entry.target_kind, ref=ref)
            for entry in rows
            for ref in entry.targets
        )
    return rows


def checked_action(actor, reason) -> tuple[str, str]:
    """Who acts and why, both required, as an audited action takes them."""
    return operator_action(actor, reason, actor_chars=ACTOR_CHARS)


def history(kind: str, ref, *, limit: int = 50, using: str = "default") -> list[AuditEntry]:
    """The newest entries naming one target (a job's id, a queue's or a schedule's name)."""
    ids = (
        AuditTarget.objects.using(using)
        .filter(kind=kind, ref=str(ref))
        .order_by("-entry")
        .values_list("entry", flat=True)[:limit]
    )
    return list(AuditEntry.objects.using(using).filter(pk__in=list(ids)).order_by("-id"))


def verify(using: str = "default", *, chunk: int = 2_000) -> Iterator[str]:
    """Every break in the chain of the database `using`, as a sentence: a row whose content does
    not match its hash (edited), a row whose predecessor is not the row before it (removed or
    inserted), a head that names no row or a row past the last (the newest rows removed)."""
    expected_seq, prev_hash = 1, GENESIS
    last = 0
    while True:
        rows = list(AuditEntry.objects.using(using).filter(id__gt=last).order_by("id")[:chunk])
        if not rows:
            break
        for entry in rows:
            last = entry.id
            if entry.seq != expected_seq:
                yield (
                    f"entry {entry.id}: sequence {entry.seq} where {expected_seq} was next "
                    f"(entries {expected_seq}..{entry.seq - 1} removed?)"
                    if entry.seq > expected_seq
                    else f"entry {entry.id}: sequence {entry.seq} again or out of order"
                )
            if entry.prev_hash != prev_hash:
                yield f"entry {entry.id} (#{entry.seq}): does not follow the entry before it"
            if entry_hash(entry) != entry.hash:
                yield f"entry {entry.id} (#{entry.seq}): its content does not match its hash"
            expected_seq, prev_hash = entry.seq + 1, entry.hash
    head = AuditChain.objects.using(using).filter(pk=_HEAD).first()
    newest = expected_seq - 1
    if head is None:
        if newest:
            yield "the chain's head is missing"
    elif (head.seq, head.hash) != (newest, prev_hash if newest else head.hash):
        yield (
            f"the chain's head names entry #{head.seq}, the newest entry is #{newest}"
            " (the newest entries removed?)"
            if head.seq != newest
            else f"the chain's head does not match entry #{newest}"
        )
