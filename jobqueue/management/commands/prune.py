from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from jobqueue.outbox import setting
from jobqueue.store import outbox as outbox_store


class Command(BaseCommand):
    help = "Delete published outbox messages older than the retention. Unpublished ones stay."

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            type=float,
            default=None,
            metavar="DAYS",
            help="Retention in days (default settings.OUTBOX RETENTION_DAYS).",
        )

    def handle(self, *args, **opts):
        days = opts["older_than"]
        if days is None:
            days = float(setting("RETENTION_DAYS"))
        if days < 0:
            raise CommandError("--older-than must be 0 or more days", returncode=2)
        deleted = outbox_store.prune(older_than=timedelta(days=days))
        self.stdout.write(f"pruned {deleted} published outbox message(s) older than {days:g} days")
