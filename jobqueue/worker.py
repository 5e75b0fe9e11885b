"""The worker loop: claim in batches, run handlers on threads, heartbeat, acknowledge, fail.

Three kinds of thread, each with its own Django connection. The main thread claims, renews
leases (heartbeat), enforces timeouts and releases, and, while this worker leads its database,
runs the background chores (jobqueue.chores: not the worker's own business, so not here);
handler threads run the tasks; the settler
thread records their outcomes (acknowledges successes in one statement per batch, fails the
rest). Claiming and settling on two connections overlap their round trips: while the settler
waits on an acknowledgement the main thread's next claim is already on its way.

Stopping: the first SIGTERM/SIGINT stops claiming, hands back leases of jobs not yet started,
waits up to `grace` seconds for running handlers, then releases the leases of those still
running so another worker can take them at once. A second signal exits immediately.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import queue
import socket
import threading
import time
import traceback as tb
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property, lru_cache, partial

from django.conf import settings
from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    close_old_connections,
    connections,
)
from django.db.backends.signals import connection_created
from django.tasks import TaskContext
from django.tasks.signals import (
    log_task_finished,
    log_task_started,
    task_finished,
    task_started,
)
from django.utils import timezone

from jobqueue import store, workflows
from jobqueue.backend import DatabaseBackend, load_task, wants
from jobqueue.backoff import retry_delay
from jobqueue.chores import Chores, LeaseSweep, duties
from jobqueue.conf import setting
from jobqueue.errors import (
    InvalidPayload,
    JobTimeout,
    TransactionLeftOpen,
    UnknownTask,
    class_path,
    classify,
    exception_text,
)
from jobqueue.faults import worker_fault_point as fault_point
from jobqueue.listener import Listener, listen_params
from jobqueue.logfmt import log_line, log_lines, logfmt
from jobqueue.loop import Loop, first_line, next_backoff, process_id
from jobqueue.models import Job, JobState
from jobqueue.store.postgresql import NOTIFY_CHANNEL
from jobqueue.timing import RUN, WAIT, queue_wait

logger = logging.getLogger("jobqueue.worker")
# Jobs leased beyond the running ones, at most: the window is a quarter second of work, so the
# cap binds only jobs of a millisecond or so. 500 drained one process's no-op jobs faster but
# the shared bench's two workers slower (each grabbed more of a short run), hand-run.
MAX_PREFETCH = 200
RECORD_INTERVAL = 5.0  # seconds between worker-record refreshes (health dashboard)
MAX_CALL_SHAPES = 10_000  # bounds TaskCache's memory whatever payloads arrive
# Seconds a finished job may wait for its acknowledgement while handlers stay busy.
SETTLE_INTERVAL = 0.02
MAX_RETRY_DELAY = 365 * 86_400.0  # seconds: the longest a failed job waits for its retry


def log_event(event: str, job: Job, level=logging.INFO, **fields):
    """One line per job event: event=… job_id=… task=… queue=… key=… attempt=… and fields."""
    if not logger.isEnabledFor(level):
        return
    text = _job_line(event, job)
    if fields:
        text += " " + " ".join(f"{k}={logfmt(v)}" for k, v in fields.items())
    logger.log(level, text)


def succeeded_line(job: Job, duration: float) -> str:
    """The line every successful job writes at INFO: built in one f-string."""
    return f"{_job_line('succeeded', job)} duration_ms={duration * 1000:.1f} outcome=ok"


def _job_line(event: str, job: Job) -> str:
    key = job.idempotency_key
    return (
        f"event={event} job_id={job.id} task={_logfmt_name(job.task_path)} "
        f"queue={_logfmt_name(job.queue_name)} key={'-' if key is None else logfmt(key)} "
        f"attempt={job.attempts}"
    )


# Task paths and queue names repeat on every line: escaped once each (bounded, as a row may hold
# any text in them).
_logfmt_name = lru_cache(maxsize=1024)(logfmt)


class _IdList:
    """The claimed jobs' ids, comma-separated, formatted only if the line is written."""

    __slots__ = ("jobs",)

    def __init__(self, jobs):
        self.jobs = jobs

    def __str__(self):
        return ",".join(str(job.id) for job in self.jobs)


@dataclass(slots=True)
class Held:
    """A job whose lease this worker holds."""

    job: Job
    started: float | None = None  # monotonic time the handler began, None while buffered
    lost: bool = False
    thread: threading.Thread | None = None  # the handler running it
    returned: bool = False  # its handler is done; the outcome waits to be settled
    # Its outcome is being stored: the lease-guarded acknowledgement (or failure) decides
    # whether the lease was lost, not a heartbeat that finds the job no longer running.
    settling: bool = False


