"""An operator's changes to queues, schedules and jobs."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from jobqueue import schedules, store

from ..models import (
    Selection,
)
from .selections import RefusedError


def control_queue(
    action: str,
    queue: str,
    *,
    operator,
    reason: str,
    allow_unknown: bool = False,
    channel: str = "code",
    now=None,
    using: str = "default",
) -> bool:
    """Pause or resume a queue of the queue database `using` for an operator (store.queues
    writes it with its audit entry, there); False if it was already so. A pause of a queue
    that is not known is store.queues.UnknownQueue unless `allow_unknown`."""
    who = {"actor": operator.get_username(), "reason": reason, "channel": channel}
    if action == "pause":
        return store.queues.pause(queue, **who, allow_unknown=allow_unknown, now=now, using=using)
    return store.queues.resume(queue, **who, now=now, using=using)


def act_on_schedule(
    action: str, name: str, *, operator, reason: str, channel: str = "code", now=None
):
    """Pause, resume or run a schedule now for an operator (audited in the store). Returns
    whether a pause or resume changed anything, or the job a run enqueued; ValueError says why
    nothing was done."""
    actor = operator.get_username()
    if action == "run":
        return schedules.run_now(name, actor=actor, reason=reason, channel=channel, now=now)
    change = store.schedules.pause if action == "pause" else store.schedules.resume
    return change(name, actor=actor, reason=reason, channel=channel, now=now)


def act_on_jobs(
    action: str,
    ids,
    *,
    operator,
    reason: str,
    channel: str = "code",
    selection: int | None = None,
    now=None,
    using: str = "default",
) -> list[int]:
    """Run these queued jobs of the queue database `using` now or cancel them for an operator
    (store.job_actions writes each change with its audit entry, there, naming the frozen
    `selection` they came from); returns the ids changed."""
    change = store.job_actions.run_now if action == "run_now" else store.job_actions.cancel
    return change(
        ids,
        actor=operator.get_username(),
        reason=reason,
        channel=channel,
        selection=selection,
        now=now,
        using=using,
    )


def apply_job_selection(
    selection: Selection, *, reason: str, channel: str = "code", now=None
) -> list[int]:
    """Carry out a frozen selection of jobs once, in its queue database; a second confirm
    changes nothing."""
    from .. import databases

    if selection.kind != Selection.Kind.JOBS:
        raise RefusedError("This selection is of dead letters, not jobs.")
    database = selection.database
    if databases.of_database(database) is None:
        raise RefusedError(
            f"Its jobs are in database {database!r}, which no Redrive TASKS backend uses now."
        )
    now = now or timezone.now()
    with transaction.atomic():
        claimed = Selection.objects.filter(pk=selection.pk, applied_at__isnull=True).update(
            applied_at=now, reason=reason
        )
    if not claimed:
        raise RefusedError("This selection was already confirmed.")
    try:
        changed = act_on_jobs(
            selection.action,
            selection.ids,
            operator=selection.operator,
            reason=reason,
            channel=channel,
            selection=selection.pk,
            now=now,
            using=database,
        )
    except Exception:
        # Chunks done so far stay done (and audited); the state guards skip them on a retry.
        Selection.objects.filter(pk=selection.pk).update(applied_at=None)
        raise
    Selection.objects.filter(pk=selection.pk).update(changed=len(changed))
    return changed
