"""Queue pause and resume: a paused queue's jobs stay ready, and every claim skips them.

Each change is written with its audit entry (jobqueue.store.audit) in one transaction; pausing a
paused
queue or resuming a running one changes nothing and records nothing.

Only a known queue is paused (`known`), unless the caller says it means a new one
(`allow_unknown`): a typo's pause ("defualt") would otherwise be listed as paused while the real
queue kept running. Any paused name can be resumed.
"""

from __future__ import annotations

import difflib
import logging
import unicodedata
from collections.abc import Iterable
from datetime import datetime, timedelta
from importlib import import_module

from django.apps import apps
from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.utils import timezone
from django.utils.module_loading import module_has_submodule

from jobqueue.databases import queue_databases
from jobqueue.models import (
    READY_IN_LINE,
    READY_KEYED,
    AuditEntry,
    DeadLetter,
    Job,
    JobCounter,
    JobState,
    PausedQueue,
    WorkerRecord,
)

from . import audit
from .jobs import rate_limits
from .payloads import storable_text

logger = logging.getLogger(__name__)


def checked_name(queue) -> str:
    """`queue` in Unicode's composed form (NFC) if it is a name a queue may have (what a pause
    names, a replay is sent to), else ValueError saying why: 1 to 100 characters, not only
    spaces, text every database stores (no NUL, no lone surrogate). Composed, so that "café"
    typed with a combining accent (NFD, as some keyboards and file systems give it) is the
    same queue as "café", not a second one."""
    limit = PausedQueue._meta.get_field("queue_name").max_length
    # NFC composes, never lengthens past 3 times: a name longer than that is too long already.
    if not isinstance(queue, str) or not queue.strip() or len(queue) > 3 * limit:
        raise ValueError(f"a queue name is 1 to {limit} characters")
    if storable_text(queue, len(queue)) != queue:
        raise ValueError("a queue name holds no NUL (\\u0000) or lone surrogate")
    queue = unicodedata.normalize("NFC", queue)
    if len(queue) > limit:
        raise ValueError(f"a queue name is 1 to {limit} characters")
    return queue


def _checked(queue: str, actor: str, reason: str) -> tuple[str, str, str]:
    return (checked_name(queue), *audit.checked_action(actor, reason))