class LeaseTable(Mapping):
    """The jobs this worker holds leases on, by id: read like a dict, changed only through the
    verbs below, under one lock shared by the main thread and the handler threads.

    hold (claimed) → start (a handler took it) → returned (its outcome is queued) → finish
    (settled or released); lose (the heartbeat found the lease gone); abandon (past its timeout).
    """

    def __init__(self):
        self._held: dict[int, Held] = {}
        self._lock = threading.Lock()
        self.busy = 0  # begun and not returned: handlers at work

    def __getitem__(self, job_id: int) -> Held:
        return self._held[job_id]

    def __iter__(self):
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, *jobs: Job) -> None:
        with self._lock:
            for job in jobs:
                self._held[job.id] = Held(job)

    def start(
        self, job: Job, thread: threading.Thread | None, *, handback: Callable | None = None
    ) -> Held | None:
        """A handler may run `job`: only this very claim, still ours and not begun (a lease
        lost, then claimed again, leaves a second copy of the job in the inbox). With
        `handback` (the worker is stopping) such a claim is not begun but handed to it."""
        with self._lock:
            held = self._held.get(job.id)
            if held is None or held.lost or held.job is not job or held.started is not None:
                return None
            if handback is not None:
                handback(job)
                return None
            held.thread = thread
            held.started = time.monotonic()
            self.busy += 1
            return held

    def forget_unstarted(self, job: Job) -> bool:
        """This claim of `job`, not begun, is no longer ours to run: forget it. False if it is
        not held as this very claim (already forgotten, or held by a newer claim)."""
        with self._lock:
            held = self._held.get(job.id)
            if held is None or held.job is not job or held.started is not None:
                return False
            del self._held[job.id]
            return True

    def returned(self, held: Held) -> None:
        with self._lock:
            if not held.returned:
                held.returned = True
                self.busy -= 1

    def lose(self, job: Job) -> bool:
        """The lease is gone. A job not begun is forgotten now (the handler skips it; nothing
        would report back for it); a running one is marked, its outcome dropped on return.

        False, and nothing changed, for a job no longer held or whose outcome is being stored:
        its acknowledgement committed (or is about to be refused, and says so itself) while
        the heartbeat waited for the database, and it is not running to be extended."""
        with self._lock:
            held = self._held.get(job.pk)
            if held is None or held.settling:
                return False
            if held.started is None:
                del self._held[job.pk]
            else:
                held.lost = True
            return True

    def to_settle(self, claim: Job) -> Held | None:
        """The claim whose outcome the settler is about to store, marked settling; None if
        there is nothing to store: no longer held, held as another claim of the job (a newer
        one), or its lease lost (then forgotten here)."""
        with self._lock:
            held = self._held.get(claim.pk)
            if held is None or held.job is not claim:
                return None
            if held.lost:
                del self._held[claim.pk]
                return None
            held.settling = True
            return held

    def unsettle(self, pairs) -> None:
        """Storing these outcomes failed; they go back to be tried again."""
        with self._lock:
            for held, _ in pairs:
                held.settling = False

    def finish(self, job_id: int) -> Held | None:
        """Settled, released or dropped: no longer ours to vouch for."""
        with self._lock:
            return self._held.pop(job_id, None)

    def finish_claim(self, job: Job) -> None:
        """finish, if `job` is still held as this very claim (not a newer claim of it)."""
        with self._lock:
            held = self._held.get(job.pk)
            if held is not None and held.job is job:
                del self._held[job.pk]

    def finish_all(self, job_ids) -> None:
        with self._lock:
            for job_id in job_ids:
                self._held.pop(job_id, None)

    def abandon(self, job_id: int) -> Held | None:
        """Past its timeout: forgotten while its handler may still be running it (a fresh
        handler takes that one's place, so it no longer counts as busy)."""
        with self._lock:
            held = self._held.pop(job_id, None)
            if held is not None and held.started is not None and not held.returned:
                held.returned = True
                self.busy -= 1
            return held

    def live_jobs(self) -> list[Job]:
        """The jobs whose leases the heartbeat extends."""
        with self._lock:
            return [h.job for h in self._held.values() if not h.lost]

    def running(self) -> list[Held]:
        """Begun and not returned: what a timeout may apply to."""
        with self._lock:
            return [h for h in self._held.values() if h.started is not None and not h.returned]

    def jobs(self) -> list[Job]:
        with self._lock:
            return [h.job for h in self._held.values()]


def printable(exc: BaseException) -> bool:
    """Whether its traceback can be formatted (its __cause__, __context__ and notes read)."""
    try:
        tb.TracebackException.from_exception(exc)
    except BaseException:  # noqa: BLE001 - the task's own code, failing in any way
        return False
    return True


def formatted_traceback(exc: BaseException) -> str:
    """The traceback stored with a failure. Formatting runs the task's own code (its
    exception's __str__, __cause__, notes) and may itself fail, in any way: then a line saying
    so, never an exception that ends the handler thread with the job still held."""
    try:
        return "".join(tb.format_exception(exc))
    except BaseException as failure:  # noqa: BLE001 - see above
        return (
            f"{class_path(type(exc))}: {exception_text(exc)}\n"
            f"(its traceback could not be formatted: {type(failure).__name__})\n"
        )


def _close_transactions_left_open(wrappers) -> list[str]:
    """After a job, on its handler thread (`wrappers`: the thread's own connection objects,
    one per alias): the aliases the task left inside a transaction, rolled back and closed.
    Left so, the next jobs on the thread would run in it (never committing, on PostgreSQL) and,
    on SQLite, its write lock would stop every other connection (the settler's too) until the
    process ended. Attributes only, per job: no round trip."""
    left = []
    for conn in wrappers:
        if conn.connection is None or (conn.autocommit and not conn.in_atomic_block):
            continue
        left.append(conn.alias)
        # (Closing it discards the transaction even where the rollback fails.)
        with contextlib.suppress(Exception):
            conn.connection.rollback()
        # Django's own bookkeeping of the block the task never left; connect() starts afresh.
        conn.in_atomic_block, conn.savepoint_ids, conn.atomic_blocks = False, [], []
        conn.needs_rollback = False
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - the next query opens a new connection
            conn.connection = None
    return left


@dataclass(slots=True)
class Finished:
    # The claim the handler ran (LeaseTable.to_settle): a handler given up on past its timeout
    # may return after the job was claimed again, and its outcome is not the new claim's.
    claim: Job
    duration: float
    value: object = None
    # `value` as the JSON its acknowledgement stores, checked and encoded once (_execute).
    stored: str | None = None
    error: BaseException | None = None
    formatted: str = ""
    permanent: bool = False  # fail without retry whatever the error's class
    suspended: workflows.Suspend | None = None  # a workflow that waits (its job already does)

    @property
    def acknowledged_value(self):
        return self.value if self.stored is None else self.stored


@dataclass
class Stats:
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    leases_lost: int = 0
    timeouts: int = 0
    db_errors: int = 0


