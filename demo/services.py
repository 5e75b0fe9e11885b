from datetime import timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from demo.models import Document, Outage, Payment, Wallet
from demo.tasks import notify_webhook, refresh_search_index, send_receipt


class InsufficientFunds(Exception):
    pass


def pay(*, wallet: Wallet, document: Document) -> Payment:
    """Debit the wallet and commit the follow-up jobs in the same transaction."""
    with transaction.atomic():
        debited = Wallet.objects.filter(
            pk=wallet.pk, balance_cents__gte=document.price_cents
        ).update(balance_cents=F("balance_cents") - document.price_cents)
        if not debited:
            raise InsufficientFunds(f"{wallet.owner} cannot pay {document.price_cents}¢")
        payment = Payment.objects.create(
            wallet=wallet, document=document, amount_cents=document.price_cents
        )
        send_receipt.using(idempotency_key=receipt_key(payment.pk)).enqueue(payment.pk)
        notify_webhook.using(idempotency_key=f"webhook:{payment.pk}").enqueue(
            payment.pk, document.webhook_url
        )
        refresh_search_index.enqueue(document.pk)
    return payment


def receipt_key(payment_id: int) -> str:
    return f"receipt:{payment_id}"


def start_outage(dependency: str, seconds: float) -> Outage:
    outage, _ = Outage.objects.update_or_create(
        dependency=dependency, defaults={"until": timezone.now() + timedelta(seconds=seconds)}
    )
    return outage


def end_outage(dependency: str) -> None:
    Outage.objects.filter(dependency=dependency).delete()


def is_down(dependency: str) -> bool:
    return Outage.objects.filter(dependency=dependency, until__gt=timezone.now()).exists()


DOCUMENTS = [
    ("document-7", "Field notes on lease tokens", 500, "https://hooks.example.test/fieldnotes"),
    ("document-8", "Backoff with jitter", 500, "https://hooks.example.test/fieldnotes"),
    ("document-9", "Dead letters are not a success state", 300, "not a url"),
    ("document-10", "Replays and their audit", 200, "https://hooks.example.test/fieldnotes"),
    ("document-11", "Idempotency keys in practice", 400, "ftp://wrong-scheme.test/"),
]


def seed(*, payments: int = 24) -> list[Payment]:
    """`payments` new payments, each committing its receipt, webhook and search-index jobs;
    every demo run seeds its own, so each run's outage has receipts to exhaust. The author's
    wallet is topped up first when it could not pay for them all."""
    wallet, _ = Wallet.objects.get_or_create(
        owner="synthetic-author", defaults={"balance_cents": 1_000_000}
    )
    needed = payments * max(price for _, _, price, _ in DOCUMENTS)
    Wallet.objects.filter(pk=wallet.pk, balance_cents__lt=needed).update(balance_cents=needed)
    documents = [
        Document.objects.get_or_create(
            slug=slug, defaults={"title": title, "price_cents": price, "webhook_url": url}
        )[0]
        for slug, title, price, url in DOCUMENTS
    ]
    return [pay(wallet=wallet, document=documents[n % len(documents)]) for n in range(payments)]
