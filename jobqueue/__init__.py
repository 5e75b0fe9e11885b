"""Durable jobs for Django: the store, the django.tasks backend and the worker."""

from jobqueue.idempotency import once

__all__ = ["once", "redis_once"]


def __getattr__(name: str):
    # redis_once needs redis-py, an optional extra: its module loads on first use, so
    # `import jobqueue` works (and stays light) without it.
    if name == "redis_once":
        from jobqueue.redis_claims import redis_once

        return redis_once
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
