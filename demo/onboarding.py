"""Seed 000's onboarding workflow as plain linear code (jobqueue.workflows): charge the card,
provision the account, send the welcome e-mail, sleep seven days, then nudge the customer if
setup is still incomplete. No worker is held during the week; a crash, a redeploy or a replay
resumes at the first unfinished step.

The card provider and the mailer are simulated in the demo's own tables, deduplicating by the
idempotency key each call carries (`step_key()`: the workflow's and the step's), as Stripe and
most mail APIs do: a step that calls out may run twice (a crash after the call, before its
record) and still charge or mail once. Provisioning is local: an atomic step, exactly once.
"""

from datetime import timedelta

from django.db import transaction
from django.db.models import F
from django.tasks import task
from django.utils import timezone

from jobqueue.errors import PermanentError
from jobqueue.workflows import batch, sleep, step, step_key, step_options

SETUP_GRACE = timedelta(days=7)


def _provider_call(model, **fields):
    """The provider's handling of a request: the first with a key makes the row, later ones
    only count the ask and return the same row."""
    with transaction.atomic():
        row, created = model.objects.get_or_create(idempotency_key=step_key(), defaults=fields)
        if not created:
            model.objects.filter(pk=row.pk).update(requests=F("requests") + 1)
    return row


@step_options(max_attempts=5, backoff_base=2.0, backoff_cap=60.0)
def charge_card(payment_method: str, cents: int) -> dict:
    from demo.models import ProviderCharge

    if not payment_method.startswith("pm_"):
        raise PermanentError(f"the provider refuses payment method {payment_method!r}")
    charge = _provider_call(ProviderCharge, payment_method=payment_method, cents=cents)
    return {"id": charge.pk, "cents": charge.cents}


@step_options(atomic=True)
def provision_account(email: str) -> dict:
    from demo.models import Account

    return {"id": Account.objects.create(email=email).pk}


def _send(account_id: int, kind: str) -> dict:
    from demo.models import OutgoingEmail

    message = _provider_call(OutgoingEmail, account_id=account_id, kind=kind)
    return {"message_id": message.pk}


def send_welcome_email(account_id: int) -> dict:
    return _send(account_id, "welcome")


def send_nudge_email(account_id: int) -> dict:
    return _send(account_id, "nudge")


def has_completed_setup(account_id: int) -> bool:
    from demo.models import Account

    return Account.objects.filter(pk=account_id, setup_completed_at__isnull=False).exists()


@task(queue_name="onboarding")
def onboard_customer(email: str, payment_method: str, cents: int) -> dict:
    payment = step("charge_card", charge_card, payment_method, cents)
    account = step("provision_account", provision_account, email)
    step("send_welcome_email", send_welcome_email, account["id"])
    # The week passes with no worker held: the job waits in the queue until then.
    sleep(SETUP_GRACE, name="setup_grace")
    nudged = False
    if not step("has_completed_setup", has_completed_setup, account["id"]):
        step("send_nudge_email", send_nudge_email, account["id"])
        nudged = True
    return {"account_id": account["id"], "payment_id": payment["id"], "nudged": nudged}


def complete_setup(account_id: int) -> None:
    """What the product does when the customer finishes setting up."""
    from demo.models import Account

    Account.objects.filter(pk=account_id).update(setup_completed_at=timezone.now())


# A batch: contacts imported in chunks, a malformed one buried as its own dead letter.

CONTACTS = [
    "ada@example.com",
    "grace@example.com",
    "not-an-address",
    "edsger@example.com",
    "barbara@example.com",
    "ken@",
    "margaret@example.com",
]


def read_contacts(count: int) -> list[dict]:
    """The rows to import, read once: the batch resumes over exactly these."""
    return [{"row": n, "email": CONTACTS[n % len(CONTACTS)]} for n in range(count)]


@task(queue_name="onboarding")
def import_contact(contact: dict) -> None:
    from demo.models import Account

    local, _, domain = str(contact.get("email", "")).partition("@")
    if not local or "." not in domain:
        raise PermanentError(f"row {contact.get('row')}: malformed e-mail {contact.get('email')!r}")
    Account.objects.create(email=contact["email"])


@task(queue_name="onboarding")
def contacts_imported(**summary) -> dict:
    return summary


@task(queue_name="onboarding")
def import_contacts(count: int = 20) -> dict:
    contacts = step("read_contacts", read_contacts, count)
    result = batch("import", contacts, import_contact, chunk=5, on_complete=contacts_imported)
    return {"imported": result.done, "failed": result.failed, "outcome": result.outcome}


def seed(customers: int = 3) -> list[int]:
    """Onboard a few customers (the last one's card is refused, so its workflow dies at its
    first step) and start a contacts import; returns the workflows' ids."""
    started = []
    for n in range(customers):
        card = "pm_card_visa" if n < customers - 1 else "tok_expired"
        started.append(onboard_customer.enqueue(f"customer{n}@example.com", card, 4900).id)
    started.append(import_contacts.enqueue(20).id)
    return [int(pk) for pk in started]
