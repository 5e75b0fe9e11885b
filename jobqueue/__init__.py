"""Durable jobs for Django: the store, the django.tasks backend and the worker."""

from jobqueue.decorator import task
from jobqueue.idempotency import once

__all__ = ["RedriveTask", "once", "redis_once", "task"]


def __getattr__(name: str):
    # redis_once needs redis-py, an optional extra: its module loads on first use, so
    # `import jobqueue` works (and stays light) without it.
    if name == "RedriveTask":  # jobqueue.backend's Task, which needs the apps ready
        from jobqueue.decorator import RedriveTask

        return RedriveTask
    if name == "redis_once":
        from jobqueue.redis_claims import redis_once

        return redis_once
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
