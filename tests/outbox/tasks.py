"""Tasks subscribed to outbox topics in the tests; relay and worker processes import them."""

from django.tasks import task

import jobqueue


@task
def on_order_created(key: str):
    """A second subscriber beside tests.tasks.effect: one Execution row per message."""
    with jobqueue.once(f"order-created:{key}", job_type="tests.outbox") as first:
        pass
    return first
