"""Testing your tasks: what was enqueued, and every due job run in the test's own thread.

    from jobqueue import testing

    def test_a_payment_sends_its_receipt(db):
        pay(order)                                    # enqueues send_receipt
        testing.assert_enqueued(send_receipt, args=[order.pk], queue="receipts")
        run = testing.run_jobs()                      # retries and sleeps included
        assert run.succeeded == 1

`run_jobs` claims and runs jobs on the caller's thread and database connection, inside the
test's transaction (a `TestCase` or a pytest-django `db` test, on SQLite or PostgreSQL): a
worker's own threads would not see uncommitted jobs, and on SQLite would wait on the test's
write lock. Time is a `Clock` the run moves forward to the next retry or scheduled job, so a
backoff of minutes takes no time. The pytest plugin (`jobqueue.pytest_plugin`, loaded by
pytest when Redrive is installed) offers the same as the `redrive` fixture.

For test settings that run tasks without the queue, `ImmediateBackend` and `DummyBackend` are
Django's own with Redrive's task class, so tasks declared with Redrive's options
(`@task(max_attempts=3)`, `.using(idempotency_key=...)`) load and behave as Django's backends
make them behave.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.tasks import Task as DjangoTask
from django.tasks import task_backends
from django.tasks.backends.dummy import DummyBackend as DjangoDummyBackend
from django.tasks.backends.immediate import ImmediateBackend as DjangoImmediateBackend
from django.utils import timezone

from jobqueue.backend import Task, validate_before_django, validate_options
from jobqueue.models import DeadLetter, Job, JobState, Workflow, WorkflowStep

__all__ = [
    "Clock",
    "DummyBackend",
    "Enqueued",
    "Harness",
    "ImmediateBackend",
    "Outcome",
    "RedriveTestBackend",
    "Run",
    "assert_enqueued",
    "enqueued",
    "outcome",
    "refute_enqueued",
    "run_jobs",
]

# Jobs one run_jobs call runs at most: a task that enqueues itself forever ends the test
# with a clear failure instead of hanging it.
DEFAULT_LIMIT = 1_000


class RedriveTestBackend:
    """What Redrive's test backends add to Django's: Redrive's task class, so a task declared
    with Redrive's options (`@task(max_attempts=3)`) loads; every queue name valid unless
    `QUEUES` lists them, as under DatabaseBackend (Django's backends take only "default"
    otherwise); the options refused as DatabaseBackend refuses them. `manage.py check` counts a
    TASKS entry of these as Redrive's (no `redrive.E001`): test settings that run tasks without
    the queue are deliberate."""

    task_class: type[DjangoTask] = Task

    def __init__(self, alias, params):
        super().__init__(alias, params)
        if not params.get("QUEUES"):
            self.queues: set[str] = set()  # every queue name is valid

    def validate_task(self, task):
        validate_before_django(task)
        super().validate_task(task)
        validate_options(task)


class ImmediateBackend(RedriveTestBackend, DjangoImmediateBackend):
    """Django's ImmediateBackend (a task runs inside `enqueue`) for tasks declared with
    Redrive's options; the options themselves (attempts, keys) are not applied, as Django's
    backend applies none."""


class DummyBackend(RedriveTestBackend, DjangoDummyBackend):
    """Django's DummyBackend (enqueue keeps the result, nothing runs) for tasks declared with
    Redrive's options: `task_backends[alias].results` lists what was enqueued."""


class Clock:
    """The time a run sees: the wall clock plus however far it was moved (by `advance`, or by
    `run_jobs` jumping to the next due job), so jobs enqueued at the wall's time are due on it;
    with `start`, a fixed time that moves only when moved. Pass it to code under test as its
    clock (it is called for the time)."""

    def __init__(self, start: datetime | None = None):
        self._start = start
        self._offset = timedelta(0)

    @property
    def now(self) -> datetime:
        return (timezone.now() if self._start is None else self._start) + self._offset

    @now.setter
    def now(self, value: datetime) -> None:
        self._offset += value - self.now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta | float) -> datetime:
        self._offset += by if isinstance(by, timedelta) else timedelta(seconds=by)
        return self.now

    def __repr__(self) -> str:
        return f"Clock({self.now.isoformat()})"


