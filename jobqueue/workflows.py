"""Durable multi-step jobs: a task's body written as plain linear code whose finished steps never
run again.

    from datetime import timedelta
    from django.tasks import task
    from jobqueue.workflows import sleep, step, step_options, wait_for

    @step_options(atomic=True)          # its writes and its record commit together
    def provision_account(user_id): ...

    @task
    def onboard(user_id):
        charge = step("charge", charge_card, user_id, 4900)   # what it returned, stored
        step("provision", provision_account, user_id)
        step("welcome", send_welcome, user_id)
        if wait_for("setup_done", timeout=timedelta(days=7)) is None:
            step("nudge", send_nudge, user_id)

Any task run by a Redrive worker is a workflow once it calls `step`, `sleep`, `wait_for` or
`batch`; its id is the id of the job `enqueue` returned. What a step returned is stored (JSON)
when it finishes; a retry, a crash, a redeploy or an operator's replay runs the body again from
the top, and every finished step returns its stored result without running. So the body must
call the same steps in the same order for the same arguments: anything that varies (now, a
random number, a query) belongs in a step.

- A step is at most once where it is `atomic` (its own database writes and its record commit in
  one transaction, under the job's lease), and at least once otherwise: a crash after its effect
  and before its record runs it again, with the same `step_key()` for the provider to
  deduplicate by.
- A step's failure is retried after the step's own backoff, up to its `max_attempts`, without
  holding a worker; a PermanentError (or the last attempt) dead-letters the workflow at that
  step. Replaying the letter resumes there, with the earlier steps' stored results.
- `sleep` and `wait_for` end the attempt and put the job back to wait: no worker or thread is
  held. `signal(workflow_id, name, payload)` wakes a `wait_for(name)` at once.
- `batch` runs a task over items in chunks, a checkpoint after each; an item that fails becomes
  its own dead letter (a dead job of that task with the item), replayable alone.
"""

from __future__ import annotations

import hashlib
import logging
import traceback as tb
from collections.abc import Callable, Iterable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.tasks import Task

from jobqueue import store
from jobqueue.backoff import retry_delay
from jobqueue.errors import (
    LeaseExpired,
    PermanentError,
    class_path,
    classify,
    exception_text,
)
from jobqueue.faults import FaultPoints
from jobqueue.logfmt import log_line
from jobqueue.models import Job, Workflow, WorkflowState, WorkflowStep

logger = logging.getLogger("jobqueue.workflows")

MAX_NAME = 200
MAX_STEP_ERRORS = 20  # a step's row keeps its latest failures, not every one
MAX_LISTED_LETTERS = 1_000  # a batch's result names at most this many of its items' letters

# Crash drills for workflows: REDRIVE_STEP_FAULT=<point>:<step name> SIGKILLs the worker there.
# before: the step is about to run; after_effect: it returned, nothing recorded yet (inside the
# transaction of an atomic step); after_record: its record committed; in_chunk: a batch chunk's
# items ran, its checkpoint not yet committed.
fault_point = FaultPoints(
    "REDRIVE_STEP_FAULT",
    {"before", "after_effect", "after_record", "in_chunk"},
    "workflow",
    qualified=True,
)


class WorkflowError(PermanentError):
    """A workflow used in a way that cannot be made durable: outside a worker, a step name
    used twice in one run, a result that is not JSON, a batch whose items changed."""


class StepFailed(PermanentError):
    """A step failed permanently or ran out of attempts: the workflow is dead at this step."""

    def __init__(self, name: str, attempts: int, cause: BaseException):
        self.step, self.attempts = name, attempts
        super().__init__(
            f"step {name!r} failed after {attempts} attempt{'s' * (attempts != 1)}: "
            f"{class_path(type(cause))}: {exception_text(cause)}"
        )


