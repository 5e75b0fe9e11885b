"""The worker loop: claim in batches, run handlers on threads, heartbeat, acknowledge, fail.

Three kinds of thread, each with its own Django connection. The main thread claims, renews
leases (heartbeat), enforces timeouts and releases, and, while this worker leads its database,
runs the background chores (jobqueue.chores: not the worker's own business, so not here);
handler threads run the tasks (jobqueue.execution); the settler thread (jobqueue.settler)
records their outcomes (acknowledges successes in one statement per batch, fails the rest).
Claiming and settling on two connections overlap their round trips: while the settler waits on
an acknowledgement the main thread's next claim is already on its way. The jobs held are in
the lease table all three share (jobqueue.held).

Stopping: the first SIGTERM/SIGINT stops claiming, hands back leases of jobs not yet started,
waits up to `grace` seconds for running handlers, then releases the leases of those still
running so another worker can take them at once. A second signal exits immediately.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cached_property, partial

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.backends.signals import connection_created
from django.tasks.signals import log_task_started, task_started
from django.utils import timezone

from jobqueue import store
from jobqueue.backend import DatabaseBackend, wants
from jobqueue.chores import Chores, LeaseSweep, duties
from jobqueue.conf import setting
from jobqueue.errors import JobTimeout, TransactionLeftOpen
from jobqueue.execution import Executor
from jobqueue.faults import worker_fault_point as fault_point
from jobqueue.held import LeaseTable
from jobqueue.listener import Listener, listen_params
from jobqueue.logfmt import log_line
from jobqueue.loop import Loop, first_line, process_id
from jobqueue.models import Job
from jobqueue.outcomes import (
    Finished,
    Stats,
    close_transactions_left_open,
    drop_connections_the_server_ended,
    log_event,
)
from jobqueue.settler import SETTLE_INTERVAL, Settler
from jobqueue.store.postgresql import NOTIFY_CHANNEL
from jobqueue.taskcache import TaskCache

logger = logging.getLogger("jobqueue.worker")
# Jobs leased beyond the running ones, at most: the window is a quarter second of work, so the
# cap binds only jobs of a millisecond or so. 500 drained one process's no-op jobs faster but
# the shared bench's two workers slower (each grabbed more of a short run), hand-run.
MAX_PREFETCH = 200
RECORD_INTERVAL = 5.0  # seconds between worker-record refreshes (health dashboard)


class _IdList:
    """The claimed jobs' ids, comma-separated, formatted only if the line is written."""

    __slots__ = ("jobs",)

    def __init__(self, jobs):
        self.jobs = jobs

    def __str__(self):
        return ",".join(str(job.id) for job in self.jobs)


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
        # Read once, not per job (the executor checks every payload and return value against it).
        self.max_payload_bytes = setting("MAX_PAYLOAD_BYTES")
        self.worker_id = worker_id or process_id()
        super().__init__(
            who="jobqueue", kind="worker", ident=self.worker_id, using=using, log=logger
        )
        self._init_state()
        # The sweep, schedule ticks, broker mirrors and pruning: run on this thread while
        # this worker leads its database (or by every worker, or by none: REDRIVE["CHORES"]).
        self.chores = Chores(
            duties(
                using=using,
                who=self.worker_id,
                sweep_interval=sweep_interval,
                finished=self.executor.send_finished,
                brokers=not burst,  # a burst's worker leaves the brokers to the long-running
            ),
            holder=self.worker_id,
            using=using,
            lease_seconds=self.lease_seconds,
            mode=setting("CHORES") if chores is None else chores,
        )

    def _init_state(self) -> None:
        """What the main, handler and settler threads share: the jobs held, the queues between
        them, the counters, and the settler itself."""
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
        # Runs the tasks (handler threads) and sends task_finished (settler, chores).
        self.executor = Executor(
            tasks=self.tasks,
            held=self.held,
            clock=self.clock,
            using=self.using,
            lease_seconds=self.lease_seconds,
            max_payload_bytes=self.max_payload_bytes,
            backend=lambda: self.backend,
        )
        self.settler = Settler(
            held=self.held,
            finished=self.finished,
            stats=self.stats,
            tasks=self.tasks,
            clock=self.clock,
            using=self.using,
            worker_id=self.worker_id,
            wake=self.wake,
            send_finished=self.executor.send_finished,
            queue_threads=self._queue_threads,
            died=self._settler_died,
        )
        # The handlers' own handle on it: they set it once per job that empties the inbox.
        self._settle_wake = self.settler.wake
        self._low_water = 0  # held jobs at or below which the main thread claims more

    def _stop_settler(self) -> None:
        """After the drain: let the settler store what is left, then end it."""
        self.settler.stop(timeout=self.grace + 5.0)

    def _settler_died(self) -> None:
        """The settler thread ended by a bug (it said so): outcomes would go unstored and their
        leases renewed forever, so the worker stops and exits non-zero for a restart."""
        self.exit_code = 1
        self.stop()

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
        self.settler.start()
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
        self.executor.announce_start = wants(task_started, log_task_started)
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
            self.settler.wake.set()  # what finished is stored by the settler meanwhile
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
        execute = self.executor.execute
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
                        self.settler.lease_lost(job, "start")
                    continue
                # Once stopping, a job not started goes back for _drain to hand its lease back.
                handback = self.returned.put if self.stopping else None
                held = self.held.start(job, me, handback=handback)
                if held is None:
                    continue
                try:
                    ended = drop_connections_the_server_ended(wrappers)
                    if ended:
                        log_line(
                            logger, logging.INFO, "connection_reopened", worker=self.worker_id,
                            thread=me.name, databases=",".join(ended), job_id=job.pk,
                        )  # fmt: skip
                    outcome = execute(job)
                    left_open = close_transactions_left_open(wrappers)
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

    @cached_property
    def backend(self) -> DatabaseBackend:
        from django.tasks import task_backends

        return task_backends[self.backend_alias]

    def _record_if_due(self, force=False):
        """Refresh this worker's record and flush its per-minute tallies (health figures)."""
        now_mono = time.monotonic()
        if not force and now_mono - self._last_record < RECORD_INTERVAL:
            return
        self._last_record = now_mono
        tallies = self.settler.take_tallies()
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
            self.settler.keep_tallies(tallies)  # for the next try
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

    def _heartbeat_if_due(self):
        now_mono = time.monotonic()
        if not self.held or now_mono - self._last_heartbeat < self.lease_seconds / 3:
            return
        jobs = self.held.live_jobs()
        fault_point("heartbeat")
        kept = store.extend_leases(
            jobs, lease_seconds=self.lease_seconds, now=self.clock(), using=self.using
        )
        # Only once it is stored: a heartbeat the database refused (its connection cut) is
        # tried again on the next step, after the reconnect, not a third of a lease later,
        # when a second cut could let the leases run out and each job lose an attempt.
        self._last_heartbeat = now_mono
        for job in jobs:
            # A job settled (or a workflow suspended) while the extension waited for the
            # database was not lost: it is simply no longer running (LeaseTable.lose).
            if job.pk not in kept and self.held.lose(job):
                self.settler.lease_lost(job, "heartbeat")

    def _enforce_timeouts(self):
        now_mono = time.monotonic()
        for held in self.held.running():
            timeout = getattr(self.tasks.get(held.job.task_path), "timeout", None)
            if timeout and now_mono - held.started > timeout:
                # Python cannot interrupt the thread; we stop vouching for the job instead.
                # (Forgotten only once the failure is stored: a database error retries it.
                # A job whose lease is already lost has nothing to store.)
                if not held.lost:
                    self.settler.fail(
                        held.job,
                        JobTimeout(f"ran longer than {timeout}s"),
                        "",
                        duration=now_mono - held.started,
                    )
                    with self.settler.counts:
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
        return LeaseSweep(using=self.using, finished=self.executor.send_finished)

    def run_here(self, *, limit: int) -> list[int]:
        """Claim and run due jobs one at a time on this thread and its connection, each settled
        before the next is claimed, until a claim finds none or `limit` ran; their ids, in the
        order they ran. No handler, settler or listener thread: a test's open transaction
        holds jobs no other connection can see (nor, on SQLite, write past). So no timeout is
        enforced and no lease extended, and no worker record or tallies are written."""
        me = threading.current_thread()
        ran: list[int] = []
        while len(ran) < limit:
            self.executor.announce_start = wants(task_started, log_task_started)
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
            outcome = self.executor.execute(job)
            self.held.returned(held)
            self.finished.put(outcome)
            self.settler.settle()
            ran.append(job.pk)
        return ran
