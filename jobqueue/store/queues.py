"""Queue pause and resume: a paused queue's jobs stay ready, and every claim skips them.

Each change is written with its audit row (QueueAction) in one transaction; pausing a paused
queue or resuming a running one changes nothing and records nothing.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from jobqueue.models import PausedQueue, QueueAction

from .payloads import operator_action


def _checked(queue: str, actor: str, reason: str) -> tuple[str, str, str]:
    limit = PausedQueue._meta.get_field("queue_name").max_length
    if not isinstance(queue, str) or not queue.strip() or len(queue) > limit:
        raise ValueError(f"a queue name is 1 to {limit} characters")
    actor_chars = PausedQueue._meta.get_field("paused_by").max_length
    return (queue, *operator_action(actor, reason, actor_chars=actor_chars))


def pause(
    queue: str, *, actor: str, reason: str, now: datetime | None = None, using: str = "default"
) -> bool:
    """Pause `queue`; False if it was paused already (then nothing is written)."""
    queue, actor, reason = _checked(queue, actor, reason)
    now = now or timezone.now()
    try:
        with transaction.atomic(using=using):
            PausedQueue.objects.using(using).create(
                queue_name=queue, paused_at=now, paused_by=actor, reason=reason
            )
            _audit(queue, QueueAction.Kind.PAUSE, actor, reason, now, using)
    except IntegrityError:  # paused already, perhaps by someone at the same moment
        return False
    return True


def resume(
    queue: str, *, actor: str, reason: str, now: datetime | None = None, using: str = "default"
) -> bool:
    """Resume `queue`; False if it was not paused."""
    queue, actor, reason = _checked(queue, actor, reason)
    now = now or timezone.now()
    with transaction.atomic(using=using):
        deleted, _ = PausedQueue.objects.using(using).filter(queue_name=queue).delete()
        if not deleted:
            return False
        _audit(queue, QueueAction.Kind.RESUME, actor, reason, now, using)
    return True


def paused(using: str = "default") -> dict[str, PausedQueue]:
    """The paused queues by name."""
    return {p.queue_name: p for p in PausedQueue.objects.using(using).order_by("queue_name")}


def _audit(queue, action, actor, reason, now, using):
    QueueAction.objects.using(using).create(
        queue_name=queue, action=action, actor=actor, reason=reason, at=now
    )
