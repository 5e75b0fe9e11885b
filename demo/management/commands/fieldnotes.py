"""Seed 004's lab commands on our stack: pay, receipts, outage."""

from django.core.management.base import BaseCommand, CommandError

from demo import services
from demo.models import Document, Receipt, Wallet


class Command(BaseCommand):
    help = "Field Notes lab: `pay` a document, list `receipts`, switch the receipt `outage`."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        pay = sub.add_parser("pay", help="Pay for a document; prints the payment id.")
        pay.add_argument("--document", default="document-7")
        sub.add_parser("receipts", help="One line per delivered receipt.")
        outage = sub.add_parser("outage", help="Take the receipt service down, or --end it.")
        outage.add_argument("seconds", nargs="?", type=float, default=3600.0)
        outage.add_argument("--end", action="store_true")

    def handle(self, *args, action, **opts):
        if action == "pay":
            wallet, _ = Wallet.objects.get_or_create(
                owner="synthetic-author", defaults={"balance_cents": 10_000}
            )
            if not Document.objects.exists():
                services.seed(payments=0)
            try:
                document = Document.objects.get(slug=opts["document"])
                payment = services.pay(wallet=wallet, document=document)
            except Document.DoesNotExist as exc:
                raise CommandError(f"no document {opts['document']!r}", returncode=2) from exc
            except services.InsufficientFunds as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(str(payment.pk))
        elif action == "receipts":
            for receipt in Receipt.objects.order_by("pk"):
                self.stdout.write(f"{receipt.idempotency_key} payment={receipt.payment_id}")
        elif opts["end"]:
            services.end_outage("receipts")
            self.stdout.write("receipt service restored")
        else:
            outage = services.start_outage("receipts", opts["seconds"])
            self.stdout.write(f"receipt service down until {outage.until.isoformat()}")
