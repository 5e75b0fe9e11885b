"""`jobqueue.task`: Django's `@task` with Redrive's options as typed keywords.

    import jobqueue

    @jobqueue.task(max_attempts=3, timeout=20)
    def send_receipt(payment_id: int) -> None: ...

    send_receipt.using(idempotency_key=f"receipt:{payment.id}").enqueue(payment.id)

`django.tasks.task` takes Redrive's options at run time (it passes extra keywords to the
backend's task class), but its type (django-stubs) declares only Django's: a type checker
refuses `@task(max_attempts=3)` (no overload matches) and the decorated function becomes
`Any`. This decorator calls `django.tasks.task` and declares what it returns: a `RedriveTask`,
Django's `Task[P, R]` (so `enqueue` checks its arguments against the function's and its result
is a `TaskResult[P, R]`) whose `using()` also takes Redrive's keys. At run time the task is
whatever the backend's task class builds (`jobqueue.backend.Task` under Redrive's backends,
jobqueue.testing's included); only the options given are passed, so a task declared without
Redrive's options loads under any backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Literal, overload

__all__ = ["RedriveTask", "task"]

if TYPE_CHECKING:
    from django.tasks import Task as DjangoTask
    from django.tasks import TaskContext

    class RedriveTask[**P, R](DjangoTask[P, R]):
        """What the type checker knows of a task declared with `jobqueue.task`."""

        max_attempts: int | None
        timeout: float | None
        backoff_base: float | None
        backoff_cap: float | None
        idempotency_key: str | None
        unique_key: str | None
        unique_while: tuple[str, ...]
        unique_for: float | None
        ordering_key: str | None
        ordering_on_dead: str
        concurrency_key: str | None
        concurrency_limit: int

        def using(
            self,
            *,
            priority: int | None = None,
            queue_name: str | None = None,
            run_after: datetime | None = None,
            backend: str | None = None,
            idempotency_key: str | None = None,
            unique_key: str | None = None,
            unique_while: str | Iterable[str] | None = None,
            unique_for: float | timedelta | None = None,
            ordering_key: str | None = None,
            ordering_on_dead: Literal["block", "skip"] | None = None,
            concurrency_key: str | None = None,
            concurrency_limit: int | None = None,
        ) -> RedriveTask[P, R]: ...


def __getattr__(name: str) -> type:
    # At run time a RedriveTask is jobqueue.backend.Task, imported on first use: `import
    # jobqueue` happens before Django's apps are ready (settings, logging configuration).
    if name == "RedriveTask":
        from jobqueue.backend import Task

        return Task
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@overload
def task[**P, R](
    function: Callable[Concatenate[TaskContext[Any, Any], P], R],
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[True],
    max_attempts: int | None = None,
    timeout: float | None = None,
    backoff_base: float | None = None,
    backoff_cap: float | None = None,
) -> RedriveTask[P, R]: ...
@overload
def task[**P, R](
    function: Callable[P, R],
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[False] = False,
    max_attempts: int | None = None,
    timeout: float | None = None,
    backoff_base: float | None = None,
    backoff_cap: float | None = None,
) -> RedriveTask[P, R]: ...
@overload
def task[**P, R](
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[True],
    max_attempts: int | None = None,
    timeout: float | None = None,
    backoff_base: float | None = None,
    backoff_cap: float | None = None,
) -> Callable[[Callable[Concatenate[TaskContext[Any, Any], P], R]], RedriveTask[P, R]]: ...
@overload
def task[**P, R](
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[False] = False,
    max_attempts: int | None = None,
    timeout: float | None = None,
    backoff_base: float | None = None,
    backoff_cap: float | None = None,
) -> Callable[[Callable[P, R]], RedriveTask[P, R]]: ...
def task(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Django's `@task` (with or without parentheses), Redrive's options typed: `max_attempts`,
    `timeout` (seconds), `backoff_base`, `backoff_cap`, beside Django's `priority`,
    `queue_name`, `backend` and `takes_context`. An option left at None is not passed."""
    from django.tasks import task as django_task

    given = {name: value for name, value in options.items() if value is not None}
    return django_task(function, **given) if function is not None else django_task(**given)