class Suspend(BaseException):
    """The attempt ends here and the job already waits until `until` (a sleep, a wait for a
    signal, a step's retry): the worker only lets go of it. A BaseException, so that an
    `except Exception` in a workflow's body does not swallow it."""

    def __init__(self, until: datetime, reason: str):
        super().__init__(reason)
        self.until, self.reason = until, reason


@dataclass(frozen=True)
class StepOptions:
    atomic: bool = False
    max_attempts: int = 3
    backoff_base: float = 2.0
    backoff_cap: float = 300.0


DEFAULT_OPTIONS = StepOptions()


def step_options(
    *,
    atomic: bool = False,
    max_attempts: int = 3,
    backoff_base: float = 2.0,
    backoff_cap: float = 300.0,
):
    """Declare how a function behaves as a step: `atomic` (its database writes and its record
    commit in one transaction: exactly once), attempts and backoff (seconds) before the
    workflow dead-letters at it."""
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
        raise ValueError("max_attempts must be a positive integer")
    if not (backoff_base > 0 and backoff_cap > 0):
        raise ValueError("backoff_base and backoff_cap must be positive")
    options = StepOptions(bool(atomic), max_attempts, float(backoff_base), float(backoff_cap))

    def mark(fn):
        target = fn.func if isinstance(fn, Task) else fn
        target.step_options = options
        return fn

    return mark


@dataclass(frozen=True)
class BatchResult:
    total: int
    done: int
    failed: int
    dead_letters: list[int] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        return "done" if not self.failed else "done_with_failures"


@dataclass(slots=True)
class Attempt:
    """The job a handler thread runs now, with the worker's clock and database."""

    job: Job
    clock: Callable[[], datetime]
    using: str
    lease_seconds: float
    workflow: Workflow | None = None
    # Its steps' records and the step names this run used, made when it begins as a workflow
    # (_begun): most jobs are not workflows, and an attempt is made for every job run.
    steps: dict[str, WorkflowStep] | None = None
    seen: set[str] | None = None
    sleeps: int = 0
    current: str | None = None  # the step running now (step_key)
    in_item: bool = False  # a batch's item task runs now: not a place for steps


_attempt: ContextVar[Attempt | None] = ContextVar("redrive_attempt", default=None)


def enter(job: Job, clock: Callable[[], datetime], using: str, lease_seconds: float) -> Token:
    """The worker, before it runs a job's task."""
    return _attempt.set(Attempt(job, clock, using, lease_seconds))


def leave(token: Token, *, returned: bool) -> None:
    """The worker, after the task: a workflow whose body returned is done."""
    attempt = _attempt.get()
    _attempt.reset(token)
    if returned and attempt is not None and attempt.workflow is not None:
        store.workflows.set_state(
            attempt.workflow,
            WorkflowState.DONE,
            now=attempt.clock(),
            using=attempt.using,
            step="",
            wake_at=None,
            waiting_for="",
        )


def current_workflow_id() -> int:
    """The id of the workflow running in this thread (what `signal` takes)."""
    return _begun("current_workflow_id").workflow.pk


def step_key() -> str:
    """An idempotency key for the step running now, the same on every attempt of it: give it
    to the provider a step calls, so a step run twice (a crash after its effect) is one effect."""
    attempt = _begun("step_key")
    if attempt.current is None:
        raise WorkflowError("step_key() is called from inside a step")
    return f"redrive:wf:{attempt.workflow.pk}:{attempt.current}"


