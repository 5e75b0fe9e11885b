"""Error classes a task raises to say how its failure should be handled, and the classifier."""

from dataclasses import dataclass

from django.tasks.exceptions import InvalidTask


class PermanentError(Exception):
    """Retrying cannot help (invalid payload, rejected operation): dead-letter at once."""


class TransientError(Exception):
    """Explicitly retryable. Any exception that is not permanent is treated the same way."""


class RateLimited(TransientError):
    """The dependency asked us to wait: run again after its delay, not ours."""

    def __init__(self, retry_after: float, message: str = "rate limited"):
        super().__init__(message)
        self.retry_after = max(0.0, float(retry_after))


class TransactionLeftOpen(TransientError):
    """The task returned with a database transaction still open (set_autocommit(False) without
    a commit): its uncommitted writes were rolled back, so it runs again."""


class JobTimeout(TransientError):
    """The handler ran past the task's timeout; the worker gave up waiting for it."""


class LeaseExpired(TransientError):
    """The worker that held the job stopped renewing its lease (crashed, paused or partitioned)."""


class UnknownTask(PermanentError):
    """The job's task path does not import to a task (renamed, removed, or never deployed)."""


class InvalidPayload(PermanentError):
    """The stored arguments cannot be passed to the task as it is now defined."""


class UnstorableValue(ValueError):
    """A JSON value one of the databases cannot store as it is: a string (or key) with NUL
    (PostgreSQL refuses U+0000 in text and jsonb) or a lone surrogate. Refused on SQLite too, so
    what a job may carry never depends on the database under it."""


class InvalidArguments(InvalidTask, TypeError):
    """Arguments refused at enqueue: not JSON, not storable (NUL, lone surrogates) or too big.

    Django's own backends raise TypeError for arguments that are not JSON, so code written
    against `django.tasks` catches TypeError; existing callers of this backend catch InvalidTask.
    Both work."""


@dataclass(frozen=True)
class Verdict:
    """What to do with a failed attempt: retry (after `delay`, or the policy's if None) or die."""

    retry: bool
    delay: float | None = None


def classify(exc: BaseException) -> Verdict:
    if isinstance(exc, PermanentError):
        return Verdict(retry=False)
    if isinstance(exc, RateLimited):
        return Verdict(retry=True, delay=exc.retry_after)
    return Verdict(retry=True)


def class_path(exc_type: type) -> str:
    return f"{exc_type.__module__}.{exc_type.__qualname__}"


def exception_text(exc: BaseException) -> str:
    """str(exc), which runs the task's own code and may itself fail."""
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - a broken __str__ must not stop the failure being stored
        return f"<{type(exc).__name__}: str() failed>"
