"""Freezing a selection and checking where a replay may send its jobs."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from django.db.models import Count
from django.tasks import InvalidTaskBackend, task_backends
from django.utils import timezone

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.models import DeadLetter
from jobqueue.store import sources

from ..models import (
    Action,
    Selection,
)

PREVIEW_LIFETIME = timedelta(days=1)


class RefusedError(ValueError):
    """The request cannot be carried out as asked (no reason, empty or foreign selection).
    `code` names the refusal for a channel that adds its own hint (the console's tick box,
    the API's `code`), "" when there is none."""

    def __init__(self, message: str, code: str = ""):
        super().__init__(message)
        self.code = code


def _selected(ids, noun: str) -> list[int]:
    """The ids of a selection, each once, in order; refused if none or more than the cap."""
    ids = list(dict.fromkeys(int(i) for i in ids))
    if not ids:
        raise RefusedError(f"Select at least one {noun}.")
    cap = setting("MAX_SELECTION")
    if len(ids) > cap:
        raise RefusedError(f"A selection holds at most {cap:,} items.")
    return ids


def freeze_selection(
    *,
    operator,
    action: str,
    ids,
    kind: str = Selection.Kind.LETTERS,
    filter: dict | None = None,
    database="default",
    now=None,
) -> Selection:
    """Record exactly the ids an operator previews (dead letters, or queued jobs with `kind`
    jobs) and the queue database they are rows of (deadletters.databases); confirming acts on
    these and no others, in that database: `start_run` for letters, `apply_job_selection` for
    jobs."""
    ids = _selected(ids, "dead letter" if kind == Selection.Kind.LETTERS else "job")
    now = now or timezone.now()
    # Previews nobody confirmed within a day are dropped (a confirmed one is part of its run,
    # or applied).
    Selection.objects.filter(
        run__isnull=True, applied_at__isnull=True, created_at__lt=now - PREVIEW_LIFETIME
    ).delete()
    return Selection.objects.create(
        operator=operator,
        kind=kind,
        action=action,
        filter=filter or {},
        ids=ids,
        database=database,
        created_at=now,
    )


def check_destination(
    to_queue: str | None,
    *,
    ids,
    using: str = "default",
    action: str = Action.REPLAY,
    allow_unknown: bool = False,
) -> str:
    """The queue a replay of these letters (of the queue database `using`) is sent to: "" for
    none given (each letter's own), else `to_queue`, checked for every door (the console's
    form, the API, `manage.py act confirm` and `deadletters replay`) by one set of rules.
    RefusedError, with its `code`, says why not:

    - a discard, which sends nothing anywhere;
    - not a queue name (store.queues.checked_name): invalid_queue;
    - letters whose source replays them where they came from (an outbox message, a django-q2
      task, a broker's message: not `sources.replays_to_queue`), even one among many: the
      selection is refused whole, never run in part: cannot_change_queue;
    - a queue the backend of some of the letters does not take (its TASKS QUEUES): the same
      enqueue would be refused there: queue_not_allowed;
    - a queue the console does not know (store.queues.is_known: no worker took from it, no
      setting or task names it, no job or letter is of it), unless `allow_unknown`, so a typo
      cannot strand the jobs where nothing claims them: unknown_queue.
    """
    if to_queue is None or to_queue == "":
        return ""
    if action != Action.REPLAY:
        raise RefusedError("A discard sends nothing to a queue: leave the queue empty.")
    try:
        queue = store.queues.checked_name(to_queue)
    except ValueError as exc:
        raise RefusedError(f"Not a queue to replay to: {exc}.", code="invalid_queue") from None
    counts, backends = Counter(), set()
    rows = DeadLetter.objects.using(using).filter(store.Among(ids)).order_by()
    for source, backend, n in rows.values_list("source", "backend").annotate(n=Count("id")):
        counts[source] += n
        backends.add(backend)
    fixed = [(name, n) for name, n in sorted(counts.items()) if not sources.replays_to_queue(name)]
    if fixed:
        which = ", ".join(
            f"{n} letter{'s' if n != 1 else ''} of source {name}" for name, n in fixed
        )
        raise RefusedError(
            f"Not replayed to {queue}: {which} can only be replayed where they came from, and "
            "a selection goes to one place whole. Leave the queue empty, or select only "
            "jobqueue letters.",
            code="cannot_change_queue",
        )
    for alias in sorted(backends):
        try:
            taken = task_backends[alias].queues
        except InvalidTaskBackend:
            continue  # a backend removed from TASKS: its letters' jobs go to the default one
        if taken and queue not in taken:
            raise RefusedError(
                f"Not replayed to {queue}: backend {alias} takes only the queues "
                f"{', '.join(sorted(taken))} (its TASKS QUEUES).",
                code="queue_not_allowed",
            )
    if not allow_unknown and not store.queues.is_known(queue, using):
        raise RefusedError(
            f"Not replayed: {store.queues.UnknownQueue(queue, store.queues.known(using))}.",
            code="unknown_queue",
        )
    return queue
