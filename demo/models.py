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


# Seed 000's onboarding workflow (demo.onboarding): a simulated card provider and mailer that
# deduplicate by idempotency key as real ones do, and the account our own database provisions.


class ProviderCharge(models.Model):
    """The card provider's side: one charge per idempotency key, however often it is asked
    (`requests` counts the asks, so a drill can see a repeated call that charged once)."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    payment_method = models.CharField(max_length=100)
    cents = models.PositiveIntegerField()
    requests = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"charge {self.pk} {self.cents}¢"


class Account(models.Model):
    """Provisioned by the workflow in its own transaction (an atomic step): exactly once. The
    e-mail is not unique on purpose, so that a repeated provisioning would show, not fail."""

    email = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    setup_completed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return self.email


class OutgoingEmail(models.Model):
    """The mail provider's side: one message per idempotency key."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    account = models.ForeignKey(Account, on_delete=models.CASCADE)
    kind = models.CharField(max_length=20)  # welcome, nudge
    requests = models.PositiveIntegerField(default=1)
    sent_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.kind} to {self.account_id}"
