"""What runs in the background besides the jobs: the chores, each a small class with a name,
an interval and one entry point, `run(now)`.

    LeaseSweep     every second                leases past their end: the job again, or dead
    ScheduleTicks  every second                the due ticks of periodic jobs, a job each
    BrokerMirror   SOURCES_SYNC_SECONDS (60)   brokers' dead-letter queues into the console
    Prune          PRUNE_SECONDS (0: off)      what `manage.py prune` deletes

`duties()` is that list for one database. None of them is the worker's own business: every
chore is safe when two processes run it at once (each writes through a guarded statement of
jobqueue.store), but one is enough, so by default one process per queue database runs them,
the leader (`Chores`): the holder of the lease row "chores" (jobqueue.store.leader), renewed
every third of a lease and taken over by another candidate within one lease of its holder's
death (the candidates look every second). REDRIVE["CHORES"] says who is a candidate:

    "leader"        every worker (default); `runworker --no-chores` opts one out
    "every_worker"  no election: each worker runs them all (as every worker did before)
    "off"           no worker; `manage.py runchores` processes do, elected the same way

What each worker still does itself: claim, run, settle, heartbeat its leases, and refresh its
own record in the registry with its tallies (only it knows them; the record carries an
operator's quiet or stop back to it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, connections

from jobqueue import schedules, store
from jobqueue.conf import setting
from jobqueue.errors import LeaseExpired
from jobqueue.faults import worker_fault_point
from jobqueue.logfmt import log_line
from jobqueue.loop import Loop, process_id
from jobqueue.models import AuditEntry

logger = logging.getLogger("jobqueue.chores")

MODES = ("leader", "every_worker", "off")
LEASE_NAME = "chores"  # the LeaderLease row of each queue database
SWEEP_INTERVAL = 1.0
SCHEDULE_INTERVAL = 1.0  # seconds between looks for due schedules (jobqueue.schedules)
MAX_CANDIDATE_LOOK = 1.0  # seconds between a candidate's looks at a lease held by another


class Chore:
    """A periodic duty: `name` (its log lines'), `interval` (seconds between runs) and `run`,
    which returns True when it made jobs claimable (the worker claims again at once).
    DatabaseError escapes it (the caller backs off); any other error is the chore's to log."""

    name = ""
    interval = 1.0

    def run(self, now: datetime) -> bool:
        raise NotImplementedError


class LeaseSweep(Chore):
    """Jobs whose lease ran out (their worker died or stalled): attempts left → ready again,
    the last one → dead. `finished` is told of each dead one (the worker's task_finished)."""

    name = "lease_sweep"

    def __init__(
        self,
        *,
        using: str,
        interval: float = SWEEP_INTERVAL,
        finished: Callable[[object, BaseException], None] | None = None,
    ):
        self.using, self.interval, self.finished = using, interval, finished

    def run(self, now: datetime) -> bool:
        dead: list = []
        swept = store.sweep_expired(now=now, using=self.using, dead=dead)
        if self.finished is not None:
            for job in dead:  # finished too: their owner died on their last attempt
                self.finished(job, LeaseExpired(job.errors[-1]["message"]))
        return swept > 0


class ScheduleTicks(Chore):
    """Enqueue the due ticks of periodic jobs, in one transaction bounded by LOCK_TIMEOUT
    (jobqueue.store.schedules.ticking): each tick becomes one job whoever takes it."""

    name = "schedule_ticks"
    interval = SCHEDULE_INTERVAL

    def __init__(self, *, using: str, who: str = ""):
        self.using, self.who = using, who

    def run(self, now: datetime) -> bool:
        # A read first: SQLite's IMMEDIATE transactions take the write lock at BEGIN, and most
        # looks find nothing due.
        if not store.schedules.due(now=now, limit=1, using=self.using):
            return False
        try:
            # The ticks of one look commit together.
            with store.schedules.ticking(timeout=setting("LOCK_TIMEOUT"), using=self.using):
                enqueued = schedules.enqueue_due(now=now, using=self.using)
                if enqueued:
                    worker_fault_point("in_tick")
        except DatabaseError:
            raise  # the caller's backoff handles the database
        except Exception:  # noqa: BLE001 - logged with its traceback; the next tick retries
            log_line(logger, logging.ERROR, "schedule_error", exc_info=True, worker=self.who)
            return False
        return bool(enqueued)


class BrokerMirror(Chore):
    """Mirror the configured brokers' dead letters (jobqueue.store.sources.brokers) and finish
    what an interrupted replay or discard left there, in a thread of its own (the brokers'
    I/O must not hold up claims), one round at a time."""

    name = "broker_mirror"

    def __init__(self, *, using: str, interval: float, who: str = ""):
        self.using, self.interval, self.who = using, interval, who
        self._thread: threading.Thread | None = None

    def run(self, now: datetime) -> bool:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._sync, name="redrive-sources", daemon=True)
            self._thread.start()
        return False

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _sync(self):
        # Which sources sync is asked here too: it imports their modules (12 ms of the main
        # thread's time at start-up).
        from jobqueue.store import sources
        from jobqueue.store.sources.brokers import Unreachable

        try:
            try:
                chosen = sources.syncable()
            except Exception:  # noqa: BLE001 - logged with its traceback; the next sync retries
                log_line(
                    logger, logging.ERROR, "source_sync_error", exc_info=True, worker=self.who,
                    source="*",
                )  # fmt: skip
                return
            for source in chosen:
                try:
                    done = source.sync(using=self.using)
                except Unreachable as exc:
                    log_line(
                        logger,
                        logging.WARNING,
                        "source_unreachable",
                        worker=self.who,
                        source=source.name,
                        error=exc,
                    )
                    continue
                except Exception:  # noqa: BLE001 - one source's failure must not stop the others
                    log_line(
                        logger, logging.ERROR, "source_sync_error", exc_info=True,
                        worker=self.who, source=source.name,
                    )  # fmt: skip
                    continue
                if done.seen or done.errors:
                    log_line(
                        logger, logging.INFO, "source_synced", worker=self.who, **done.counts()
                    )
                for error in done.errors:
                    log_line(
                        logger,
                        logging.WARNING,
                        "source_error",
                        worker=self.who,
                        source=source.name,
                        error=error,
                    )
        finally:
            connections.close_all()  # this thread's own


