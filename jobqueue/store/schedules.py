"""Schedule rows: sync, ticks, pause, resume and run now (jobqueue.schedules plans; this
module writes).

A tick is taken by moving the schedule's next_run_at on from the value the caller read, in
the transaction that enqueues the tick's job and records it under the unique (schedule, tick)
constraint: of any number of workers looking at the same due schedule, one changes the row and
the rest change nothing (or fail the constraint and roll back, their job with them).
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from jobqueue.models import UNFINISHED_STATES, AuditEntry, Job, Schedule, ScheduleRun

from . import audit, dialects
from .jobs import NewJob, enqueue
from .payloads import storable_text

MAX_NOTE_CHARS = 2_000


def due(*, now: datetime, limit: int, using: str = "default") -> list[Schedule]:
    """Schedules whose next tick has come, oldest first (paused and retired ones never)."""
    return list(
        Schedule.objects.using(using)
        .filter(paused_at__isnull=True, declared=True, next_run_at__lte=now)
        .order_by("next_run_at", "id")[:limit]
    )


@contextmanager
def ticking(*, timeout: float, using: str = "default"):
    """The transaction one look's ticks commit in (jobqueue.schedules.enqueue_due inside it).
    On PostgreSQL it holds the schedules' rows for at most `timeout` seconds, however its
    process stalls (frozen inside it, a host cut off: the server ends the session), and gives
    up as soon waiting on another's: the next leader's look is never stalled for longer."""
    with transaction.atomic(using=using):
        dialects.of(using).bound_transaction(connections[using], timeout)
        yield


def get(name: str, *, using: str = "default") -> Schedule:
    if not isinstance(name, str):
        raise ValueError("a schedule's name is text")
    try:
        return Schedule.objects.using(using).get(name=name)
    except Schedule.DoesNotExist:
        raise ValueError(f"no schedule named {name!r}") from None


def upsert(name: str, row: dict, *, first_tick: datetime, now: datetime, using: str = "default"):
    """Create or update a declared schedule; "created", "updated" or None (unchanged)."""
    current = Schedule.objects.using(using).filter(name=name).first()
    if current is None:
        try:
            with transaction.atomic(using=using):
                Schedule.objects.using(using).create(
                    name=name, **row, next_run_at=first_tick, created_at=now, updated_at=now
                )
        except IntegrityError:  # another worker starting at the same moment made it
            return None
        return "created"
    changes = {key: value for key, value in row.items() if getattr(current, key) != value}
    if current.declared is False:
        changes["declared"] = True
    if not changes:
        return None
    if "cron" in changes or "timezone" in changes:
        changes["next_run_at"] = first_tick
    Schedule.objects.using(using).filter(pk=current.pk).update(**changes, updated_at=now)
    return "updated"


def retire_except(names: set[str], *, now: datetime, using: str = "default") -> list[str]:
    """Stop every declared schedule not in `names`; returns their names."""
    retired = Schedule.objects.using(using).filter(declared=True).exclude(name__in=names)
    gone = sorted(retired.values_list("name", flat=True))
    retired.update(declared=False, updated_at=now)
    return gone


def retire(schedule: Schedule, *, now: datetime, using: str = "default") -> None:
    """Stop a row that cannot be planned (a cron expression or zone edited into nonsense)."""
    Schedule.objects.using(using).filter(pk=schedule.pk).update(declared=False, updated_at=now)


def advance(
    schedule: Schedule,
    *,
    due,
    new_job: NewJob | None,
    error: Exception | None,
    now: datetime,
    using: str = "default",
) -> list[Job]:
    """Take the due ticks of `schedule` as read (its next_run_at): enqueue a job per tick to
    run, unless it does not overlap and its last job is live, and record every tick's fate.
    Returns the jobs enqueued: none if another worker took these ticks first."""
    try:
        with transaction.atomic(using=using):
            taken = (
                Schedule.objects.using(using)
                .filter(
                    pk=schedule.pk,
                    next_run_at=schedule.next_run_at,
                    paused_at__isnull=True,
                    declared=True,
                )
                .update(next_run_at=due.next_run_at, updated_at=now)
            )
            if not taken:
                return []
            runs = []
            if due.missed:
                first, last = due.missed
                runs.append(
                    ScheduleRun(
                        schedule=schedule,
                        tick=first,
                        outcome=ScheduleRun.Outcome.MISSED,
                        note=f"ticks from {first.isoformat()} to {last.isoformat()} not run "
                        f"(catch_up={schedule.catch_up})",
                        at=now,
                    )
                )
            # Read again now that the row is ours: an operator's run now may have made a job
            # since the due list was read.
            rows = Schedule.objects.using(using).filter(pk=schedule.pk)
            last_job_id, made = rows.values_list("last_job_id", flat=True).get(), []
            for tick in due.run:
                run = ScheduleRun(schedule=schedule, tick=tick, at=now)
                if error is not None:
                    run.outcome = ScheduleRun.Outcome.ERROR
                    run.note = storable_text(f"{type(error).__name__}: {error}", MAX_NOTE_CHARS)
                elif not schedule.overlap and _live(last_job_id, using):
                    run.outcome = ScheduleRun.Outcome.SKIPPED
                    run.note = f"job {last_job_id} was still ready or running"
                else:
                    job, _ = enqueue(new_job, now=now, using=using)
                    run.outcome, run.job = ScheduleRun.Outcome.ENQUEUED, job
                    last_job_id = job.pk
                    made.append(job)
                runs.append(run)
            ScheduleRun.objects.using(using).bulk_create(runs)
            if due.run:
                Schedule.objects.using(using).filter(pk=schedule.pk).update(
                    last_tick_at=due.run[-1], last_job_id=last_job_id
                )
    except IntegrityError:  # another worker recorded one of these ticks first
        return []
    return made


def _live(job_id: int | None, using: str) -> bool:
    return (
        job_id is not None
        and Job.objects.using(using).filter(pk=job_id, state__in=UNFINISHED_STATES).exists()
    )


def run_now(
    schedule: Schedule,
    new_job: NewJob,
    *,
    actor: str,
    reason: str,
    now: datetime,
    channel: str = AuditEntry.Channel.CODE,
    using: str = "default",
) -> Job:
    """An operator's run now: a job outside the ticks, recorded and audited."""
    actor, reason = _who(actor, reason)
    with transaction.atomic(using=using):
        locked = Schedule.objects.using(using).select_for_update().get(pk=schedule.pk)
        if not locked.overlap and _live(locked.last_job_id, using):
            raise ValueError(
                f"job {locked.last_job_id} of {locked.name} is still ready or running, and this "
                "schedule does not overlap"
            )
        job, _ = enqueue(new_job, now=now, using=using)
        ScheduleRun.objects.using(using).create(
            schedule=locked,
            tick=now,
            outcome=ScheduleRun.Outcome.MANUAL,
            job=job,
            at=now,
            note=f"run now by {actor}",
        )
        Schedule.objects.using(using).filter(pk=locked.pk).update(last_job=job, updated_at=now)
        _audit("schedule.run", locked.name, actor, reason, channel, now, using, job=job.pk)
    return job