class UnknownQueue(ValueError):
    """A pause of a queue no job, setting, task, worker or pause names."""

    def __init__(self, queue: str, known: set[str]):
        close = difflib.get_close_matches(queue, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        shown = ", ".join(sorted(known)[:20]) + (", …" if len(known) > 20 else "")
        super().__init__(
            f"no queue {queue!r} has jobs or is configured ({hint}known: {shown or 'none'})"
        )
        self.queue = queue


def pause(
    queue: str,
    *,
    actor: str,
    reason: str,
    allow_unknown: bool = False,
    channel: str = AuditEntry.Channel.CODE,
    now: datetime | None = None,
    using: str = "default",
) -> bool:
    """Pause `queue`; False if it was paused already (then nothing is written). UnknownQueue
    for a queue that is not `known` (nor has any job or dead letter), unless `allow_unknown`:
    a queue paused before its first job."""
    queue, actor, reason = _checked(queue, actor, reason)
    if not allow_unknown and not is_known(queue, using):
        raise UnknownQueue(queue, known(using))
    now = now or timezone.now()
    try:
        with transaction.atomic(using=using):
            PausedQueue.objects.using(using).create(
                queue_name=queue, paused_at=now, paused_by=actor, reason=reason
            )
            _audit("queue.pause", queue, actor, reason, channel, now, using)
    except IntegrityError:  # paused already, perhaps by someone at the same moment
        return False
    return True


def resume(
    queue: str,
    *,
    actor: str,
    reason: str,
    channel: str = AuditEntry.Channel.CODE,
    now: datetime | None = None,
    using: str = "default",
) -> bool:
    """Resume `queue`; False if it was not paused."""
    queue, actor, reason = _checked(queue, actor, reason)
    now = now or timezone.now()
    with transaction.atomic(using=using):
        deleted, _ = PausedQueue.objects.using(using).filter(queue_name=queue).delete()
        if not deleted:
            return False
        _audit("queue.resume", queue, actor, reason, channel, now, using)
    return True


# Finished jobs are known from the per-minute counters of this long ago (the table has no index
# by queue for them): an older queue is still found by `is_known`, which looks for one row.
COUNTED = timedelta(days=1)


def known(
    using: str = "default", now: datetime | None = None, *, live: Iterable[str] | None = None
) -> set[str]:
    """The queues of the queue database `using` an operator may mean: those configured (the
    QUEUES of its TASKS backends, "default", REDRIVE["RATE_LIMITS"], the queues of the tasks in
    the installed apps' `tasks` modules, scheduled ones and the console's among them), those a
    worker takes from, those paused, and those with jobs waiting or running, or finished in the
    last COUNTED. Each from an index or a small table. `live`: the queues of the live jobs as
    the caller has just read them (the health snapshot's), not read again."""
    now = now or timezone.now()
    names = {"default", *rate_limits(), *_of_tasks()}
    tasks = getattr(settings, "TASKS", {}) or {}
    for database in queue_databases():
        if database.database == using:
            for alias in database.aliases:
                names.update((tasks.get(alias) or {}).get("QUEUES") or ())
    for queues in WorkerRecord.objects.using(using).values_list("queues", flat=True):
        if isinstance(queues, list):  # written by workers, but a JSON column
            names.update(q for q in queues if isinstance(q, str))
    names.update(PausedQueue.objects.using(using).values_list("queue_name", flat=True))
    if live is not None:
        names.update(live)
    else:
        names.update(ready_queues(using))
        # Running jobs are few (the workers' slots), keyed and ordered ready ones have no
        # index by queue: their queues from the head of their partial indexes.
        jobs = Job.objects.using(using)
        for head in (
            jobs.filter(state=JobState.RUNNING).order_by("locked_until"),
            jobs.filter(READY_KEYED).order_by("concurrency_key"),
            jobs.filter(READY_IN_LINE).order_by("ordering_key"),
        ):
            names.update(head.values_list("queue_name", flat=True)[:LOOKED_AT])
    counted = JobCounter.objects.using(using).filter(minute__gte=now - COUNTED)
    names.update(counted.values_list("queue_name", flat=True).distinct())
    return {name for name in names if isinstance(name, str)}


# How many running jobs, and keyed ready ones, `known` looks at for their queues.
LOOKED_AT = 1_000
# A skip scan stops after this many queue names (a name per index probe).
MAX_READY_QUEUES = 500


# The skip scan, the same text on PostgreSQL and SQLite: each step is the first queue name after
# the last one in the claim's per-queue partial index of plain ready jobs (one probe a name).
READY_QUEUES = """
WITH RECURSIVE named(queue_name, n) AS (
    SELECT (SELECT queue_name FROM jobqueue_job
            WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NULL
            ORDER BY queue_name LIMIT 1), 1
    UNION ALL
    SELECT (SELECT j.queue_name FROM jobqueue_job j
            WHERE j.state = 'ready' AND j.concurrency_key IS NULL AND j.ordering_key IS NULL
              AND j.queue_name > named.queue_name
            ORDER BY j.queue_name LIMIT 1), n + 1
    FROM named WHERE named.queue_name IS NOT NULL AND n < %s
)
SELECT queue_name FROM named WHERE queue_name IS NOT NULL
"""


def ready_queues(using: str = "default") -> list[str]:
    """The queues with plain ready jobs, in name order (at most MAX_READY_QUEUES): a skip
    scan of the claim's per-queue partial index in one statement, where DISTINCT read every
    ready job. Jobs with a concurrency or an ordering key are not in that index (they are
    claimed per key, per line): their queues come with their jobs."""
    with connections[using].cursor() as cursor:
        cursor.execute(READY_QUEUES, [MAX_READY_QUEUES])
        return [name for (name,) in cursor.fetchall()]


def is_known(queue: str, using: str = "default") -> bool:
    """Whether `queue` is `known`, or any job or dead letter of `using` is of it."""
    return (
        queue in known(using)
        or DeadLetter.objects.using(using).filter(queue_name=queue).exists()
        or Job.objects.using(using).filter(queue_name=queue).exists()
    )


def _of_tasks() -> set[str]:
    """The queue names of the tasks the installed apps' `tasks` modules hold (where @task and
    @periodic are declared, as the worker and the schedules find them). A module that fails to
    import names none: it must not stop an operator pausing a queue."""
    from django.tasks import Task

    names = set()
    for app in apps.get_app_configs():
        if not module_has_submodule(app.module, "tasks"):
            continue
        try:
            module = import_module(f"{app.name}.tasks")
        except Exception:  # noqa: BLE001 - the project's code, failing in any way
            logger.warning("%s.tasks failed to import: its queues are not known", app.name)
            continue
        names.update(v.queue_name for v in vars(module).values() if isinstance(v, Task))
    return names


def paused(using: str = "default") -> dict[str, PausedQueue]:
    """The paused queues by name."""
    return {p.queue_name: p for p in PausedQueue.objects.using(using).order_by("queue_name")}


def _audit(action, queue, actor, reason, channel, now, using):
    audit.record(
        action,
        actor=actor,
        channel=channel,
        target_kind="queue",
        targets=[queue],
        reason=reason,
        at=now,
        using=using,
    )