@dataclass(frozen=True)
class Retention:
    """How long `prune` keeps each kind of row, in days (`manage.py prune`'s defaults)."""

    outbox: float | None = None  # None: REDRIVE["OUTBOX"]["RETENTION_DAYS"]
    jobs: float = 14.0  # done and cancelled jobs, schedule tick records, finished workflows
    counters: float = 7.0  # per-minute counters and timing buckets
    workers: float = 1.0  # records of workers silent this long


def prune(retention: Retention, *, now: datetime, using: str = "default") -> list[tuple]:
    """Delete what is older than its retention: (what, how many, the retention in days, the
    words a report says it in) for each kind of row."""
    from jobqueue.store import outbox_messages

    outbox = retention.outbox
    if outbox is None:
        outbox = float(setting("OUTBOX", "RETENTION_DAYS"))
    finished = timedelta(days=retention.jobs)
    counters, timings = store.workers.prune_counters(
        older_than=timedelta(days=retention.counters), now=now, using=using
    )
    return [
        (
            "outbox_messages",
            outbox_messages.prune(older_than=timedelta(days=outbox), now=now, using=using),
            outbox,
            "published outbox message(s) older than",
        ),
        (
            "jobs",
            store.prune_finished_jobs(older_than=finished, now=now, using=using),
            retention.jobs,
            "finished job(s) older than",
        ),
        (
            "schedule_ticks",
            store.schedules.prune_runs(older_than=finished, now=now, using=using),
            retention.jobs,
            "schedule tick record(s) older than",
        ),
        (
            "workflows",
            store.workflows.prune_finished(older_than=finished, now=now, using=using),
            retention.jobs,
            "finished workflow(s) older than",
        ),
        ("job_counters", counters, retention.counters, "job counter row(s) older than"),
        ("job_timings", timings, retention.counters, "job timing row(s) older than"),
        (
            "workers",
            store.workers.prune_lost_workers(
                lost_for=timedelta(days=retention.workers), now=now, using=using
            ),
            retention.workers,
            "record(s) of workers silent for over",
        ),
    ]


