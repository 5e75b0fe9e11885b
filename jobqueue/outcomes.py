"""What a job's run came to (Finished), a worker's counters (Stats), the traceback stored with a
failure, and the line each job event writes: shared by the worker's handler threads
(jobqueue.worker) and its settler (jobqueue.settler)."""

from __future__ import annotations

import contextlib
import logging
import select
import traceback as tb
from dataclasses import dataclass
from functools import lru_cache

from jobqueue import workflows
from jobqueue.errors import class_path, exception_text
from jobqueue.logfmt import logfmt
from jobqueue.models import Job

# The worker's lines, whichever of its modules writes them: one logger to configure.
logger = logging.getLogger("jobqueue.worker")


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


def close_transactions_left_open(wrappers) -> list[str]:
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


def drop_connections_the_server_ended(wrappers) -> list[str]:
    """Before a job, on its handler thread (`wrappers` as above): the aliases whose server ended
    the connection while the thread was between jobs (a terminated backend, a restart, a
    failover), closed so that the job's first query opens a new one. Left so, that query would
    fail and cost the job an attempt for the worker's connection, not anything the handler did
    (issue 33: about 12 attempts per terminated connection). An idle session's socket has
    nothing to read unless the server has spoken (its termination notice, or the end of the
    stream): a poll that does not wait, no round trip. PostgreSQL's (psycopg's pgconn) only."""
    dropped = []
    for conn in wrappers:
        pgconn = getattr(conn.connection, "pgconn", None)
        if pgconn is None or conn.in_atomic_block:
            continue
        try:
            ended = bool(select.select([pgconn.socket], [], [], 0)[0])
        except Exception:  # noqa: BLE001 - no socket to poll: as ended, reopened on first use
            ended = True
        if ended:
            dropped.append(conn.alias)
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - the next query opens a new connection
                conn.connection = None
    return dropped


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