def pause(
    name: str,
    *,
    actor: str,
    reason: str,
    channel: str = AuditEntry.Channel.CODE,
    now: datetime | None = None,
    using: str = "default",
) -> bool:
    """Stop `name` ticking; False if it was paused already (nothing is written then). Ticks
    that pass while it is paused are caught up on resume as its catch_up says."""
    return _set_paused(name, True, actor, reason, channel, now, using)


def resume(
    name: str,
    *,
    actor: str,
    reason: str,
    channel: str = AuditEntry.Channel.CODE,
    now: datetime | None = None,
    using: str = "default",
) -> bool:
    """Let `name` tick again; False if it was not paused."""
    return _set_paused(name, False, actor, reason, channel, now, using)


def _set_paused(name, paused: bool, actor, reason, channel, now, using) -> bool:
    actor, reason = _who(actor, reason)
    now = now or timezone.now()
    schedule = get(name, using=using)
    change = (
        {"paused_at": now, "paused_by": actor, "pause_reason": reason}
        if paused
        else {"paused_at": None, "paused_by": "", "pause_reason": ""}
    )
    with transaction.atomic(using=using):
        changed = (
            Schedule.objects.using(using)
            .filter(pk=schedule.pk, paused_at__isnull=paused)
            .update(**change, updated_at=now)
        )
        if changed:
            action = "schedule.pause" if paused else "schedule.resume"
            _audit(action, name, actor, reason, channel, now, using)
    return bool(changed)


PRUNE_CHUNK = 5_000


def prune_runs(*, older_than, now: datetime | None = None, using: str = "default") -> int:
    """Delete tick records older than now - older_than, a chunk per statement (a per-second
    schedule writes 86,400 a day). A schedule's own row keeps its last tick and job."""
    cutoff = (now or timezone.now()) - older_than
    old = ScheduleRun.objects.using(using).filter(at__lt=cutoff)
    deleted = 0
    while chunk := list(old.order_by("id").values_list("id", flat=True)[:PRUNE_CHUNK]):
        deleted += ScheduleRun.objects.using(using).filter(pk__in=chunk).delete()[0]
    return deleted


def _who(actor, reason) -> tuple[str, str]:
    return audit.checked_action(actor, reason)


def _audit(action, name, actor, reason, channel, now, using, job=None):
    audit.record(
        action,
        actor=actor,
        channel=channel,
        target_kind="schedule",
        targets=[name],
        reason=reason,
        params={"job": job} if job is not None else {},
        at=now,
        using=using,
    )