def step(name: str, fn: Callable, /, *args, **kwargs):
    """Run `fn(*args, **kwargs)` as the step `name` once; return what it returned (as JSON
    stores it), from the record on every later run."""
    attempt = _begun("step")
    name = _claim_name(attempt, name)
    known = attempt.steps.get(name)
    if known is not None and known.state == WorkflowStep.State.DONE:
        return known.result
    target = fn.func if isinstance(fn, Task) else fn
    if not callable(target):
        raise WorkflowError(f"step {name!r}: {fn!r} is not callable")
    options = getattr(target, "step_options", DEFAULT_OPTIONS)
    using = attempt.using
    fault_point("before", name)
    attempt.current = name
    started = attempt.clock()
    try:
        if options.atomic:
            with transaction.atomic(using=using):
                value = _storable(name, target(*args, **kwargs))
                fault_point("after_effect", name)
                # The lease is checked (and the job's row locked) after the work, not before:
                # a lock held through the step would stall the heartbeat that extends it.
                # A lease lost meanwhile rolls the step's writes back with it.
                _hold(attempt)
                record = _record_done(attempt, name, known, value, started)
        else:
            value = _storable(name, target(*args, **kwargs))
            fault_point("after_effect", name)
            with transaction.atomic(using=using):
                _hold(attempt)
                record = _record_done(attempt, name, known, value, started)
    except (Suspend, LeaseExpired):
        raise
    except Exception as exc:  # noqa: BLE001 - every failure of a step is recorded
        _step_failed(attempt, name, known, options, exc, started)
    finally:
        attempt.current = None
    fault_point("after_record", name)
    attempt.steps[name] = record
    return record.result


def sleep(duration: timedelta | float, *, name: str | None = None) -> None:
    """Wait `duration` (seconds or a timedelta) without holding a worker: the attempt ends and
    the job waits until then; the run after it continues past this call."""
    attempt = _begun("sleep")
    seconds = _seconds(duration, "sleep")
    attempt.sleeps += 1
    name = _claim_name(attempt, name or f"sleep-{attempt.sleeps}")
    known = attempt.steps.get(name)
    if known is not None and known.state == WorkflowStep.State.DONE:
        return
    now = attempt.clock()
    wake_at = known.wake_at if known is not None else now + timedelta(seconds=seconds)
    known = _settle_wait(
        attempt,
        name,
        WorkflowStep.Kind.SLEEP,
        known,
        now=now,
        wake_at=wake_at,
        done=wake_at <= now,
        waiting=WorkflowState.SLEEPING,
    )
    if known.state != WorkflowStep.State.DONE:
        raise Suspend(known.wake_at, f"sleep {name!r}")


def wait_for(event: str, *, timeout: timedelta | float, name: str | None = None):
    """Wait, without holding a worker, for `signal(workflow_id, event, payload)`; return its
    payload, or None once `timeout` passed without it."""
    attempt = _begun("wait_for")
    event = _valid_name(event, "event")
    seconds = _seconds(timeout, "wait_for timeout")
    name = _claim_name(attempt, name or f"wait:{event}")
    known = attempt.steps.get(name)
    if known is not None and known.state == WorkflowStep.State.DONE:
        return (known.result or {}).get("signal")
    now = attempt.clock()
    wake_at = known.wake_at if known is not None else now + timedelta(seconds=seconds)
    with transaction.atomic(using=attempt.using):
        # The workflow row locked first: a signal sent meanwhile is either seen here or sees
        # the workflow waiting, and wakes its job.
        sent = store.workflows.take_signal(attempt.workflow, event, attempt.using)
        if sent is not None:
            result = {"signal": sent.payload, "sent_at": sent.sent_at.isoformat()}
        else:
            result = {"timed_out": True} if wake_at <= now else None
        known = _settle_wait(
            attempt,
            name,
            WorkflowStep.Kind.WAIT,
            known,
            now=now,
            wake_at=wake_at,
            done=result is not None,
            waiting=WorkflowState.WAITING,
            waiting_for=event,
            result=result,
        )
    if known.state != WorkflowStep.State.DONE:
        raise Suspend(known.wake_at, f"wait for {event!r}")
    return known.result.get("signal")


