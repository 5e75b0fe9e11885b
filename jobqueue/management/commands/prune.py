from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from jobqueue.models import JobCounter, WorkerRecord
from jobqueue.outbox import setting
from jobqueue.store import outbox as outbox_store


class Command(BaseCommand):
    help = (
        "Delete published outbox messages older than the retention (unpublished ones stay) "
        "per-minute job counters older than the health window, and the records of workers "
        "that stopped heartbeating long ago (crashed; a clean exit removes its own)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            type=float,
            default=None,
            metavar="DAYS",
            help="Retention in days (default settings.OUTBOX RETENTION_DAYS).",
        )
        parser.add_argument(
            "--counters-older-than",
            type=float,
            default=7.0,
            metavar="DAYS",
            help="Keep per-minute job counters this long (default 7; health reads the last hour).",
        )

        parser.add_argument(
            "--workers-lost-for",
            type=float,
            default=1.0,
            metavar="DAYS",
            help="Remove records of workers silent this long (default 1; the dashboard shows "
            "them as lost until then).",
        )

    def handle(self, *args, **opts):
        days = opts["older_than"]
        if days is None:
            days = float(setting("RETENTION_DAYS"))
        if days < 0:
            raise CommandError("--older-than must be 0 or more days", returncode=2)
        for option in ("counters_older_than", "workers_lost_for"):
            if opts[option] < 0:
                flag = "--" + option.replace("_", "-")
                raise CommandError(f"{flag} must be 0 or more days", returncode=2)
        deleted = outbox_store.prune(older_than=timedelta(days=days))
        self.stdout.write(f"pruned {deleted} published outbox message(s) older than {days:g} days")
        cutoff = timezone.now() - timedelta(days=opts["counters_older_than"])
        counters, _ = JobCounter.objects.filter(minute__lt=cutoff).delete()
        self.stdout.write(
            f"pruned {counters} job counter row(s) older than {opts['counters_older_than']:g} days"
        )
        silent_since = timezone.now() - timedelta(days=opts["workers_lost_for"])
        workers, _ = WorkerRecord.objects.filter(last_heartbeat_at__lt=silent_since).delete()
        self.stdout.write(
            f"pruned {workers} record(s) of workers silent for over "
            f"{opts['workers_lost_for']:g} days"
        )
