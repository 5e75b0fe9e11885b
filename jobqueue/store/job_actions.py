"""Operators' actions on queued jobs: run now (a scheduled or retrying job becomes due) and
cancel (a job that has not started never will). Only `ready` rows change: a running job is never
cancelled or moved, and a job a worker claims meanwhile is skipped, not overwritten. Each change
is written with its audit entry (jobqueue.store.audit: one a chunk, naming its jobs) in the
same transaction, in chunks, so a big selection holds no lock for long.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connections, transaction
from django.utils import timezone

from jobqueue.models import AuditEntry, Job, JobState

from . import audit, dialects

CHUNK = 500
RUN_NOW, CANCEL = "job.run_now", "job.cancel"


def run_now(
    ids: Iterable[int],
    *,
    actor: str,
    reason: str,
    channel: str = AuditEntry.Channel.CODE,
    selection: int | None = None,
    now: datetime | None = None,
    using="default",
) -> list[int]:
    """Make these waiting jobs due now; returns the ids changed (ready and not yet due)."""
    return _apply(RUN_NOW, ids, actor, reason, channel, selection, now, using)


def cancel(
    ids: Iterable[int],
    *,
    actor: str,
    reason: str,
    channel: str = AuditEntry.Channel.CODE,
    selection: int | None = None,
    now: datetime | None = None,
    using="default",
) -> list[int]:
    """Cancel these jobs if they have not started; returns the ids cancelled."""
    return _apply(CANCEL, ids, actor, reason, channel, selection, now, using)


def _apply(action, ids, actor, reason, channel, selection, now, using) -> list[int]:
    actor, reason = audit.checked_action(actor, reason)
    now = now or timezone.now()
    ids = sorted({int(i) for i in ids})
    changed: list[int] = []
    for start in range(0, len(ids), CHUNK):
        with transaction.atomic(using=using):
            waiting = Job.objects.using(using).filter(
                pk__in=ids[start : start + CHUNK], state=JobState.READY
            )
            if action == RUN_NOW:
                waiting = waiting.filter(run_after__gt=now)
            # Locked in id order (a claim skips locked rows; two operators' chunks cannot
            # deadlock); a job claimed while we waited no longer matches and is left alone.
            rows = list(waiting.select_for_update().order_by("id").values_list("id", "queue_name"))
            if not rows:
                continue
            chunk = [job_id for job_id, _ in rows]
            if action == RUN_NOW:
                Job.objects.using(using).filter(pk__in=chunk).update(run_after=now)
                dialects.of(using).notify(connections[using], {q for _, q in rows})
            else:
                Job.objects.using(using).filter(pk__in=chunk).update(
                    state=JobState.CANCELLED, finished_at=now
                )
            audit.record(
                action,
                actor=actor,
                channel=channel,
                target_kind="job",
                targets=chunk,
                reason=reason,
                params={"selection": selection} if selection is not None else {},
                at=now,
                using=using,
            )
            changed += chunk
    return changed