def signal(workflow_id: int, event: str, payload=None, *, using: str = "default") -> bool:
    """Send `event` to a workflow: a `wait_for(event)` it is in (or reaches later) returns
    `payload` (JSON; {} when omitted). One event per name: False if it was already sent.
    Raises LookupError for a workflow that does not exist."""
    event = _valid_name(event, "event")
    payload = {} if payload is None else payload
    try:
        payload = store.normalized(payload, "the payload")
        store.check_value(payload, "the payload")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a signal's payload must be JSON: {exc}") from None
    try:
        workflow_id = int(workflow_id)
    except (TypeError, ValueError):
        raise LookupError(f"no workflow {workflow_id!r}") from None
    try:
        with transaction.atomic(using=using):
            return store.workflows.signal(workflow_id, event, payload, now=None, using=using)
    except Workflow.DoesNotExist:
        raise LookupError(f"no workflow {workflow_id}") from None


def batch(
    name: str,
    items: Iterable,
    handler: Task,
    *,
    chunk: int = 100,
    on_complete: Task | None = None,
) -> BatchResult:
    """Run the task `handler` on each item (its one argument) in chunks of `chunk`, a
    checkpoint committed after each with the chunk's writes: a crash repeats at most the chunk
    it was in, whose writes rolled back. An item that raises is recorded as a dead letter of its
    own (a dead job of `handler` with that item; replay runs it alone) and skipped. When the last
    chunk commits, `on_complete` (a task) is enqueued with the batch's totals and `outcome`
    ("done" or "done_with_failures"). The items must be the same on every run (take them from
    an earlier step's result): a run that finds them changed is refused."""
    attempt = _begun("batch")
    name = _claim_name(attempt, name)
    if not isinstance(handler, Task):
        raise WorkflowError(f"batch {name!r}: the handler must be a task (@task), not {handler!r}")
    if handler.takes_context:
        raise WorkflowError(f"batch {name!r}: the item task takes one argument, not a context")
    if on_complete is not None and not isinstance(on_complete, Task):
        raise WorkflowError(f"batch {name!r}: on_complete must be a task")
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise WorkflowError(f"batch {name!r}: chunk must be a positive integer")
    items = list(items)
    try:
        # Checked as a payload is (each item may become a dead job's argument).
        digest = hashlib.sha256(store.storable_json(items, "batch items").encode()).hexdigest()
    except (TypeError, ValueError) as exc:
        raise WorkflowError(f"batch {name!r}: items must be JSON: {exc}") from None
    known = attempt.steps.get(name)
    progress = (known.result if known is not None else None) or {
        "total": len(items),
        "next": 0,
        "done": 0,
        "failed": 0,
        "digest": digest,
        "dead_letters": [],
    }
    if progress["digest"] != digest:
        raise WorkflowError(f"batch {name!r}: its items differ from the run that started it")
    using = attempt.using
    while known is None or known.state != WorkflowStep.State.DONE:
        start = progress["next"]
        part = items[start : start + chunk]
        with transaction.atomic(using=using):
            now = attempt.clock()
            for item in part:
                if _run_item(attempt, name, handler, item, progress, now):
                    progress["done"] += 1
            progress["next"] = start + len(part)
            fault_point("in_chunk", name)
            _hold(attempt)  # as in step()
            finished = progress["next"] >= len(items)
            state = WorkflowStep.State.DONE if finished else WorkflowStep.State.PENDING
            known = _save(
                attempt,
                name,
                WorkflowStep.Kind.BATCH,
                known,
                now=now,
                state=state,
                result=dict(progress),
            )
            if finished and on_complete is not None:
                summary = _batch_result(progress)
                on_complete.enqueue(
                    workflow_id=attempt.workflow.pk,
                    batch=name,
                    total=summary.total,
                    done=summary.done,
                    failed=summary.failed,
                    outcome=summary.outcome,
                )
        attempt.steps[name] = known
    return _batch_result(known.result)