@dataclass(frozen=True)
class Enqueued:
    """A job as enqueued: what an assertion compares."""

    id: int
    task: str
    args: list
    kwargs: dict
    queue: str
    priority: int
    run_after: datetime | None
    state: str
    idempotency_key: str | None
    ordering_key: str | None
    concurrency_key: str | None

    @classmethod
    def of(cls, job: Job) -> Enqueued:
        return cls(
            id=job.pk,
            task=job.task_path,
            args=job.args,
            kwargs=job.kwargs,
            queue=job.queue_name,
            priority=job.priority,
            run_after=job.run_after,
            state=job.state,
            idempotency_key=job.idempotency_key,
            ordering_key=job.ordering_key,
            concurrency_key=job.concurrency_key,
        )


@dataclass
class Outcome:
    """One job after a run: its row, its dead letter (if it died) and its workflow's steps."""

    job: Job
    dead_letter: DeadLetter | None
    steps: list[WorkflowStep] = field(default_factory=list)

    @property
    def state(self) -> str:
        return self.job.state

    @property
    def return_value(self):
        return self.job.return_value

    @property
    def errors(self) -> list[dict]:
        return self.job.errors


@dataclass
class Run:
    """What `run_jobs` did: the ids of the jobs it ran, in order (a retried job once per
    attempt), and where the clock ended."""

    ran: list[int]
    now: datetime
    using: str

    def outcomes(self) -> list[Outcome]:
        """Each job it ran, once, as it is now."""
        return [outcome(pk, using=self.using) for pk in dict.fromkeys(self.ran)]

    def _count(self, state: str) -> int:
        # One count of the rows as they are now: outcomes() would read each job, its dead
        # letter and its workflow for a number.
        jobs = Job.objects.using(self.using).filter(pk__in=set(self.ran), state=state)
        return jobs.count()

    @property
    def succeeded(self) -> int:
        return self._count(JobState.DONE)

    @property
    def dead(self) -> int:
        return self._count(JobState.DEAD)


def _database(backend: str) -> str:
    return getattr(task_backends[backend], "database", "default")


def _task_path(task) -> str:
    if isinstance(task, DjangoTask):
        return task.module_path
    if isinstance(task, str):
        return task
    raise TypeError(f"a task or its dotted path, not {type(task).__name__}")


def enqueued(
    task: DjangoTask | str | None = None,
    *,
    queue: str | None = None,
    states: Iterable[str] = (JobState.READY,),
    backend: str = "default",
    **match,
) -> list[Enqueued]:
    """The jobs of `task` (all tasks if None) waiting to run, oldest first; `states` widens
    that (e.g. every state: `states=JobState.values`). Any other keyword (`args`, `kwargs`,
    `idempotency_key`, `ordering_key`, `concurrency_key`, `priority`) must equal the job's."""
    jobs = Job.objects.using(_database(backend)).filter(state__in=list(states)).order_by("pk")
    if task is not None:
        jobs = jobs.filter(task_path=_task_path(task))
    if queue is not None:
        jobs = jobs.filter(queue_name=queue)
    unknown = set(match) - set(Enqueued.__dataclass_fields__)
    if unknown:
        raise TypeError(f"no such field of an enqueued job: {', '.join(sorted(unknown))}")
    return [e for e in map(Enqueued.of, jobs) if all(getattr(e, k) == v for k, v in match.items())]


def assert_enqueued(task, *, count: int | None = None, **match) -> list[Enqueued]:
    """Fail unless `task` was enqueued as `match` says (`count` times, if given); the failure
    lists what was enqueued instead. Returns the matching jobs."""
    found = enqueued(task, **match)
    backend = match.get("backend", "default")
    match = {k: v for k, v in match.items() if k != "backend"}
    if (count is None and not found) or (count is not None and len(found) != count):
        wanted = "" if count is None else f" {count} time(s)"
        raise AssertionError(
            f"expected {_task_path(task)}{wanted} with {match or 'any arguments'}, found "
            f"{len(found)}; waiting jobs: {_listing(backend)}"
        )
    return found


