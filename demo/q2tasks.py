"""The demo's django-q2 task type, for the bridge (deadletters/django_q2_bridge.py).

A plain function queued with `django_q.tasks.async_task`, run by `manage.py qcluster`: django-q2
retries it when its broker lock expires and, after Q_CLUSTER["max_attempts"], the bridge makes
it a dead letter of source django_q2 that the console replays like our own.
"""


def sync_ledger(payment_id: int):
    """Post a payment to the accounting ledger; fails while the ledger outage lasts."""
    from demo.models import Payment
    from demo.services import is_down

    if is_down("ledger"):
        raise ConnectionError("ledger_unavailable: the accounting ledger is down (simulated)")
    payment = Payment.objects.get(pk=payment_id)
    return {"synced": payment.pk}