def _run_item(attempt: Attempt, name: str, handler: Task, item, progress: dict, now) -> bool:
    """One item in a savepoint: True if it ran; else its writes roll back and it is buried."""
    try:
        with transaction.atomic(using=attempt.using):
            attempt.in_item = True
            try:
                handler.call(item)
            finally:
                attempt.in_item = False
        return True
    except (Suspend, LeaseExpired):
        raise
    except Exception as exc:  # noqa: BLE001 - a bad item is recorded and skipped
        error = store.error_entry(
            attempt.job,
            class_path=class_path(type(exc)),
            message=exception_text(exc),
            traceback="".join(tb.format_exception(exc)),
            now=now,
        )
        error["attempt"] = 1
        letter = store.workflows.bury_item(
            task_path=handler.module_path,
            queue_name=handler.queue_name,
            backend=handler.backend,
            item=item,
            error=error,
            workflow=attempt.workflow,
            batch=name,
            now=now,
            using=attempt.using,
        )
        progress["failed"] += 1
        if len(progress["dead_letters"]) < MAX_LISTED_LETTERS:
            progress["dead_letters"].append(letter.pk)
        log_line(
            logger, logging.WARNING, "batch_item_dead", workflow_id=attempt.workflow.pk,
            batch=name, dead_letter_id=letter.pk, error=class_path(type(exc)),
        )  # fmt: skip
        return False


def _batch_result(progress: dict) -> BatchResult:
    return BatchResult(
        total=progress["total"],
        done=progress["done"],
        failed=progress["failed"],
        dead_letters=list(progress["dead_letters"]),
    )


# --- shared --------------------------------------------------------------------------------


def _begun(what: str) -> Attempt:
    attempt = _attempt.get()
    if attempt is None:
        raise WorkflowError(
            f"{what}() runs inside a task run by a Redrive worker: enqueue the task instead "
            "of calling it"
        )
    if attempt.in_item:
        raise WorkflowError(f"{what}() inside a batch's item task: an item is one unit of work")
    if attempt.workflow is None:
        attempt.workflow, attempt.steps = store.workflows.begin(
            attempt.job, now=attempt.clock(), using=attempt.using
        )
        attempt.seen = set()
    return attempt


def _hold(attempt: Attempt) -> None:
    """Check (and renew) the job's lease in the transaction that records progress: a long
    run of steps or chunks keeps its lease even where the heartbeat cannot get in (SQLite's
    one write lock, taken by each chunk in turn)."""
    store.workflows.hold(
        attempt.job, now=attempt.clock(), using=attempt.using, lease_seconds=attempt.lease_seconds
    )


def _valid_name(name, what: str) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise WorkflowError(f"a {what} name is a non-empty string of at most {MAX_NAME} characters")
    if store.storable_text(name, MAX_NAME) != name:
        raise WorkflowError(f"{what} name {name!r} holds NUL or an unpaired surrogate")
    return name


def _claim_name(attempt: Attempt, name) -> str:
    name = _valid_name(name, "step")
    if name in attempt.seen:
        raise WorkflowError(f"step name {name!r} is used twice in one run of the workflow")
    attempt.seen.add(name)
    return name


def _seconds(duration, what: str) -> float:
    if isinstance(duration, timedelta):
        seconds = duration.total_seconds()
    elif isinstance(duration, int | float) and not isinstance(duration, bool):
        seconds = float(duration)
    else:
        raise WorkflowError(f"{what} takes a timedelta or seconds, not {duration!r}")
    if not seconds >= 0 or seconds == float("inf"):
        raise WorkflowError(f"{what} must be a finite duration of zero or more")
    return seconds


def _storable(name: str, value):
    """A step's result under the rules of a task's return value (JSON, MAX_PAYLOAD_BYTES)."""
    what = f"the result of step {name!r}"
    try:
        value = store.normalized(value, what)
        store.check_value(value, what)
    except (TypeError, ValueError) as exc:
        raise WorkflowError(f"step {name!r} returned what cannot be stored: {exc}") from None
    return value


def _save(attempt, name, kind, known, *, now, state, **fields) -> WorkflowStep:
    return store.workflows.save_step(
        attempt.workflow,
        name,
        kind,
        state=state,
        now=now,
        using=attempt.using,
        known=known,
        **fields,
    )


