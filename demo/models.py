"""Field Notes (seed 004): an author pays for documents from a simulated wallet.

Each payment commits its receipt job in the same transaction. Receipts land in a local sink that
deduplicates by the job's idempotency key, so a repeated delivery is a no-op.
"""

from django.db import models


class Wallet(models.Model):
    owner = models.CharField(max_length=100, unique=True)
    balance_cents = models.PositiveIntegerField()

    def __str__(self):
        return f"{self.owner}: {self.balance_cents}¢"


class Document(models.Model):
    slug = models.SlugField(unique=True)
    title = models.CharField(max_length=200)
    price_cents = models.PositiveIntegerField()
    # Where the publisher wants a webhook on purchase; a few are malformed on purpose.
    webhook_url = models.CharField(max_length=200, blank=True, default="")

    def __str__(self):
        return self.slug


class Payment(models.Model):
    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT)
    document = models.ForeignKey(Document, on_delete=models.PROTECT)
    amount_cents = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"payment {self.pk}"


class Receipt(models.Model):
    """The receipt sink: one row per key however often delivery runs."""

    idempotency_key = models.CharField(max_length=100, unique=True)
    payment = models.ForeignKey(Payment, on_delete=models.PROTECT)
    delivered_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.idempotency_key


class Outage(models.Model):
    """A switchable fault that worker processes read: the dependency is down until `until`."""

    dependency = models.CharField(max_length=50, unique=True)
    until = models.DateTimeField()

    def __str__(self):
        return f"{self.dependency} down until {self.until}"
