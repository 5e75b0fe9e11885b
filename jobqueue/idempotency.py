"""Record an idempotency key in the caller's transaction, so a repeated job skips its effect."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction


@contextmanager
def once(key: str, *, job_type: str = "", using: str = "default") -> Iterator[bool]:
    """Yield True the first time `key` is seen, False once its work has committed.

        with jobqueue.once(f"receipt:{payment_id}") as first:
            if first:
                Receipt.objects.create(...)

    The key and the work commit or roll back together: an exception inside the block rolls both
    back, so a retry runs the work again. A concurrent holder of the same key makes the second
    caller wait on the unique index and then see False.
    """
    from jobqueue.store import executions

    with transaction.atomic(using=using):
        yield executions.record(key, job_type=job_type, using=using)