class Worker(Loop):
    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 1,
        prefetch: int | None = None,
        burst: bool = False,
        drain: float | None = None,
        max_jobs: int | None = None,
        lease_seconds: float | None = None,
        poll_interval: float | None = None,
        grace: float = 30.0,
        sweep_interval: float = 1.0,
        clock: Callable = timezone.now,
        using: str | None = None,
        worker_id: str | None = None,
        backend: str = "default",
        chores: str | None = None,
    ):
        """`backend`: the TASKS alias whose jobs this worker runs; its OPTIONS["DATABASE"] is the
        database it claims from unless `using` says otherwise. `chores`: who runs the
        background chores (jobqueue.chores), default REDRIVE["CHORES"]; "off" for this worker
        takes no part (`runworker --no-chores`)."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.backend_alias = backend
        if using is None:
            using = self.backend.database
        self.queues = list(queues) if queues else None
        self.concurrency = concurrency
        # Jobs held beyond the running ones, so one claim round trip serves many handlers.
        # None: adapt to job duration (about a quarter second of work per handler thread, so
        # quick jobs are claimed a hundred at a time and slow ones are not hoarded).
        self.prefetch = prefetch
        self._duration_ema = 0.05  # a prior: quick jobs show themselves within a claim or two
        self._durations_seen = 0
        self.burst = burst or drain is not None
        # A drain: a burst that also waits for what is not due yet (retries, scheduled jobs)
        # until nothing of its queues is left to finish, or `drain` seconds have passed.
        self.drain = drain
        self.drain_until = None if drain is None else time.monotonic() + drain
        self.max_jobs = max_jobs
        self.lease_seconds = lease_seconds or setting("LEASE_SECONDS")
        self.poll_interval = poll_interval or setting("POLL_INTERVAL")
        self.grace = grace
        self.sweep_interval = sweep_interval
        # timezone.now asks the lazy settings for USE_TZ on every call, and a worker asks the
        # time several times a job: the default clock is the same call with the answer kept.
        if clock is timezone.now:
            clock = partial(datetime.now, UTC if settings.USE_TZ else None)
        self.clock = clock
        # Read once, not per job (_execute checks every payload and return value against it).
        self.max_payload_bytes = setting("MAX_PAYLOAD_BYTES")
        self.worker_id = worker_id or process_id()
        super().__init__(
            who="jobqueue", kind="worker", ident=self.worker_id, using=using, log=logger
        )

        self.held = LeaseTable()
        self.tasks = TaskCache()
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.finished: queue.SimpleQueue = queue.SimpleQueue()
        self.returned: queue.SimpleQueue = queue.SimpleQueue()
        self.stats = Stats()
        self._threads: list[threading.Thread] = []
        self._handler_serial = 1
        # Handler threads given up on (a job past its timeout): each exits once its job returns.
        self._abandoned: set[threading.Thread] = set()
        self.exit_code = 0
        self._last_heartbeat = 0.0
        self.listener: Listener | None = None
        self.started_at = timezone.now()
        self._tallies: dict[tuple, store.Tally] = {}
        self._last_record = 0.0
        # An operator quieted this worker (jobqueue.store.workers.command): it claims nothing
        # more and finishes what it holds, until it is stopped.
        self.quiet = False
        self._claimed_empty = False  # burst mode: the last claim found nothing
        self._last_claim_at: datetime | None = None  # a claim last leased a job (its record)
        self._executions = 0  # jobs handlers finished running (burst: see _claimed_empty)
        # The threads whose connections are the queue's own (main, settler): named and given a
        # lock timeout; handlers' connections are the tasks' and left as the project made them.
        self._queue_threads: set[int] = set()
        self._settler: threading.Thread | None = None
        self._settle_wake = threading.Event()
        self._settling = True  # cleared once the main thread has nothing left to hand over
        # Counters and per-minute tallies are written by the main thread (timeouts, lost
        # leases) and the settler (outcomes); the main thread also flushes the tallies.
        self._counts = threading.Lock()
        self._low_water = 0  # held jobs at or below which the main thread claims more
        self._announce_start = False  # send task_started (someone listens)
        # The sweep, schedule ticks, broker mirrors and pruning: run on this thread while
        # this worker leads its database (or by every worker, or by none: REDRIVE["CHORES"]).
        self.chores = Chores(
            duties(
                using=using,
                who=self.worker_id,
                sweep_interval=sweep_interval,
                finished=self._send_finished,
                brokers=not burst,  # a burst's worker leaves the brokers to the long-running
            ),
            holder=self.worker_id,
            using=using,
            lease_seconds=self.lease_seconds,
            mode=setting("CHORES") if chores is None else chores,
        )

    # --- lifecycle -----------------------------------------------------------------------

    def _configure_connection(self, sender, connection, **kwargs):
        """Name the queue connection and bound its lock waits (PostgreSQL).

        A claim stuck behind a table lock then fails fast and is retried with backoff instead
        of hanging the worker; operators can find (or terminate) it by application_name.
        """
        if connection.vendor != "postgresql" or threading.get_ident() not in self._queue_threads:
            return
        if setting("POOLER") == "transaction":
            return  # no session of our own to set: lock_timeout belongs on the role there
        # A worker cut off inside a transaction (a partition mid-sweep) would keep its row
        # locks until its host came back: the server ends such a session after a lease, so
        # the rows it locked go to the other hosts. No JIT: the queue's statements take a few
        # milliseconds, and compiling one whose estimate crosses jit_above_cost took 24.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, false), "
                "set_config('idle_in_transaction_session_timeout', %s, false), "
                "set_config('jit', 'off', false), "
                "set_config('application_name', %s, false)",
                [
                    f"{int(setting('LOCK_TIMEOUT') * 1000)}ms",
                    f"{int(self.lease_seconds * 1000)}ms",
                    f"redrive-worker {self.worker_id}"[:63],
                ],
            )

    def run(self) -> int:
        # A log record looks up the running asyncio task; with no event loop (the worker runs
        # none: an async task runs in one of its own) that lookup raises and catches an
        # exception, which cost more than the rest of the job's line. Restored on exit.
        tasks_logged, logging.logAsyncioTasks = logging.logAsyncioTasks, False
        try:
            return self._run()
        finally:
            logging.logAsyncioTasks = tasks_logged

    def _run(self) -> int:
        self._queue_threads.add(threading.get_ident())
        connection_created.connect(self._configure_connection)
        if connections[self.using].connection is not None:  # already open: configure it now
            self._configure_connection(None, connections[self.using])
        # Named as the command line names it: a drain is a burst that also waits.
        mode = {"drain": f"{self.drain:g}s"} if self.drain is not None else {"burst": self.burst}
        log_line(
            logger, logging.INFO, "worker_started", worker=self.worker_id,
            queues=",".join(self.queues or ["*"]), concurrency=self.concurrency,
            lease=f"{self.lease_seconds:.1f}s", **mode,
        )  # fmt: skip
        self._mark_deploy()
        for n in range(self.concurrency):
            thread = threading.Thread(target=self._handler_loop, name=f"handler-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._settler = threading.Thread(target=self._settle_loop, name="settler", daemon=True)
        self._settler.start()
        listener = self.listener = self._start_listener()
        # Leases are written for lease_seconds: the first heartbeat is due a third of that after
        # the first claim, not on the step after it.
        self._last_heartbeat = time.monotonic()
        try:
            self._loop()
            self.chores.release()  # to another worker now, not after a lease
            self._drain()
            self._stop_settler()
            self._forget()
        finally:
            self._stop_settler()
            for _ in self._threads:
                self.inbox.put(None)
            for thread in self._threads:
                thread.join(timeout=1.0)  # a handler given up on by timeout may still be busy
            if listener:
                listener.stop()
                listener.join(timeout=2.0)
        connection_created.disconnect(self._configure_connection)
        stats = self.stats
        log_line(
            logger, logging.INFO, "worker_stopped", worker=self.worker_id, claimed=stats.claimed,
            succeeded=stats.succeeded, retried=stats.retried, dead=stats.dead,
            leases_lost=stats.leases_lost, timeouts=stats.timeouts,
            database_errors=stats.db_errors,
        )  # fmt: skip
        return self.exit_code

    def _mark_deploy(self) -> None:
        """A start with a code version other than the newest deploy marker's records a marker
        (jobqueue.store.deploys). A worker that fails to is still a worker: it says so and runs."""
        version = store.deploys.code_version()
        if not version:
            return
        try:
            marked = store.deploys.mark_if_new(
                version, actor=self.worker_id, at=self.clock(), using=self.using
            )
        except (DatabaseError, ValueError, RuntimeError) as exc:
            log_line(
                logger, logging.WARNING, "deploy_not_marked", worker=self.worker_id,
                version=version, error=first_line(exc),
            )  # fmt: skip
            return
        if marked is not None:
            log_line(
                logger, logging.INFO, "deploy_marked", worker=self.worker_id, version=version,
                seq=marked.seq,
            )  # fmt: skip

    def _loop(self):
        while not self.stopping:
            # Cleared before the step, not after the wait: a wake-up sent while the step runs
            # (a handler finishing the last job it had) must not be lost.
            self.wake.clear()
            try:
                progressed = self._step()
                self._db_backoff = 0.0
            except DatabaseError as exc:
                self._database_trouble(exc)
                continue
            if self._done():
                return
            # Handlers wake this thread when the inbox runs low or empty, the settler when it
            # settled a batch (a burst may be over); otherwise it looks again at the poll.
            self.wake.wait(SETTLE_INTERVAL if progressed else self._idle_timeout())

    def _step(self) -> bool:
        """A claim if the inbox is low, then housekeeping; True if it claimed anything. The
        claim comes first so that a worker just started has its handlers busy before it
        writes its record and runs the chores (those took 20 ms of round trips and imports
        before the first claim)."""
        self._revive_handlers()
        claimed = False if self.stopping or self.quiet else self._claim_if_low()
        self._record_if_due()
        if self.chores.tick(self.clock()):
            # This step claimed before the chores made jobs claimable (ticks enqueued, leases
            # swept): claim them on the next one, at once, and a burst worker whose claim
            # found nothing is not done yet.
            self._claimed_empty = False
            self.wake.set()
        self._heartbeat_if_due()
        self._enforce_timeouts()
        return claimed

    def _claim_if_low(self) -> bool:
        # Asked here, once per step, rather than by handlers once per job.
        self._announce_start = wants(task_started, log_task_started)
        window = self.concurrency + self._prefetch_window()
        # Refill at the low-water mark rather than after every job: fewer, fuller claims. What
        # counts is the work not yet done (waiting and running): outcomes the settler has yet
        # to store do not hold the next claim back, but a backlog of them (a settler stuck on
        # the database) stops claiming.
        self._low_water = window // 2
        waiting, busy = self.inbox.qsize(), self.held.busy
        limit = window - waiting - busy
        if waiting + busy >= self.concurrency and waiting > self._low_water:
            limit = 0
        if len(self.held) >= 2 * window:
            limit = 0
        if self.max_jobs is not None:
            limit = min(limit, self.max_jobs - self.stats.claimed)
        if limit > 0:
            claim_started = time.monotonic()
            executions = self._executions
            jobs = store.claim(
                worker_id=self.worker_id,
                queues=self.queues,
                limit=limit,
                lease_seconds=self.lease_seconds,
                now=self.clock(),
                using=self.using,
                sweep=False,  # the chores' (LeaseSweep)
            )
            self._claimed_empty = (
                not jobs
                and executions == self._executions
                and not (
                    self.burst and store.throttled(self.queues, now=self.clock(), using=self.using)
                )
            )
            if jobs:
                self._last_claim_at = self.clock()
                fault_point("after_claim")
                # One line per claim, naming every job it leased (a line per job cost more than
                # a quick job's whole run); each job's outcome has its own line.
                log_line(
                    logger, logging.INFO, "claimed", worker=self.worker_id, n=len(jobs),
                    limit=limit, duration_ms=f"{(time.monotonic() - claim_started) * 1000:.1f}",
                    job_ids=_IdList(jobs),
                )  # fmt: skip
            self.held.hold(*jobs)
            for job in jobs:
                self.inbox.put(job)
            self.stats.claimed += len(jobs)
            return bool(jobs)
        return False

    def _revive_handlers(self):
        """A handler thread that died (a bug, not a job failure: those are caught) would leave
        its jobs leased and renewed forever; replace it and say so loudly."""
        for n, thread in enumerate(self._threads):
            if not thread.is_alive() and not self.stopping:
                log_line(
                    logger, logging.ERROR, "handler_died", worker=self.worker_id,
                    thread=thread.name,
                )  # fmt: skip
                self._replace_handler(n)

    def _replace_handler(self, n: int):
        replacement = threading.Thread(
            target=self._handler_loop, name=f"handler-{n}.{self._handler_serial}", daemon=True
        )
        self._handler_serial += 1
        replacement.start()
        self._threads[n] = replacement

    def _learn_duration(self, seconds: float) -> None:
        """Fold one job's run time into the estimate the claim window follows: a plain mean
        over the first jobs (the prior counting as one), then a moving average. Learned as each
        job returns, not as the settler stores it, so a worker just started claims its full
        window on its second or third claim rather than its seventh. (Handlers may race here;
        a lost sample only slows the estimate.)"""
        self._durations_seen += 1
        weight = max(0.1, 1.0 / (self._durations_seen + 1))
        self._duration_ema += weight * (seconds - self._duration_ema)

    def _prefetch_window(self) -> int:
        if self.prefetch is not None:
            return self.prefetch
        return min(MAX_PREFETCH, int(self.concurrency * 0.25 / max(self._duration_ema, 1e-4)))

    def _done(self) -> bool:
        if self.held:
            return False
        if self.quiet and self.burst:  # it will claim nothing more: the burst is over
            return True
        if self.max_jobs is not None and self.stats.claimed >= self.max_jobs:
            return True
        if not (self.burst and self._claimed_empty):
            return False
        return self.drain_until is None or self._drained()

    def _drained(self) -> bool:
        """A drain ends once nothing of its queues is left to finish, or at its bound with
        exit status 1, saying how many jobs were left."""
        left = store.unfinished(self.queues, using=self.using)
        if left and time.monotonic() < self.drain_until:
            return False
        if left:
            log_line(
                logger, logging.ERROR, "drain_incomplete", worker=self.worker_id, unfinished=left
            )
            self.exit_code = 1
        return True

    def _idle_timeout(self) -> float:
        timeout = self.poll_interval
        if self.held:
            timeout = min(timeout, self.lease_seconds / 3)
        return timeout

    def _drain(self):
        """After a stop: hand back unstarted jobs, let running ones finish within the grace."""
        deadline = time.monotonic() + self.grace
        while self.held and time.monotonic() < deadline:
            self._release(self._unstarted(), reason="not started")
            self._settle_wake.set()  # what finished is stored by the settler meanwhile
            try:
                self._heartbeat_if_due()
            except DatabaseError as exc:
                self._database_trouble(exc)
            if self.held:
                self.wake.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                self.wake.clear()
        if self.held:
            # Outcomes already in hand are stored first: a job whose handler returned must not
            # be handed back (and run again) only because the settler had not reached it yet.
            self._stop_settler()
            self._release(self.held.jobs(), reason="grace period over")

    def _forget(self):
        """A clean exit: flush the last tallies and remove this worker's record."""
        try:
            self._record_if_due(force=True)
            store.forget_worker(self.worker_id, using=self.using)
        except DatabaseError as exc:
            log_line(logger, logging.WARNING, "record_failed", worker=self.worker_id, error=exc)

    def _unstarted(self) -> list[Job]:
        jobs = []
        for source in (self.inbox, self.returned):
            while True:
                try:
                    job = source.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    jobs.append(job)
        return jobs

    def _release(self, jobs, *, reason):
        if not jobs:
            return
        try:
            released = store.release(jobs, now=self.clock(), using=self.using)
        except DatabaseError as exc:
            log_line(logger, logging.WARNING, "release_failed", count=len(jobs), error=exc)
            released = 0
        for job in jobs:
            self.held.finish(job.pk)
            log_event("released", job, reason=reason)
        log_line(logger, logging.INFO, "leases_released", count=released, of=len(jobs))

    # --- handler threads -----------------------------------------------------------------

    def _handler_loop(self):
        me = threading.current_thread()
        wrappers = [connections[alias] for alias in connections]  # this thread's, made lazily
        try:
            while me not in self._abandoned:
                job = self.inbox.get()
                if job is None:
                    return
                if me in self._abandoned:  # given up on while it waited: not its job any more
                    self.inbox.put(job)
                    return
                if job.locked_until is not None and job.locked_until <= self.clock():
                    # Its lease ran out while it waited for a handler (the heartbeat could not
                    # reach the database: a partition, a stall): another worker may run it now,
                    # and an effect outside the database would happen twice.
                    if self.held.forget_unstarted(job):
                        self._lease_lost(job, "start")
                    continue
                # Once stopping, a job not started goes back for _drain to hand its lease back.
                handback = self.returned.put if self.stopping else None
                held = self.held.start(job, me, handback=handback)
                if held is None:
                    continue
                try:
                    outcome = self._execute(job)
                    left_open = _close_transactions_left_open(wrappers)
                    if left_open and outcome.error is None and outcome.suspended is None:
                        exc = TransactionLeftOpen(
                            f"the task returned inside a transaction on {', '.join(left_open)}:"
                            " its uncommitted writes were rolled back"
                        )
                        outcome = Finished(job, outcome.duration, error=exc, formatted=str(exc))
                    if outcome.suspended is None:
                        self._learn_duration(outcome.duration)
                    # A job may have enqueued another (a batch's completion, a continuation):
                    # a claim that began before it finished cannot call the queue empty.
                    self._executions += 1
                    self.held.returned(held)
                    self.finished.put(outcome)
                finally:
                    # Refill time (the main thread claims at the low-water mark), or nothing
                    # left to run: wake the main thread. Otherwise it settles on its own clock.
                    waiting = self.inbox.qsize()
                    if waiting == 0 or waiting + self.concurrency <= self._low_water:
                        self.wake.set()
                    if waiting == 0:
                        self._settle_wake.set()  # nothing left to run: store it now
        finally:
            self._abandoned.discard(me)
            # This thread's Django connection dies with it rather than lingering server-side.
            connections.close_all()

    def _execute(self, job: Job) -> Finished:
        started = time.monotonic()
        try:
            task, _, plain = self.tasks.resolve(job.task_path)
            try:
                if not isinstance(job.args, list) or not isinstance(job.kwargs, dict):
                    raise TypeError("args must be a JSON array and kwargs a JSON object")
                store.check_payload(job.args, job.kwargs, self.max_payload_bytes)
                self.tasks.check_call(job.task_path, job.args, job.kwargs)
            except (TypeError, ValueError) as exc:
                raise InvalidPayload(f"payload unfit for {job.task_path}: {exc}") from exc
            result = None
            if task.takes_context or self._announce_start:
                result = self.backend.result_for(job, task)
                task_started.send(type(self.backend), task_result=result)
            # What a workflow's steps read (jobqueue.workflows): this job, clock and database.
            attempt = workflows.enter(job, self.clock, self.using, self.lease_seconds)
            returned = False
            try:
                if task.takes_context:
                    value = task.call(TaskContext(task_result=result), *job.args, **job.kwargs)
                elif plain:  # what Task.call does for a function that is not a coroutine
                    value = task.func(*job.args, **job.kwargs)
                else:
                    value = task.call(*job.args, **job.kwargs)
                returned = True
            finally:
                workflows.leave(attempt, returned=returned)
            try:
                value = store.normalized(value, "the return value")
                stored = store.check_value(value, "the return value", self.max_payload_bytes)
            except (TypeError, ValueError) as exc:
                # Recorded as raised (as Django's backends record the TypeError from converting
                # it), but never retried: the task ran, and would only repeat its effect to
                # return the same value (too big is refused too: every view of the job's page
                # would load it). Refused here, the job fails alone; reaching the
                # acknowledgement, it would fail the batch's statement.
                return Finished(
                    job,
                    time.monotonic() - started,
                    error=exc,
                    formatted=formatted_traceback(exc),
                    permanent=True,
                )
            return Finished(job, time.monotonic() - started, value=value, stored=stored)
        except workflows.Suspend as suspended:
            # The workflow's job already waits (its transaction did that): only let go of it,
            # before the heartbeat would try to extend a lease that is no longer there.
            self.held.finish_claim(job)
            log_event(
                "suspended",
                job,
                until=suspended.until.isoformat(),
                reason=suspended.reason,
                duration_ms=f"{(time.monotonic() - started) * 1000:.1f}",
            )
            return Finished(job, time.monotonic() - started, suspended=suspended)
        except BaseException as exc:  # noqa: BLE001 - every failure is recorded, none is silent
            if isinstance(exc, DatabaseError):
                try:
                    close_old_connections()
                except Exception:  # noqa: BLE001 - a broken connection may fail to close too
                    log_line(
                        logger, logging.WARNING, "handler_connection_reset_failed", job_id=job.pk
                    )
            return Finished(
                job, time.monotonic() - started, error=exc, formatted=formatted_traceback(exc)
            )

    @cached_property
    def backend(self) -> DatabaseBackend:
        from django.tasks import task_backends

        return task_backends[self.backend_alias]

    # --- the settler thread -------------------------------------------------------------

    def _settle_loop(self):
        """Store outcomes as handlers finish them, every SETTLE_INTERVAL or sooner when the
        inbox empties; back off (bounded) while the database is away, losing none."""
        self._queue_threads.add(threading.get_ident())
        backoff = 0.0
        try:
            while True:
                self._settle_wake.wait(SETTLE_INTERVAL)
                self._settle_wake.clear()
                try:
                    if self._settle():
                        self.wake.set()  # the main thread may refill, or end a burst
                    backoff = 0.0
                except DatabaseError as exc:
                    with self._counts:
                        self.stats.db_errors += 1
                    backoff = next_backoff(backoff)
                    log_line(
                        logger, logging.WARNING, "database_error", worker=self.worker_id,
                        thread="settler", error=first_line(exc), retry_in=f"{backoff:.1f}s",
                    )  # fmt: skip
                    connections[self.using].close()
                    self._settle_wake.wait(backoff)
                    continue
                if not self._settling and self.finished.empty():
                    return
        except BaseException:  # noqa: BLE001 - whatever ends it, the worker must not go on without it
            log_line(
                logger, logging.ERROR, "settler_died", exc_info=True, worker=self.worker_id,
                action="exit_for_restart",
            )  # fmt: skip
            self.exit_code = 1
            self.stop()
        finally:
            connections.close_all()  # this thread's own

    def _stop_settler(self):
        """After the drain: let the settler store what is left, then end it."""
        if self._settler is None or not self._settler.is_alive():
            return
        self._settling = False
        self._settle_wake.set()
        self._settler.join(timeout=self.grace + 5.0)

    # --- bookkeeping ---------------------------------------------------------------------

    def _settle(self) -> bool:
        """Acknowledge successes in one batch; record each failure.

        If the database goes away part way, every outcome not yet stored goes back on the
        queue for the next step: an outcome dropped here would leave its job leased, and
        renewed by the heartbeat, with nothing left to run or settle it.
        """
        done: list[tuple[Held, Finished]] = []
        failed: list[tuple[Held, Finished]] = []
        while True:
            try:
                fin = self.finished.get_nowait()
            except queue.Empty:
                break
            if fin.suspended:
                continue  # a workflow waiting: let go of already
            held = self.held.to_settle(fin.claim)
            if held is None:
                continue  # given up on (timeout), released, or its lease lost
            (failed if fin.error else done).append((held, fin))
        settled = bool(done or failed)
        try:
            if done:
                self._acknowledge(done)  # empties `done` as it settles each
            while failed:
                held, fin = failed[0]
                self._fail(
                    held.job,
                    fin.error,
                    fin.formatted,
                    duration=fin.duration,
                    permanent=fin.permanent,
                )
                self.held.finish(held.job.pk)
                failed.pop(0)
        except DatabaseError:
            self.held.unsettle(done + failed)
            for _, fin in done + failed:
                self.finished.put(fin)
            raise
        return settled

    def _acknowledge(self, done: list[tuple[Held, Finished]]):
        """Store successes in one statement, removing each from `done` once settled (whatever
        is left there when a database error escapes goes back for the next step)."""
        fault_point("after_effect")  # the handlers returned: their effects are committed
        now = self.clock()
        try:
            acked = store.acknowledge(
                [(held.job, fin.acknowledged_value) for held, fin in done],
                now=now,
                using=self.using,
            )
        except (DataError, IntegrityError):
            # A value the database refuses fails the whole statement, and would again on every
            # retry while the jobs beside it stay unacknowledged: store them one at a time and
            # fail the refused one alone. (_execute already refuses every value it can tell
            # is unstorable; SQLite reports a JSON check it fails as an IntegrityError.)
            self._acknowledge_one_by_one(done)
            return
        fault_point("after_ack")
        self._settle_acknowledged(done, acked, now)
        done.clear()

    def _acknowledge_one_by_one(self, done):
        while done:
            held, fin = done[0]
            now = self.clock()
            try:
                acked = store.acknowledge(
                    [(held.job, fin.acknowledged_value)], now=now, using=self.using
                )
            except (DataError, IntegrityError) as exc:
                self._fail(
                    held.job,
                    exc,
                    formatted_traceback(exc),
                    duration=fin.duration,
                    permanent=True,
                )
                self.held.finish(held.job.pk)
            else:
                self._settle_acknowledged([(held, fin)], acked, now)
            done.pop(0)

    def _settle_acknowledged(self, done, acked, now):
        announce = wants(task_finished, log_task_finished)  # asked once per batch, not per job
        logged = logger.isEnabledFor(logging.INFO)
        self.held.finish_all(held.job.id for held, _ in done)
        minute = now.replace(second=0, microsecond=0)
        lines = []
        for held, fin in done:
            job = held.job
            if job.id in acked:
                with self._counts:
                    self.stats.succeeded += 1
                    tally = self._tally(job, minute)
                    tally.succeeded += 1
                    tally.last_success_at = now
                    tally.observe(RUN, fin.duration)
                    tally.observe(WAIT, queue_wait(job))
                job.state, job.return_value, job.finished_at = JobState.DONE, fin.value, now
                if logged:
                    lines.append(succeeded_line(job, fin.duration))
                if announce:
                    self._send_finished(job)
            else:
                self._lease_lost(job, "acknowledge")
        # A line per job, written together (jobqueue.logfmt.log_lines).
        log_lines(logger, logging.INFO, lines)

    def _fail(
        self,
        job: Job,
        exc: BaseException,
        formatted: str,
        *,
        duration: float,
        permanent: bool = False,
    ):
        now = self.clock()
        verdict = classify(exc)
        retry_at = None
        if verdict.retry and not permanent and job.attempts < job.max_attempts:
            delay = verdict.delay
            if delay is None or not delay >= 0:  # not given (or NaN): the task's backoff
                base, cap = self._backoff_policy(job)
                delay = retry_delay(job.attempts, base=base, cap=cap)
            # A dependency's retry_after (RateLimited) may be anything: past this, a date out
            # of range would stop the failure being stored at all.
            retry_at = now + timedelta(seconds=min(delay, MAX_RETRY_DELAY))
        entry = store.error_entry(
            job,
            class_path=class_path(type(exc)),
            message=exception_text(exc),
            traceback=formatted,
            now=now,
            duration=duration,
        )
        ok = store.fail(job, entry, retry_at=retry_at, now=now, using=self.using)
        fields = {"duration_ms": f"{duration * 1000:.1f}", "error": class_path(type(exc))}
        if ok:
            with self._counts:
                tally = self._tally(job, now.replace(second=0, microsecond=0))
                tally.failed += 1
                tally.dead += retry_at is None
                tally.observe(RUN, duration)
                tally.observe(WAIT, queue_wait(job))
                if retry_at is not None:
                    self.stats.retried += 1
                else:
                    self.stats.dead += 1
        if not ok:
            self._lease_lost(job, "fail")
        elif retry_at is not None:
            log_event(
                "retried",
                job,
                logging.WARNING,
                outcome="retry",
                retry_at=retry_at.isoformat(),
                **fields,
            )
        else:
            job.state, job.errors = JobState.DEAD, [*job.errors, entry]
            log_event("dead_lettered", job, logging.ERROR, outcome="dead", **fields)
            self._send_finished(job, exc)

    def _tally(self, job: Job, minute) -> store.Tally:
        key = (minute, job.queue_name, job.task_path)
        if key not in self._tallies:
            self._tallies[key] = store.Tally()
        return self._tallies[key]

    def _record_if_due(self, force=False):
        """Refresh this worker's record and flush its per-minute tallies (health figures)."""
        now_mono = time.monotonic()
        if not force and now_mono - self._last_record < RECORD_INTERVAL:
            return
        self._last_record = now_mono
        with self._counts:
            tallies, self._tallies = self._tallies, {}
        try:
            command = store.record_worker(
                worker_id=self.worker_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                queues=self.queues,
                concurrency=self.concurrency,
                started_at=self.started_at,
                succeeded=self.stats.succeeded,
                failed=self.stats.retried + self.stats.dead,
                current_job_ids=sorted(self.held),
                tallies=tallies,
                last_claim_at=self._last_claim_at,
                now=self.clock(),
                using=self.using,
            )
        except DatabaseError:
            with self._counts:
                for key, tally in tallies.items():  # keep them for the next try
                    self._tallies.setdefault(key, store.Tally()).add(tally)
            raise
        self._obey(command)

    def _obey(self, command: str) -> None:
        """An operator's command, read with the worker's record: quiet, or stop (a drain, as on
        SIGTERM)."""
        if command == "quiet" and not self.quiet:
            self.quiet = True
            log_line(logger, logging.INFO, "worker_quieted", worker=self.worker_id)
        elif command == "stop" and not self.stopping:
            log_line(logger, logging.INFO, "worker_stop_requested", worker=self.worker_id)
            self.stop()

    def _backoff_policy(self, job: Job) -> tuple[float, float]:
        task = self.tasks.get(job.task_path)
        base = getattr(task, "backoff_base", None) or setting("BACKOFF_BASE")
        cap = getattr(task, "backoff_cap", None) or setting("BACKOFF_CAP")
        return base, cap

    def _lease_lost(self, job: Job, during: str):
        with self._counts:
            self.stats.leases_lost += 1
        log_event("lease_lost", job, logging.WARNING, during=during, outcome="lost")

    def _send_finished(self, job: Job, exc: BaseException | None = None):
        """task_finished for a job done or dead. For a failure it is sent while `exc` is being
        handled, as Django's own backends do: Django's log receiver then writes its ERROR line
        with the task's traceback (sys.exc_info())."""
        level = logging.INFO if exc is None else logging.ERROR
        task = self.tasks.get(job.task_path)
        if task is None or not wants(task_finished, log_task_finished, level):
            return  # no task to describe (UnknownTask): its dead letter and log line say it all
        try:
            result = self.backend.result_for(job, task)
            if exc is None:
                task_finished.send(type(self.backend), task_result=result)
                return
            if not printable(exc):
                # Logging its traceback would raise (logging.Handler.handleError prints it
                # again): sent as a plain result, the dead letter has what could be stored.
                task_finished.send(type(self.backend), task_result=result)
                return
            try:
                raise exc
            except BaseException:  # noqa: BLE001 - re-raised only to be the exception in hand
                task_finished.send(type(self.backend), task_result=result)
        except Exception:  # noqa: BLE001 - a receiver's failure is logged, never the job's
            log_line(logger, logging.ERROR, "signal_failed", exc_info=True, job_id=job.pk)

    def _heartbeat_if_due(self):
        now_mono = time.monotonic()
        if not self.held or now_mono - self._last_heartbeat < self.lease_seconds / 3:
            return
        self._last_heartbeat = now_mono
        jobs = self.held.live_jobs()
        fault_point("heartbeat")
        kept = store.extend_leases(
            jobs, lease_seconds=self.lease_seconds, now=self.clock(), using=self.using
        )
        for job in jobs:
            # A job settled (or a workflow suspended) while the extension waited for the
            # database was not lost: it is simply no longer running (LeaseTable.lose).
            if job.pk not in kept and self.held.lose(job):
                self._lease_lost(job, "heartbeat")

    def _enforce_timeouts(self):
        now_mono = time.monotonic()
        for held in self.held.running():
            timeout = getattr(self.tasks.get(held.job.task_path), "timeout", None)
            if timeout and now_mono - held.started > timeout:
                # Python cannot interrupt the thread; we stop vouching for the job instead.
                # (Forgotten only once the failure is stored: a database error retries it.
                # A job whose lease is already lost has nothing to store.)
                if not held.lost:
                    self._fail(
                        held.job,
                        JobTimeout(f"ran longer than {timeout}s"),
                        "",
                        duration=now_mono - held.started,
                    )
                    with self._counts:
                        self.stats.timeouts += 1
                self.held.abandon(held.job.pk)
                self._abandon(held.thread)

    def _abandon(self, thread: threading.Thread | None):
        """The thread is stuck in a job past its timeout: the jobs queued behind it go to a
        fresh thread in its place, and it exits whenever its job returns."""
        if thread is None or thread not in self._threads or self.stopping:
            return
        self._abandoned.add(thread)
        self._replace_handler(self._threads.index(thread))
        log_line(
            logger, logging.WARNING, "handler_abandoned", worker=self.worker_id,
            thread=thread.name, abandoned=len(self._abandoned),
        )  # fmt: skip
        if len(self._abandoned) > self.concurrency:
            # Each stuck thread keeps its database connection: past this many, a fresh process
            # is the only way to get them back. Stop and exit non-zero for the process manager.
            log_line(
                logger, logging.ERROR, "too_many_stuck_handlers", worker=self.worker_id,
                abandoned=len(self._abandoned), action="exit_for_restart",
            )  # fmt: skip
            self.exit_code = 1
            self.stop()

    def _start_listener(self):
        params = listen_params(connections[self.using])
        if params is None:
            return None
        listener = Listener(
            params,
            NOTIFY_CHANNEL,
            self.wake,
            payloads=self.queues,
        )
        listener.start()
        return listener

    # --- on the caller's thread (jobqueue.testing) --------------------------------------

    @cached_property
    def _sweep_here(self) -> LeaseSweep:
        return LeaseSweep(using=self.using, finished=self._send_finished)

    def run_here(self, *, limit: int) -> list[int]:
        """Claim and run due jobs one at a time on this thread and its connection, each settled
        before the next is claimed, until a claim finds none or `limit` ran; their ids, in the
        order they ran. No handler, settler or listener thread: a test's open transaction
        holds jobs no other connection can see (nor, on SQLite, write past). So no timeout is
        enforced and no lease extended, and no worker record or tallies are written."""
        me = threading.current_thread()
        ran: list[int] = []
        while len(ran) < limit:
            self._announce_start = wants(task_started, log_task_started)
            now = self.clock()
            # The sweep before each claim, unelected: the test's thread is the only one.
            self._sweep_here.run(now)
            jobs = store.claim(
                worker_id=self.worker_id,
                queues=self.queues,
                limit=1,
                lease_seconds=self.lease_seconds,
                now=now,
                using=self.using,
                sweep=False,
            )
            if not jobs:
                return ran
            (job,) = jobs
            self.stats.claimed += 1
            self.held.hold(job)
            held = self.held.start(job, me)
            outcome = self._execute(job)
            self.held.returned(held)
            self.finished.put(outcome)
            self._settle()
            ran.append(job.pk)
        return ran


