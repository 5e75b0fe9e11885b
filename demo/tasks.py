"""The demo's job types: one that an outage can exhaust, one that is sometimes malformed
(permanent), one that fails transiently at a configurable rate, and a periodic tally of the
receipts (its schedule is declared in demo/periodic.py)."""

import os
import random
from urllib.parse import urlsplit

from django.db import transaction
from django.tasks import task

from jobqueue.errors import PermanentError, TransientError


# Seed 004: three attempts per delivery cycle, on a queue of its own so drills can target it.
@task(max_attempts=3, queue_name="receipts")
def send_receipt(payment_id: int):
    from demo.models import Payment, Receipt
    from demo.services import is_down, receipt_key

    if is_down("receipts"):
        raise ConnectionError("receipt_unavailable: the receipt service is down (simulated)")
    payment = Payment.objects.get(pk=payment_id)
    with transaction.atomic():
        # The sink deduplicates by key: a repeated delivery is a no-op.
        _, created = Receipt.objects.get_or_create(
            idempotency_key=receipt_key(payment_id), defaults={"payment": payment}
        )
    return {"delivered": created}


@task(max_attempts=5)
def notify_webhook(payment_id: int, url: str):
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise PermanentError(f"malformed webhook endpoint {url!r} for payment {payment_id}")
    # A real delivery would POST here with an Idempotency-Key; the demo stays on the machine.
    return {"delivered_to": parts.netloc}


@task(max_attempts=4, backoff_base=0.5)
def refresh_search_index(document_id: int):
    rate = float(os.environ.get("DEMO_FLAKY_RATE", "0.3"))
    if random.random() < rate:
        raise TransientError(f"search index busy while refreshing document {document_id}")
    return {"indexed": document_id}


@task
def tally_receipts():
    """How many payments have their receipt: during the outage the missing ones add up, after
    the replay there are none."""
    from demo.models import Payment, Receipt

    payments = Payment.objects.count()
    receipted = Receipt.objects.values("payment").distinct().count()
    return {"payments": payments, "receipted": receipted, "missing": payments - receipted}
