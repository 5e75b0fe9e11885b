"""Effect keys (jobqueue.once): a key's row, written in the caller's transaction."""

from django.db import IntegrityError, transaction

from jobqueue.models import Execution


def record(key: str, *, job_type: str = "", using: str = "default") -> bool:
    """Insert `key`'s row, True; or False if a committed row holds it already. In a savepoint
    of the caller's transaction: the row commits or rolls back with the caller's work, and a
    concurrent holder of the key makes this wait on the unique index, then see False."""
    try:
        with transaction.atomic(using=using):
            Execution.objects.using(using).create(idempotency_key=key, job_type=job_type)
    except IntegrityError:
        return False
    return True
