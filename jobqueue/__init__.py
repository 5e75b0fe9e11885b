"""Durable jobs for Django: the store, the django.tasks backend and the worker."""

from jobqueue.idempotency import once

__all__ = ["once"]
