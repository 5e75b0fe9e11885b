"""Error classes a task raises to say how its failure should be handled, and the classifier."""

from dataclasses import dataclass


class PermanentError(Exception):
    """Retrying cannot help (invalid payload, rejected operation): dead-letter at once."""


class TransientError(Exception):
    """Explicitly retryable. Any exception that is not permanent is treated the same way."""


class RateLimited(TransientError):
    """The dependency asked us to wait: run again after its delay, not ours."""

    def __init__(self, retry_after: float, message: str = "rate limited"):
        super().__init__(message)
        self.retry_after = max(0.0, float(retry_after))


class JobTimeout(TransientError):
    """The handler ran past the task's timeout; the worker gave up waiting for it."""


class LeaseExpired(TransientError):
    """The worker that held the job stopped renewing its lease (crashed, paused or partitioned)."""


class UnknownTask(PermanentError):
    """The job's task path does not import to a task (renamed, removed, or never deployed)."""


class InvalidPayload(PermanentError):
    """The stored arguments cannot be passed to the task as it is now defined."""


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