# Who a prune nobody asked for is audited as: the leader's chore, or `manage.py prune` run by a
# scheduler (cron, a timer) without --operator.
SYSTEM_ACTOR = "system"


def record_prune(
    report,
    *,
    actor: str,
    channel: str,
    reason: str = "",
    at: datetime | None = None,
    using: str = "default",
):
    """The one audit entry of a run of `prune` (`manage.py prune`'s and the `Prune` chore's):
    how many rows of each kind it deleted and the retention (days) it kept each to."""
    return store.audit.record(
        "chore.prune",
        actor=actor,
        channel=channel,
        target_kind="chore",
        targets=["prune"],
        reason=reason,
        params={
            "deleted": {what: deleted for what, deleted, _, _ in report},
            "older_than_days": {what: days for what, _, days, _ in report},
        },
        at=at,
        using=using,
    )


class Prune(Chore):
    """`manage.py prune` at its default retentions, every PRUNE_SECONDS, audited as the command
    is when it deleted anything (a run that found nothing adds no entry: the leader's look every
    PRUNE_SECONDS would otherwise fill the log with zeros)."""

    name = "prune"

    def __init__(self, *, using: str, interval: float, retention: Retention | None = None):
        self.using, self.interval = using, interval
        self.retention = retention or Retention()

    def run(self, now: datetime) -> bool:
        report = prune(self.retention, now=now, using=self.using)
        log_line(logger, logging.INFO, "pruned", **{what: n for what, n, _, _ in report})
        if any(deleted for _, deleted, _, _ in report):
            record_prune(
                report,
                actor=SYSTEM_ACTOR,
                channel=AuditEntry.Channel.SYSTEM,
                at=now,
                using=self.using,
            )
        return False


def duties(
    *,
    using: str,
    who: str = "",
    sweep_interval: float = SWEEP_INTERVAL,
    finished: Callable | None = None,
    brokers: bool = True,
) -> list[Chore]:
    """The chores of the queue database `using`. The brokers' letters live in the default
    queue database: only its leader mirrors them (and none with `brokers` False: a burst)."""
    from jobqueue.databases import queue_databases

    chosen: list[Chore] = [
        LeaseSweep(using=using, interval=sweep_interval, finished=finished),
        ScheduleTicks(using=using, who=who),
    ]
    sync_seconds = float(setting("SOURCES_SYNC_SECONDS") or 0)
    if brokers and sync_seconds > 0 and queue_databases()[0].database == using:
        chosen.append(BrokerMirror(using=using, interval=sync_seconds, who=who))
    prune_seconds = float(setting("PRUNE_SECONDS") or 0)
    if prune_seconds > 0:
        chosen.append(Prune(using=using, interval=prune_seconds))
    return chosen


