"""A django.tasks backend whose `enqueue` writes a job row in the caller's transaction.

    TASKS = {"default": {"BACKEND": "jobqueue.backend.DatabaseBackend"}}

    from django.tasks import task

    @task(max_attempts=3, timeout=30)
    def send_receipt(payment_id: int): ...

    with transaction.atomic():
        payment = Payment.objects.create(...)
        send_receipt.using(idempotency_key=f"receipt:{payment.id}").enqueue(payment.id)

`@task` passes its extra keyword arguments to the backend's `task_class`, so the retry policy
(`max_attempts`, `timeout`, `backoff_base`, `backoff_cap`) sits on the task where Django users
look for options, and the idempotency key is one more `using()` option.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core import checks
from django.tasks import Task as DjangoTask
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import log_task_enqueued, task_enqueued
from django.utils.module_loading import import_string

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.errors import InvalidArguments
from jobqueue.models import MAX_ID, Job, JobState, UniqueKey

# Column widths the task's own strings must fit (PostgreSQL refuses longer; SQLite would
# silently keep them, so both databases are held to the same rule here).
_MAX_LENGTHS = {
    name: Job._meta.get_field(field).max_length
    for name, field in (
        ("queue_name", "queue_name"),
        ("idempotency_key", "idempotency_key"),
        ("module_path", "task_path"),
    )
} | {
    "unique_key": UniqueKey._meta.get_field("key").max_length,
    "ordering_key": Job._meta.get_field("ordering_key").max_length,
    "concurrency_key": Job._meta.get_field("concurrency_key").max_length,
}
MAX_CONCURRENCY_LIMIT = 10_000
ON_DEAD = ("block", "skip")


@dataclass(frozen=True, slots=True, kw_only=True)
class Task(DjangoTask):
    max_attempts: int | None = None  # None: REDRIVE["MAX_ATTEMPTS"]
    timeout: float | None = None  # seconds a handler may run before the worker gives up on it
    backoff_base: float | None = None
    backoff_cap: float | None = None
    idempotency_key: str | None = None
    # A unique job: while the job holding this key is in one of `unique_while`, or for
    # `unique_for` seconds after it was enqueued, enqueueing again returns that job.
    unique_key: str | None = None
    unique_while: tuple[str, ...] = store.UNIQUE_STATES
    unique_for: float | None = None
    # Per-key ordering: jobs with the same key run one at a time, in enqueue order; a dead one
    # holds the rest back ("block") until its letter is replayed or discarded, or not ("skip").
    ordering_key: str | None = None
    ordering_on_dead: str = "block"
    # Fair share: at most concurrency_limit jobs of one key run at once across every worker,
    # and a claim takes every key's next job before any key's second.
    concurrency_key: str | None = None
    concurrency_limit: int = 1

    def using(
        self,
        *,
        idempotency_key=None,
        unique_key=None,
        unique_while=None,
        unique_for=None,
        ordering_key=None,
        ordering_on_dead=None,
        concurrency_key=None,
        concurrency_limit=None,
        **changes,
    ):
        task = DjangoTask.using(self, **changes)
        ours = {}
        if idempotency_key is not None:
            ours["idempotency_key"] = _key(idempotency_key)
        if unique_key is not None:
            ours["unique_key"] = _key(unique_key)
        if unique_while is not None:
            if isinstance(unique_while, str):
                unique_while = (unique_while,)
            elif isinstance(unique_while, Iterable) and not isinstance(unique_while, Mapping):
                unique_while = tuple(unique_while)
            ours["unique_while"] = unique_while  # anything else: validate_task says what
        if unique_for is not None:
            ours["unique_for"] = (
                unique_for.total_seconds() if isinstance(unique_for, timedelta) else unique_for
            )
        if ordering_key is not None:
            ours["ordering_key"] = _key(ordering_key)
        if ordering_on_dead is not None:
            ours["ordering_on_dead"] = ordering_on_dead
        if concurrency_key is not None:
            ours["concurrency_key"] = _key(concurrency_key)
        if concurrency_limit is not None:
            ours["concurrency_limit"] = concurrency_limit
        return replace(task, **ours) if ours else task

    @property
    def attempt_budget(self) -> int:
        return self.max_attempts or setting("MAX_ATTEMPTS")


STATUS = {
    JobState.READY: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.DONE: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
    # Django's statuses have no "cancelled": the task did not succeed and never will.
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


class DatabaseBackend(BaseTaskBackend):
    task_class = Task
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        if not params.get("QUEUES"):
            self.queues = set()  # every queue name is valid
        self.database = self.options.get("DATABASE", "default")

    def check(self, **kwargs):
        """What this TASKS entry configures, checked by Django's task framework for each
        alias (django.tasks.checks; jobqueue/checks.py tags it for a worker's start too): its
        OPTIONS["DATABASE"] must be one of DATABASES, or its enqueue, its worker and the
        console's page of its letters fail only when first used."""
        found = list(super().check(**kwargs))
        if isinstance(self.database, str) and self.database in settings.DATABASES:
            return found
        return [
            *found,
            checks.Error(
                f"TASKS[{self.alias!r}] keeps its jobs in database {self.database!r}, which is "
                "not in DATABASES.",
                hint=f"Add {self.database!r} to DATABASES (and migrate it: manage.py migrate "
                f"--database {self.database}), or name one of {sorted(settings.DATABASES)}.",
                id="redrive.E030",
            ),
        ]

    def validate_task(self, task):
        validate_before_django(task)
        super().validate_task(task)
        validate_options(task)

    def new_job(self, task, args, kwargs, *, validated=False) -> store.NewJob:
        """The row a call will be. Arguments that are not JSON, hold NUL or a lone surrogate
        anywhere (keys too), or exceed MAX_PAYLOAD_BYTES raise InvalidArguments, a TypeError
        as from Django's own backends, before anything is written: the same refusal on
        PostgreSQL and SQLite (NUL is refused rather than escaped: a payload is stored as
        given or not at all)."""
        if not validated:
            self.validate_task(task)
        return self._new_job(self._row_fields(task), setting("MAX_PAYLOAD_BYTES"), args, kwargs)

    def _row_fields(self, task) -> dict:
        """What every row of one task has in common, read from the task and settings once."""
        return {
            "task_path": task.module_path,
            "queue_name": task.queue_name,
            "priority": task.priority,
            "run_after": task.run_after,
            "idempotency_key": getattr(task, "idempotency_key", None),
            "unique": _unique_of(task),
            "ordering_key": getattr(task, "ordering_key", None),
            "ordering_on_dead": (
                task.ordering_on_dead if getattr(task, "ordering_key", None) is not None else None
            ),
            "concurrency_key": getattr(task, "concurrency_key", None),
            "concurrency_limit": (
                task.concurrency_limit
                if getattr(task, "concurrency_key", None) is not None
                else None
            ),
            "max_attempts": getattr(task, "attempt_budget", None) or setting("MAX_ATTEMPTS"),
            "backend": self.alias,
        }

    @staticmethod
    def _new_job(fields: dict, limit: int, args, kwargs) -> store.NewJob:
        args, kwargs, encoded = _arguments(limit, args, kwargs)
        return store.NewJob(args=args, kwargs=kwargs, encoded=encoded, **fields)

    def enqueue(self, task, args, kwargs):
        job, created = store.enqueue(self.new_job(task, args, kwargs), using=self.database)
        result = self.result_for(job, task, as_enqueued=created)
        if created and wants(task_enqueued, log_task_enqueued):
            task_enqueued.send(type(self), task_result=result)
        return result

    def enqueue_many(self, task, calls: Iterable[tuple[Iterable, dict]]) -> EnqueuedResults:
        """Bulk enqueue one task with many argument sets, in one transaction: a result per call,
        in call order (each TaskResult is built when first read).

        backend.enqueue_many(send_receipt, [((1,), {}), ((2,), {})])
        """
        self.validate_task(task)
        fields, limit = self._row_fields(task), setting("MAX_PAYLOAD_BYTES")
        # The caller's calls are read in full first: an iterable that queries as it goes (a
        # queryset's iterator()) must not run inside the store's pipelined inserts. The rows
        # are built as the store reads them, so building and inserting overlap; a call whose
        # arguments are refused part-way rolls the whole enqueue back.
        calls = calls if isinstance(calls, list | tuple) else list(calls)
        arguments = (_arguments(limit, *_call(call)) for call in calls)
        results = EnqueuedResults(
            self,
            task,
            store.enqueue_calls(store.NewJob(**fields), arguments, using=self.database),
        )
        if wants(task_enqueued, log_task_enqueued):
            for result, (_, created) in zip(results, results.outcomes, strict=True):
                if created:
                    task_enqueued.send(type(self), task_result=result)
        return results

    def get_result(self, result_id):
        # A result id is what enqueue gave: a job's id, as an int or its decimal string. Not
        # whatever int() makes of a value ("1_0", " 1 ", a full-width digit, 1.5, b"1"), nor
        # one past a bigint.
        pk = result_id
        if isinstance(pk, str) and pk.isascii() and pk.isdigit():
            pk = int(pk)
        if type(pk) is not int or not 0 < pk <= MAX_ID:
            raise TaskResultDoesNotExist(result_id)
        try:
            job = Job.objects.using(self.database).get(pk=pk)
        except Job.DoesNotExist as exc:
            raise TaskResultDoesNotExist(result_id) from exc
        return self.result_for(job)

    def result_for(
        self, job: Job, task: DjangoTask | None = None, *, as_enqueued: bool = False
    ) -> TaskResult:
        """The TaskResult of a row. `as_enqueued`: the row was just made from `task`, which is
        then the result's task unchanged (its run_after included, even one in the past)."""
        if task is None:
            task = load_task(job.task_path)
        # A job enqueued without run_after gets run_after == enqueued_at exactly; any other
        # value (past or future, or a retry's time) was asked for.
        deferred = job.run_after if job.run_after != job.enqueued_at else None
        if not as_enqueued and (task.queue_name, task.priority, task.run_after) != (
            job.queue_name,
            job.priority,
            deferred,
        ):
            # replace() re-validates the task (signature inspection): only when it differs.
            task = replace(
                task, queue_name=job.queue_name, priority=job.priority, run_after=deferred
            )
        result = task_result(
            task=task,
            id=str(job.pk),
            status=STATUS[job.state],
            enqueued_at=job.enqueued_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            last_attempted_at=job.last_attempted_at,
            args=job.args,
            kwargs=job.kwargs,
            backend=self.alias,
            errors=[
                TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"])
                for e in job.errors
            ],
            worker_ids=list(job.worker_ids),
        )
        if job.state == JobState.DONE:
            object.__setattr__(result, "_return_value", job.return_value)
        return result


def _key(value) -> str:
    """A key as given, or the text of an integer or a UUID (ordering_key=customer.id,
    idempotency_key=request_id); anything else is left for validate_task to refuse: str() of it
    would be a key nobody meant ("b'k'", "False", "Order object (1)")."""
    if type(value) is int or isinstance(value, uuid.UUID):
        return str(value)
    return value


def _call(call) -> tuple:
    """One enqueue_many call: (args, kwargs)."""
    if not isinstance(call, list | tuple) or len(call) != 2:
        raise InvalidArguments(f"each call is a pair (args, kwargs), not {call!r:.100}")
    return call


def _arguments(limit: int, args, kwargs) -> tuple[list, dict, tuple[str, str]]:
    """One call's arguments as a TaskResult holds them, and their JSON as a row stores it."""
    # A string or a dict is iterable too: list() would make its characters or its keys the
    # arguments.
    if not isinstance(args, list | tuple):
        raise InvalidArguments(f"a call's args are a list or tuple, not {type(args).__name__}")
    if not isinstance(kwargs, Mapping):
        raise InvalidArguments(f"a call's kwargs are a dict, not {type(kwargs).__name__}")
    try:
        args = store.normalized(args if type(args) is list else list(args), "args")
        kwargs = store.normalized(kwargs if type(kwargs) is dict else dict(kwargs), "kwargs")
        return args, kwargs, store.check_payload(args, kwargs, limit)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArguments(
            f"Task arguments must be JSON-serialisable and storable: {exc}"
        ) from exc


class EnqueuedResults(Sequence):
    """What enqueue_many returns: one TaskResult per call, in call order, each built on first
    read. Most bulk callers count the results or drop them, and building a thousand
    TaskResults cost as much as writing the thousand rows. Compares equal to a list of the
    same results."""

    __slots__ = ("_backend", "_built", "_task", "outcomes")

    def __init__(self, backend, task, outcomes: list[tuple[Job, bool]]):
        self._backend, self._task, self.outcomes = backend, task, outcomes
        self._built: list[TaskResult | None] = [None] * len(outcomes)

    def __len__(self) -> int:
        return len(self.outcomes)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        result = self._built[index]
        if result is None:
            job, created = self.outcomes[index]
            result = self._built[index] = self._backend.result_for(
                job, self._task, as_enqueued=created
            )
        return result

    def __eq__(self, other):
        if isinstance(other, EnqueuedResults | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return repr(list(self))


def validate_before_django(task) -> None:
    """What Django's own validate_task would meet with a TypeError or an AttributeError of
    its own rather than InvalidTask: asked before it, by every backend of Redrive's task
    class (DatabaseBackend, jobqueue.testing's)."""
    if type(task.priority) is not int:  # Django's own check compares it (TypeError)
        raise InvalidTask(
            f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}."
        )
    if task.run_after is not None:
        if not isinstance(task.run_after, datetime):
            raise InvalidTask("run_after must be an aware datetime.")
        try:
            task.run_after.astimezone(UTC)
        except (OverflowError, ValueError):
            raise InvalidTask("run_after is out of the range a database stores.") from None


def validate_options(task) -> None:
    """Redrive's own task options (attempts, timeout, keys, ordering, concurrency), refused
    with InvalidTask where they are set: at import for `@task(...)`, at `.using(...)`."""
    if task.max_attempts is not None and task.max_attempts < 1:
        raise InvalidTask("max_attempts must be at least 1.")
    if task.timeout is not None and task.timeout <= 0:
        raise InvalidTask("timeout must be positive.")
    _validate_unique(task)
    if getattr(task, "ordering_on_dead", "block") not in ON_DEAD:
        raise InvalidTask(f"ordering_on_dead is one of {', '.join(ON_DEAD)}.")
    limit = getattr(task, "concurrency_limit", 1)
    if type(limit) is not int or not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        raise InvalidTask(
            f"concurrency_limit is a whole number from 1 to {MAX_CONCURRENCY_LIMIT:,}."
        )
    for name, limit in _MAX_LENGTHS.items():
        value = getattr(task, name, None)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidTask(f"{name} must be a string, not {type(value).__name__}.")
        if len(value) > limit:
            raise InvalidTask(f"{name} must be at most {limit} characters, not {len(value)}.")
        if not value.strip():
            raise InvalidTask(f"{name} must not be empty (or only spaces).")
        if store.storable_text(value, limit) != value:
            raise InvalidTask(f"{name} must not contain NUL (\\u0000) or a lone surrogate.")


def _validate_unique(task) -> None:
    key = getattr(task, "unique_key", None)
    if key is None:
        return
    if getattr(task, "idempotency_key", None) is not None:
        raise InvalidTask("use an idempotency_key or a unique_key, not both.")
    states = task.unique_while
    if (
        not isinstance(states, tuple)
        or not all(isinstance(state, str) for state in states)
        or not set(states) <= set(store.UNIQUE_STATES)
    ):
        raise InvalidTask(f"unique_while names states among {', '.join(store.UNIQUE_STATES)}.")
    seconds = task.unique_for
    if seconds is not None and (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds <= MAX_UNIQUE_SECONDS
    ):
        raise InvalidTask(f"unique_for is a number of seconds from 0 to {MAX_UNIQUE_SECONDS:,}.")
    if not states and seconds is None:
        raise InvalidTask("a unique job needs unique_while states, a unique_for period, or both.")


MAX_UNIQUE_SECONDS = 10 * 365 * 86_400


def _unique_of(task) -> store.Unique | None:
    key = getattr(task, "unique_key", None)
    if key is None:
        return None
    return store.Unique(key=key, states=task.unique_while, seconds=task.unique_for)


_RESULT_FIELDS = frozenset(f.name for f in fields(TaskResult) if f.init)


def task_result(**values) -> TaskResult:
    """TaskResult(**values) for arguments a row holds, which are already in normalize_json's
    form (the enqueue normalised them; a database read decodes JSON): the constructor's
    __post_init__ would walk both again, and for a bulk enqueue that cost as much as the rest
    of building the result. Every init field must be given (TypeError otherwise, as the
    constructor would raise); tests/jobqueue/test_backend.py compares with the constructor."""
    if values.keys() != _RESULT_FIELDS:
        raise TypeError(f"task_result() needs exactly {sorted(_RESULT_FIELDS)}")
    result = object.__new__(TaskResult)
    for name, value in values.items():
        object.__setattr__(result, name, value)
    object.__setattr__(result, "_return_value", None)
    return result


def load_task(path: str) -> DjangoTask:
    """Import the task a job names; raises ImportError/AttributeError/TypeError if it cannot.

    Every way an import can fail comes out as one of those, so each caller (the worker, the
    enqueue command, schedules, the relay) refuses the path with its reason: a module that
    raises its own error while it is imported, or exits (SystemExit), would otherwise crash
    the worker on every claim of the job, which would never be dead-lettered. A script's
    `__main__` is not imported at all: importing it runs the script."""
    if not isinstance(path, str):
        raise TypeError(f"a task path is a dotted string, not {type(path).__name__}")
    if "__main__" in path.split("."):
        raise ImportError(f"{path!r}: a __main__ module is a script, not a module of tasks")
    try:
        task = import_string(path)
    except (ImportError, AttributeError, TypeError, ValueError):
        raise
    except (Exception, SystemExit) as exc:  # the module's own failure, reported
        raise ImportError(f"importing {path!r} failed: {exc!r}"[:1000]) from exc
    if not isinstance(task, DjangoTask):
        raise TypeError(f"{path} is a {type(task).__name__}, not a task")
    return task


def wants(signal, builtin_logger, level: int = logging.INFO) -> bool:
    """Is a task signal worth sending? Not when its only receiver is Django's own log line and
    that logger would drop the line at `level` (the level that receiver logs this result at:
    ERROR for a failed task): dispatching it per job costs more than a quick job itself, and
    skipping it then changes nothing anyone can observe."""
    if logging.getLogger("django.tasks").isEnabledFor(level):
        return signal.has_listeners()
    for entry in signal.receivers:
        ref = entry[1]
        target = ref() if isinstance(ref, weakref.ReferenceType) else ref
        if target is not None and target is not builtin_logger:
            return True
    return False