def _record_done(attempt, name, known, value, started) -> WorkflowStep:
    first = {"started_at": started} if known is None else {}
    return _save(
        attempt,
        name,
        WorkflowStep.Kind.CALL,
        known,
        now=attempt.clock(),
        state=WorkflowStep.State.DONE,
        result=value,
        attempts=(known.attempts if known is not None else 0) + 1,
        **first,
    )


def _settle_wait(
    attempt, name, kind, known, *, now, wake_at, done, waiting, waiting_for="", result=None
) -> WorkflowStep:
    """A sleep's or a wait's record, in one transaction (the caller's, if it has one): done
    (under a checked lease), or pending with the job sent back to wait until `wake_at` (the
    suspension's own guarded update is the lease check then)."""
    with transaction.atomic(using=attempt.using):
        if done:
            _hold(attempt)
            state, fields = WorkflowStep.State.DONE, {"result": result, "wake_at": wake_at}
        else:
            state, fields = WorkflowStep.State.PENDING, {"wake_at": wake_at}
        if known is None or done:
            known = _save(attempt, name, kind, known, now=now, state=state, **fields)
        if not done:
            _wait_until(attempt, wake_at, waiting, name, now=now, waiting_for=waiting_for)
    attempt.steps[name] = known
    return known


def _wait_until(attempt, until, state, name, *, now, waiting_for="") -> None:
    """Send the job back to wait in the caller's transaction, where the workflow row's state
    is written too (so a signal sent meanwhile either is seen or sees it waiting)."""
    store.workflows.set_state(
        attempt.workflow,
        state,
        now=now,
        using=attempt.using,
        step=name,
        wake_at=until,
        waiting_for=waiting_for,
    )
    if not store.suspend(attempt.job, until=until, now=now, using=attempt.using):
        raise LeaseExpired(f"job {attempt.job.pk} is no longer this worker's")


def _step_failed(attempt: Attempt, name, known, options: StepOptions, exc: Exception, started):
    """Record the failed attempt; raise Suspend (retry after the step's backoff) or StepFailed."""
    now = attempt.clock()
    attempts = (known.attempts if known is not None else 0) + 1
    entry = store.error_entry(
        attempt.job,
        class_path=class_path(type(exc)),
        message=exception_text(exc),
        traceback="".join(tb.format_exception(exc)),
        now=now,
    ) | {"attempt": attempts}
    verdict = classify(exc)
    dead = not verdict.retry or attempts >= options.max_attempts
    delay = verdict.delay
    if delay is None:
        delay = retry_delay(attempts, base=options.backoff_base, cap=options.backoff_cap)
    until = now + timedelta(seconds=delay)
    errors = [*(known.errors if known is not None else []), entry][-MAX_STEP_ERRORS:]
    state = WorkflowStep.State.DEAD if dead else WorkflowStep.State.FAILED
    with transaction.atomic(using=attempt.using):
        if dead:  # a retry's suspension checks the lease itself
            _hold(attempt)
        record = _save(
            attempt,
            name,
            WorkflowStep.Kind.CALL,
            known,
            now=now,
            state=state,
            attempts=attempts,
            errors=errors,
            **({"started_at": started} if known is None else {}),
        )
        if dead:
            store.workflows.set_state(
                attempt.workflow, WorkflowState.DEAD, now=now, using=attempt.using, step=name
            )
        else:
            _wait_until(attempt, until, WorkflowState.RUNNING, name, now=now)
    attempt.steps[name] = record
    fields = {
        "workflow_id": attempt.workflow.pk, "job_id": attempt.job.pk, "step": name,
        "attempt": attempts, "error": class_path(type(exc)),
    }  # fmt: skip
    if dead:
        log_line(logger, logging.ERROR, "step_dead", **fields)
        raise StepFailed(name, attempts, exc) from exc
    log_line(logger, logging.WARNING, "step_retry", **fields, retry_at=until.isoformat())
    raise Suspend(until, f"retry of step {name!r}") from exc