class Chores:
    """Runs the due chores of `chores`, on the caller's thread, while this process may: always
    ("every_worker"), never ("off"), or while it holds the database's lease ("leader").

    `tick(now)` is the one entry point, called as often as the caller likes (a worker: every
    step); `release()` on a clean exit hands the lease to the next candidate at once. `now`
    comes from the caller's clock (the lease's times); the intervals between runs and looks
    are measured on `monotonic`. Both injectable."""

    def __init__(
        self,
        chores: Iterable[Chore],
        *,
        holder: str,
        using: str,
        lease_seconds: float,
        mode: str = "leader",
        monotonic: Callable[[], float] = time.monotonic,
    ):
        if mode not in MODES:
            raise ValueError(f"chores mode is one of {', '.join(MODES)}, not {mode!r}")
        self.chores = list(chores) if mode != "off" else []
        self.holder, self.using, self.mode = holder, using, mode
        self.lease_seconds = float(lease_seconds)
        self.monotonic = monotonic
        self.leading = mode == "every_worker"
        self._last_run: dict[str, float] = {}
        self._next_look = float("-inf")

    def tick(self, now: datetime) -> bool:
        """Run what is due, if this process may; True if a chore made jobs claimable."""
        if not self.chores or not self._may_run(now):
            return False
        woke = False
        for chore in self.chores:
            at = self.monotonic()
            if at - self._last_run.get(chore.name, float("-inf")) < chore.interval:
                continue
            self._last_run[chore.name] = at
            try:
                woke = chore.run(now) or woke
            except DatabaseError:
                raise  # the caller's backoff handles the database
            except Exception:  # noqa: BLE001 - a chore's bug must not end the worker that runs it
                log_line(
                    logger, logging.ERROR, "chore_failed", exc_info=True, chore=chore.name,
                    holder=self.holder,
                )  # fmt: skip
        return woke

    def _may_run(self, now: datetime) -> bool:
        if self.mode != "leader":
            return True
        at = self.monotonic()
        if at < self._next_look:
            return self.leading
        was = self.leading
        try:
            self.leading = store.leader.acquire_or_renew(
                LEASE_NAME, self.holder, now=now, lease=self.lease_seconds, using=self.using
            )
        except DatabaseError:
            # Its lease may run out before the database is back: lead again only once renewed.
            self.leading = False
            self._next_look = float("-inf")
            raise
        # The leader renews at a third of its lease (two renewals may fail before it lapses);
        # the others look every second, so a dead leader is replaced soon after its lease ends.
        third = self.lease_seconds / 3
        self._next_look = at + (third if self.leading else min(MAX_CANDIDATE_LOOK, third))
        if self.leading and not was:
            # A new leader runs every chore at once: the last one may have died mid-interval.
            self._last_run.clear()
            self._say("chores_leader")
        elif was and not self.leading:
            self._say("chores_leader_lost", logging.WARNING)
        return self.leading

    def join(self) -> None:
        """Wait for the chores that work in a thread of their own (a broker mirror's round)."""
        for chore in self.chores:
            getattr(chore, "join", lambda: None)()

    def release(self) -> None:
        """A clean exit: give the lease up (the next candidate takes it on its next look)."""
        if self.mode != "leader" or not self.leading:
            return
        self.leading = False
        try:
            store.leader.release(LEASE_NAME, self.holder, using=self.using)
        except DatabaseError as exc:  # it expires on its own within a lease
            log_line(
                logger, logging.WARNING, "chores_release_failed", holder=self.holder, error=exc
            )
            return
        self._say("chores_leader_released")

    def _say(self, event: str, level: int = logging.INFO) -> None:
        log_line(
            logger,
            level,
            event,
            holder=self.holder,
            database=self.using,
            lease_s=f"{self.lease_seconds:g}",
            chores=",".join(chore.name for chore in self.chores),
        )


@dataclass
class _Stats:
    db_errors: int = 0


class ChoresProcess(Loop):
    """`manage.py runchores`: a candidate for the chores of one database that runs no jobs (for
    REDRIVE["CHORES"] = "off", or beside workers started with --no-chores). Stops on SIGTERM,
    handing its lease on; backs off while the database is away."""

    def __init__(
        self,
        *,
        using: str,
        lease_seconds: float,
        holder: str | None = None,
        poll_interval: float | None = None,
        clock: Callable[[], datetime] | None = None,
    ):
        from django.utils import timezone

        # The chores' intervals are a second or more: a quarter of one is soon enough.
        self.poll_interval = poll_interval or 0.25

        self.holder = holder or process_id()
        super().__init__(who="jobqueue", kind="chores", ident=self.holder, using=using, log=logger)
        self.stats = _Stats()
        self.clock = clock or timezone.now
        self.chores = Chores(
            duties(using=using, who=self.holder),
            holder=self.holder,
            using=using,
            lease_seconds=lease_seconds,
        )

    def run(self, *, once: bool = False) -> int:
        """Until stopped; with `once`, one round (each chore, if this process leads: a cron
        job's), then exit."""
        log_line(logger, logging.INFO, "chores_started", holder=self.holder, database=self.using)
        while not self.stopping:
            self.wake.clear()
            try:
                self.chores.tick(self.clock())
                self._db_backoff = 0.0
            except DatabaseError as exc:
                if once:
                    raise
                self._database_trouble(exc)
                continue
            if once:
                self.chores.join()
                break
            self.wake.wait(self.poll_interval)
        self.chores.release()
        log_line(logger, logging.INFO, "chores_stopped", holder=self.holder)
        return 0