def refute_enqueued(task, **match) -> None:
    """Fail if `task` was enqueued as `match` says."""
    found = enqueued(task, **match)
    if found:
        raise AssertionError(f"expected no {_task_path(task)} with {match}, found {found}")


def _listing(backend: str) -> str:
    shown = [
        f"{e.task}(args={e.args}, kwargs={e.kwargs}, queue={e.queue!r})"
        for e in enqueued(backend=backend)
    ]
    return "; ".join(shown) if shown else "none"


def run_jobs(
    *,
    clock: Clock | None = None,
    queues: Iterable[str] | None = None,
    backend: str = "default",
    advance: bool = True,
    until: datetime | timedelta | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Run:
    """Run every due job of `queues` (all by default) on this thread, in this transaction,
    until none is due; with `advance`, then move `clock` to the next job waiting for its time
    (a retry's backoff, a `run_after`, a workflow's sleep or a wait's timeout) and go on,
    until no job waits, or none before `until` (a time, or how far past the clock's start).

    A job held back for another reason (its queue paused, its ordering line blocked by a dead
    job, a rate limit) is left as it is. The jobs run as a worker runs them (its payload
    checks, retries, dead letters, workflow steps, signals); what needs a thread of its own
    is not done: a timeout is not enforced and no lease is extended (each job is settled
    before the next is claimed). More than `limit` jobs fail the run: a task that enqueues
    itself forever."""
    from jobqueue.worker import Worker  # the worker (and its imports) only for a run

    clock = clock or Clock()
    if isinstance(until, timedelta):
        until = clock.now + until
    worker = Worker(
        queues=list(queues) if queues else None,
        clock=clock,
        backend=backend,
        worker_id="testing",
    )
    ran: list[int] = []
    while True:
        ran += worker.run_here(limit=limit + 1 - len(ran))
        if len(ran) > limit:
            raise AssertionError(
                f"more than {limit} jobs ran (a task that enqueues itself forever?); "
                f"raise run_jobs(limit=…) if this many are expected"
            )
        waiting = _next_waiting(worker, clock.now) if advance else None
        if waiting is None or (until is not None and waiting > until):
            return Run(ran=ran, now=clock.now, using=worker.using)
        clock.now = waiting


def _next_waiting(worker, now: datetime) -> datetime | None:
    """When the next ready job of the worker's queues is due, if it is in the future."""
    jobs = Job.objects.using(worker.using).filter(state=JobState.READY, run_after__gt=now)
    if worker.queues:
        jobs = jobs.filter(queue_name__in=worker.queues)
    return jobs.order_by("run_after").values_list("run_after", flat=True).first()


def outcome(job, *, using: str = "default") -> Outcome:
    """A job as it is now (given by id, TaskResult or Job): its row, the dead letter it left
    (the letter of its own id, or of the job it replays), its workflow's steps."""
    pk = getattr(job, "pk", None) or getattr(job, "id", job)
    row = Job.objects.using(using).get(pk=int(pk))
    letter = (
        DeadLetter.objects.using(using).filter(job_id=row.pk).order_by("-pk").first()
        or DeadLetter.objects.using(using).filter(original_job_id=row.pk).order_by("-pk").first()
    )
    workflow = Workflow.objects.using(using).filter(job_id=row.pk).first()
    steps = list(workflow.steps.order_by("started_at", "pk")) if workflow else []
    return Outcome(job=row, dead_letter=letter, steps=steps)


class Harness:
    """The `redrive` pytest fixture: the functions above sharing one clock."""

    def __init__(self, clock: Clock | None = None, backend: str = "default"):
        self.clock = clock or Clock()
        self.backend = backend
        self.using = _database(backend)

    def run(self, **options) -> Run:
        return run_jobs(clock=self.clock, backend=self.backend, **options)

    def enqueued(self, task=None, **match) -> list[Enqueued]:
        return enqueued(task, backend=self.backend, **match)

    def assert_enqueued(self, task, **match) -> list[Enqueued]:
        return assert_enqueued(task, backend=self.backend, **match)

    def refute_enqueued(self, task, **match) -> None:
        refute_enqueued(task, backend=self.backend, **match)

    def outcome(self, job) -> Outcome:
        return outcome(job, using=self.using)
