"""Periodic jobs: a cron expression next to the task, and one job per tick however many
workers on however many hosts look.

    from django.tasks import task
    from jobqueue.schedules import periodic

    @periodic("*/5 * * * *", overlap=False)
    @task
    def refresh_rates(): ...

A declaration becomes a Schedule row when it is synced: every `runworker` syncs at start
(importing each installed app's `tasks` module, where @periodic runs), and
`manage.py schedules sync` does too, and also retires rows no longer declared. The chores'
leader of the database looks for due schedules about once a second (`enqueue_due`, from
jobqueue.chores.ScheduleTicks). A tick becomes a job in the transaction that moves the
schedule's next_run_at on from the value it read (a compare-and-set on the row) and records
the tick under the unique (schedule, tick) constraint: another process's attempt at the same
tick changes nothing, or fails the constraint and rolls back with its job. Nothing is held in
memory, so a leader killed mid-tick leaves the tick to the next one.

- overlap=False: a tick that comes while the last run's job is still ready (a retry waiting
  included) or running is skipped, and recorded as skipped.
- catch_up, for ticks missed while no worker ran or while the schedule was paused: "none" runs
  a tick only if it is at most REDRIVE["SCHEDULE_GRACE"] seconds late; "latest" (the default)
  runs the latest missed tick; "all" runs every missed tick, the most recent `catch_up_limit`
  of them. Ticks not run are recorded as missed.
- The cron expression is croniter's (five fields, or six with seconds last), read in the
  schedule's time zone (default: settings.TIME_ZONE).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.tasks import Task as DjangoTask
from django.tasks.exceptions import InvalidTask
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.logfmt import log_line
from jobqueue.models import Schedule

logger = logging.getLogger("jobqueue.schedules")

CATCH_UP = tuple(Schedule.CatchUp.values)
MAX_CATCH_UP_LIMIT = 1_000
DUE_LIMIT = 100  # schedules looked at per pass; the rest are next


def croniter(expression: str, start: datetime):
    """croniter's iterator (imported on first use: a worker with no schedule due never loads
    it, and its import costs a worker's start-up 40 ms)."""
    from croniter import croniter as iterator

    return iterator(expression, start)


def valid_cron(expression: str) -> bool:
    from croniter import croniter as iterator

    return iterator.is_valid(expression)


@dataclass(frozen=True)
class Periodic:
    """One declared schedule (what @periodic was given, checked)."""

    name: str
    task_path: str
    cron: str
    timezone: str | None = None  # None: settings.TIME_ZONE
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    overlap: bool = True
    catch_up: str = Schedule.CatchUp.LATEST
    catch_up_limit: int = 10

    def __post_init__(self):
        check(self)

    def row(self) -> dict:
        """The Schedule columns this declaration sets."""
        return {
            "task_path": self.task_path,
            "cron": self.cron,
            "timezone": self.timezone or default_timezone(),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "overlap": self.overlap,
            "catch_up": self.catch_up,
            "catch_up_limit": self.catch_up_limit,
        }


_registry: dict[str, Periodic] = {}


def periodic(
    cron: str,
    *,
    name: str | None = None,
    args=(),
    kwargs: dict | None = None,
    overlap: bool = True,
    catch_up: str = Schedule.CatchUp.LATEST,
    catch_up_limit: int = 10,
    timezone: str | None = None,
):
    """Run the decorated task on `cron`. `name` (default: the task's path) identifies the
    schedule; give one per schedule when a task has several (say, with other arguments)."""

    def declare(task):
        if not isinstance(task, DjangoTask):
            raise TypeError("@periodic goes above @task: it schedules a task, not a function")
        declaration = Periodic(
            name=name if name is not None else task.module_path,
            task_path=task.module_path,
            cron=cron,
            timezone=timezone,
            args=list(args),
            kwargs=dict(kwargs or {}),
            overlap=overlap,
            catch_up=catch_up,
            catch_up_limit=catch_up_limit,
        )
        known = _registry.get(declaration.name)
        if known is not None and known != declaration:
            raise ValueError(f"two schedules are named {declaration.name!r}: give each a name")
        _registry[declaration.name] = declaration
        return task

    return declare


def declared() -> dict[str, Periodic]:
    """Every schedule declared in the installed apps' `tasks` modules."""
    autodiscover_modules("tasks")
    return dict(_registry)


def default_timezone() -> str:
    return settings.TIME_ZONE if settings.USE_TZ and settings.TIME_ZONE else "UTC"


def check(declaration: Periodic) -> None:
    """Refuse a declaration that could never run, with the reason (ValueError/TypeError)."""
    limit = Schedule._meta.get_field("name").max_length
    if not isinstance(declaration.name, str) or not 0 < len(declaration.name) <= limit:
        raise ValueError(f"a schedule's name is 1 to {limit} characters")
    cron_chars = Schedule._meta.get_field("cron").max_length
    cron = declaration.cron
    if not isinstance(cron, str) or len(cron) > cron_chars or not valid_cron(cron):
        raise ValueError(f"not a cron expression: {cron!r}")
    tz = declaration.timezone if declaration.timezone is not None else default_timezone()
    try:
        next_tick(cron, tz, timezone.now())
    except ValueError as exc:  # a bad zone, or a date that never comes (30 February)
        raise ValueError(f"{cron!r} in {tz}: {exc}") from None
    if declaration.catch_up not in CATCH_UP:
        raise ValueError(f"catch_up is one of {', '.join(CATCH_UP)}, not {declaration.catch_up!r}")
    limit = declaration.catch_up_limit
    if type(limit) is not int or not 1 <= limit <= MAX_CATCH_UP_LIMIT:
        raise ValueError(f"catch_up_limit is a whole number from 1 to {MAX_CATCH_UP_LIMIT}")
    if not isinstance(declaration.overlap, bool):
        raise TypeError("overlap is True or False")
    store.check_payload(declaration.args, declaration.kwargs)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(f"not a time zone: {name!r}") from None