class TaskCache:
    """Task objects and signatures by path: imported and inspected once per worker, not per job."""

    def __init__(self):
        self._resolved: dict[str, tuple] = {}
        # Call shapes (task, argument count, keyword names) known to bind: whether arguments
        # bind depends on nothing else, and Signature.bind cost more than a quick job.
        self._shapes: set[tuple] = set()

    def check_call(self, path: str, args: list, kwargs: dict) -> None:
        """Raise TypeError unless the task (resolved) takes these arguments."""
        shape = (path, len(args), *kwargs)
        if shape in self._shapes:
            return
        task, signature, _ = self._resolved[path]
        signature.bind(*([None] if task.takes_context else []), *args, **kwargs)
        if len(self._shapes) < MAX_CALL_SHAPES:
            self._shapes.add(shape)

    def resolve(self, path: str):
        try:
            return self._resolved[path]
        except KeyError:
            pass
        try:
            task = load_task(path)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise UnknownTask(f"cannot load task {path!r}: {exc}") from exc
        self._resolved[path] = (
            task,
            inspect.signature(task.func),
            not inspect.iscoroutinefunction(task.func),
        )
        return self._resolved[path]

    def get(self, path: str):
        """The task, or None if it cannot be loaded (callers fall back to default policy)."""
        try:
            return self.resolve(path)[0]
        except UnknownTask:
            return None
