"""Running one job's task, as Django's own backends run one: the task resolved and its
payload checked, task_started sent before it runs (to whoever listens), the task called, its
return value checked, and what came of it (jobqueue.outcomes.Finished); task_finished once the
job is done or dead. On a worker's handler threads (jobqueue.worker), whose settler stores the
outcome (jobqueue.settler)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import cached_property

from django.db import DatabaseError, close_old_connections
from django.tasks import TaskContext
from django.tasks.signals import log_task_finished, task_finished, task_started

from jobqueue import store, workflows
from jobqueue.backend import DatabaseBackend, wants
from jobqueue.errors import InvalidPayload
from jobqueue.held import LeaseTable
from jobqueue.logfmt import log_line
from jobqueue.models import Job
from jobqueue.outcomes import Finished, formatted_traceback, log_event, printable
from jobqueue.taskcache import TaskCache

logger = logging.getLogger("jobqueue.worker")  # the worker's lines: one logger to configure


class Executor:
    """Runs jobs' tasks for a worker (execute) and sends task_finished for them
    (send_finished). `backend`: called once, for the TASKS backend the signals name."""

    def __init__(
        self,
        *,
        tasks: TaskCache,
        held: LeaseTable,
        clock: Callable,
        using: str,
        lease_seconds: float,
        max_payload_bytes: int,
        backend: Callable[[], DatabaseBackend],
    ):
        self.tasks = tasks
        self.held = held
        self.clock = clock
        self.using = using
        self.lease_seconds = lease_seconds
        # Read once, not per job (execute checks every payload and return value against it).
        self.max_payload_bytes = max_payload_bytes
        self._backend = backend
        # Send task_started: someone listens (asked by the worker's main thread once per claim,
        # not by handlers once per job).
        self.announce_start = False

    @cached_property
    def backend(self) -> DatabaseBackend:
        return self._backend()

    def execute(self, job: Job) -> Finished:
        """Run `job`'s task on this thread; what came of it, whatever it was (never raises)."""
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
            if task.takes_context or self.announce_start:
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

    def send_finished(self, job: Job, exc: BaseException | None = None):
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