@dataclass(frozen=True)
class Plan:
    """What to do with a schedule that is due: the ticks to run (oldest first), the span of
    ticks catch-up leaves unrun (first, last) if any, and the tick after now."""

    run: list[datetime]
    missed: tuple[datetime, datetime] | None
    next_run_at: datetime


def next_tick(cron: str, tz: str, after: datetime) -> datetime:
    """The first tick strictly after `after`."""
    return croniter(cron, after.astimezone(zone(tz))).get_next(datetime)


def plan(schedule: Schedule, now: datetime, grace: float) -> Plan:
    """The ticks from schedule.next_run_at up to `now` and what catch-up does with them."""
    cron, start = schedule.cron, schedule.next_run_at
    local_now = now.astimezone(zone(schedule.timezone))
    following = croniter(cron, local_now).get_next(datetime)
    # The latest tick at or before now (croniter's get_prev excludes its start).
    latest = croniter(cron, local_now + timedelta(microseconds=1)).get_prev(datetime)
    if latest < start:
        return Plan([], None, following)
    if schedule.catch_up == Schedule.CatchUp.ALL:
        run = [latest]
        ticks = croniter(cron, latest)
        while len(run) < schedule.catch_up_limit:
            earlier = ticks.get_prev(datetime)
            if earlier < start:
                break
            run.append(earlier)
        run.reverse()
        before = croniter(cron, run[0]).get_prev(datetime)
        missed = (start, before) if before >= start else None
        return Plan(run, missed, following)
    before = croniter(cron, latest).get_prev(datetime)
    if schedule.catch_up == Schedule.CatchUp.NONE and (now - latest).total_seconds() > grace:
        return Plan([], (start, latest), following)
    return Plan([latest], (start, before) if before >= start else None, following)


def sync(*, retire: bool = False, now: datetime | None = None, using: str = "default") -> dict:
    """Write the declared schedules to their rows: new ones start at their next tick, a
    changed cron expression or time zone restarts from now, a pause is kept. With `retire`,
    rows no longer declared stop (kept, with their history, and shown as retired).
    Returns the names {"created": [...], "updated": [...], "retired": [...]}."""
    now = now or timezone.now()
    report = {"created": [], "updated": [], "retired": []}
    schedules = declared()
    for name, declaration in sorted(schedules.items()):
        row = declaration.row()
        first = next_tick(row["cron"], row["timezone"], now)
        change = store.schedules.upsert(name, row, first_tick=first, now=now, using=using)
        if change:
            report[change].append(name)
    if retire:
        report["retired"] = store.schedules.retire_except(set(schedules), now=now, using=using)
    return report


def enqueue_due(*, now: datetime | None = None, using: str = "default") -> int:
    """Enqueue the due ticks of every schedule; returns how many jobs this call made (0 when
    another worker got there first)."""
    now = now or timezone.now()
    grace = float(setting("SCHEDULE_GRACE"))
    made = 0
    for schedule in store.schedules.due(now=now, limit=DUE_LIMIT, using=using):
        try:
            due = plan(schedule, now, grace)
        except ValueError as exc:  # a row edited into a bad cron or zone: stop it, loudly
            log_line(logger, logging.ERROR, "schedule_invalid", schedule=schedule.name, error=exc)
            store.schedules.retire(schedule, now=now, using=using)
            continue
        new_job, error = _new_job(schedule)
        if error is not None and due.run:
            log_line(
                logger, logging.ERROR, "schedule_failed", schedule=schedule.name,
                task=schedule.task_path, error=error,
            )  # fmt: skip
        made += len(
            store.schedules.advance(
                schedule, due=due, new_job=new_job, error=error, now=now, using=using
            )
        )
    return made


def run_now(
    name: str,
    *,
    actor: str,
    reason: str,
    channel: str = "code",
    now: datetime | None = None,
    using: str = "default",
):
    """An operator's run of a schedule's task now, outside its ticks (audited). Refused
    (ValueError) for an unknown schedule, a task that cannot be enqueued, or, when the schedule
    does not overlap, while its last run is live."""
    schedule = store.schedules.get(name, using=using)
    new_job, error = _new_job(schedule)
    if error is not None:
        raise ValueError(f"cannot enqueue {schedule.task_path}: {error}")
    return store.schedules.run_now(
        schedule,
        new_job,
        actor=actor,
        reason=reason,
        channel=channel,
        now=now or timezone.now(),
        using=using,
    )


def _new_job(schedule: Schedule) -> tuple[store.NewJob | None, Exception | None]:
    """The job a tick enqueues, made as `task.enqueue(*args, **kwargs)` would make it (same
    checks), or why it cannot be."""
    from jobqueue.backend import DatabaseBackend, load_task

    try:
        task = load_task(schedule.task_path)
        backend = task.get_backend()
        if not isinstance(backend, DatabaseBackend):
            raise InvalidTask(f"backend {task.backend!r} is not Redrive's: it cannot schedule")
        return backend.new_job(task, schedule.args, schedule.kwargs), None
    except (ImportError, AttributeError, TypeError, ValueError, InvalidTask) as exc:
        return None, exc
