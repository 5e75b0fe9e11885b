"""The settler: a worker's thread that stores what its handlers finished. Successes are
acknowledged in one statement per batch, failures recorded one by one (a retry at its backoff,
or a dead letter), each only while the worker still holds the job's lease (jobqueue.store
guards every write with it), and each outcome counted in the transaction that stores it. It
also keeps the worker's per-minute run times and queue waits, which the main thread flushes with
the worker's record.

Its own Django connection: while it waits on an acknowledgement the main thread's next claim is
already on its way.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from datetime import timedelta

from django.db import DatabaseError, DataError, IntegrityError, connections
from django.tasks.signals import log_task_finished, task_finished

from jobqueue import store
from jobqueue.backend import wants
from jobqueue.backoff import retry_delay
from jobqueue.conf import setting
from jobqueue.errors import class_path, classify, exception_text
from jobqueue.faults import worker_fault_point as fault_point
from jobqueue.held import Held, LeaseTable
from jobqueue.logfmt import log_line, log_lines
from jobqueue.loop import first_line, next_backoff
from jobqueue.models import Job, JobState
from jobqueue.outcomes import Finished, Stats, formatted_traceback, log_event, succeeded_line
from jobqueue.taskcache import TaskCache
from jobqueue.timing import RUN, WAIT, queue_wait

logger = logging.getLogger("jobqueue.worker")  # the worker's lines: one logger to configure

# Seconds a finished job may wait for its acknowledgement while handlers stay busy.
SETTLE_INTERVAL = 0.02
MAX_RETRY_DELAY = 365 * 86_400.0  # seconds: the longest a failed job waits for its retry


class Settler:
    """Stores the outcomes handlers put on `finished`: on its own thread (start, stop), or
    called directly (settle: Worker.run_here, tests). The worker owns one and shares with it
    its lease table, counters and clock; `wake` is the main thread's (set when a batch is
    settled: it may refill, or end a burst)."""

    def __init__(
        self,
        *,
        held: LeaseTable,
        finished: queue.SimpleQueue,
        stats: Stats,
        tasks: TaskCache,
        clock: Callable,
        using: str,
        worker_id: str,
        wake: threading.Event,
        send_finished: Callable,
        queue_threads: set[int],
        died: Callable[[], None],
    ):
        self.held = held
        self.finished = finished
        self.stats = stats
        self.tasks = tasks
        self.clock = clock
        self.using = using
        self.worker_id = worker_id
        self._main_wake = wake
        self._send_finished = send_finished  # task_finished, for a job done or dead
        self._queue_threads = queue_threads  # the worker's: this thread's connection is one
        self._died = died  # the settler thread ended by a bug: the worker exits for a restart
        # Set to settle at once rather than at the next SETTLE_INTERVAL (the inbox emptied).
        self.wake = threading.Event()
        # Counters and per-minute tallies are written by the main thread (timeouts, lost
        # leases) and the settler (outcomes); the main thread also flushes the tallies.
        self.counts = threading.Lock()
        self._tallies: dict[tuple, store.Tally] = {}
        self._thread: threading.Thread | None = None
        self._settling = True  # cleared once the main thread has nothing left to hand over

    def start(self) -> None:
        self._thread = threading.Thread(target=self._settle_loop, name="settler", daemon=True)
        self._thread.start()

    def _settle_loop(self):  # its name is what SIGUSR1's stack dump shows for this thread
        """Store outcomes as handlers finish them, every SETTLE_INTERVAL or sooner when the
        inbox empties; back off (bounded) while the database is away, losing none."""
        self._queue_threads.add(threading.get_ident())
        backoff = 0.0
        try:
            while True:
                self.wake.wait(SETTLE_INTERVAL)
                self.wake.clear()
                try:
                    if self.settle():
                        self._main_wake.set()  # the main thread may refill, or end a burst
                    backoff = 0.0
                except DatabaseError as exc:
                    with self.counts:
                        self.stats.db_errors += 1
                    backoff = next_backoff(backoff)
                    log_line(
                        logger, logging.WARNING, "database_error", worker=self.worker_id,
                        thread="settler", error=first_line(exc), retry_in=f"{backoff:.1f}s",
                    )  # fmt: skip
                    connections[self.using].close()
                    self.wake.wait(backoff)
                    continue
                if not self._settling and self.finished.empty():
                    return
        except BaseException:  # noqa: BLE001 - whatever ends it, the worker must not go on without it
            log_line(
                logger, logging.ERROR, "settler_died", exc_info=True, worker=self.worker_id,
                action="exit_for_restart",
            )  # fmt: skip
            self._died()
        finally:
            connections.close_all()  # this thread's own

    def stop(self, timeout: float) -> None:
        """Store what is left (the main thread hands over nothing more), then end the thread,
        waiting up to `timeout` seconds for it."""
        if self._thread is None or not self._thread.is_alive():
            return
        self._settling = False
        self.wake.set()
        self._thread.join(timeout=timeout)

    def settle(self) -> bool:
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
                self.fail(
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
                self.fail(
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
                with self.counts:
                    self.stats.succeeded += 1
                    tally = self._tally(job, minute)  # counted by the acknowledgement
                    tally.observe(RUN, fin.duration)
                    tally.observe(WAIT, queue_wait(job))
                job.state, job.return_value, job.finished_at = JobState.DONE, fin.value, now
                if logged:
                    lines.append(succeeded_line(job, fin.duration))
                if announce:
                    self._send_finished(job)
            else:
                self.lease_lost(job, "acknowledge")
        # A line per job, written together (jobqueue.logfmt.log_lines).
        log_lines(logger, logging.INFO, lines)

    def fail(
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
            with self.counts:
                tally = self._tally(job, now.replace(second=0, microsecond=0))  # counted by fail
                tally.observe(RUN, duration)
                tally.observe(WAIT, queue_wait(job))
                if retry_at is not None:
                    self.stats.retried += 1
                else:
                    self.stats.dead += 1
        if not ok:
            self.lease_lost(job, "fail")
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

    def take_tallies(self) -> dict[tuple, store.Tally]:
        """The per-minute tallies so far, handed over (to be written with the worker's record)."""
        with self.counts:
            tallies, self._tallies = self._tallies, {}
        return tallies

    def keep_tallies(self, tallies: dict[tuple, store.Tally]) -> None:
        """Tallies taken whose write failed: kept for the next try."""
        with self.counts:
            for key, tally in tallies.items():
                self._tallies.setdefault(key, store.Tally()).add(tally)

    def _tally(self, job: Job, minute) -> store.Tally:
        key = (minute, job.queue_name, job.task_path)
        if key not in self._tallies:
            self._tallies[key] = store.Tally()
        return self._tallies[key]

    def _backoff_policy(self, job: Job) -> tuple[float, float]:
        task = self.tasks.get(job.task_path)
        base = getattr(task, "backoff_base", None) or setting("BACKOFF_BASE")
        cap = getattr(task, "backoff_cap", None) or setting("BACKOFF_CAP")
        return base, cap

    def lease_lost(self, job: Job, during: str):
        with self.counts:
            self.stats.leases_lost += 1
        log_event("lease_lost", job, logging.WARNING, during=during, outcome="lost")
