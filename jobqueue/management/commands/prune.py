from datetime import timedelta

from django.utils import timezone

from jobqueue import store
from jobqueue.management import cli
from jobqueue.models import JobCounter, WorkerRecord
from jobqueue.outbox import setting
from jobqueue.store import outbox_messages as outbox_store

# A century: older cut-offs are a typo, and date arithmetic overflows not far beyond.
MAX_DAYS = 36_525.0
DAYS = cli.number(0, MAX_DAYS, unit="days")


class Command(cli.Command):
    help = (
        "Delete published outbox messages older than the retention (unpublished ones stay), "
        "finished jobs (done or cancelled) older than theirs, per-minute job counters older "
        "than the health window, and the records of workers that stopped heartbeating long "
        "ago (crashed; a clean exit removes its own)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            type=DAYS,
            default=None,
            metavar="DAYS",
            help="Retention in days (default REDRIVE['OUTBOX']['RETENTION_DAYS']).",
        )
        parser.add_argument(
            "--jobs-older-than",
            type=DAYS,
            default=14.0,
            metavar="DAYS",
            help="Keep done and cancelled jobs this long after they finished (default 14), and "
            "periodic jobs' tick records as long. Dead jobs stay with their dead letters; "
            "waiting and running ones always stay.",
        )
        parser.add_argument(
            "--counters-older-than",
            type=DAYS,
            default=7.0,
            metavar="DAYS",
            help="Keep per-minute job counters this long (default 7; health reads the last hour).",
        )

        parser.add_argument(
            "--workers-lost-for",
            type=DAYS,
            default=1.0,
            metavar="DAYS",
            help="Remove records of workers silent this long (default 1; the dashboard shows "
            "them as lost until then).",
        )

    def handle(self, *args, **opts):
        days = opts["older_than"]
        if days is None:
            days = float(setting("RETENTION_DAYS"))
        deleted = outbox_store.prune(older_than=timedelta(days=days))
        self.stdout.write(f"pruned {deleted} published outbox message(s) older than {days:g} days")
        jobs = store.prune_finished_jobs(older_than=timedelta(days=opts["jobs_older_than"]))
        self.stdout.write(
            f"pruned {jobs} finished job(s) older than {opts['jobs_older_than']:g} days"
        )
        ticks = store.schedules.prune_runs(older_than=timedelta(days=opts["jobs_older_than"]))
        self.stdout.write(
            f"pruned {ticks} schedule tick record(s) older than {opts['jobs_older_than']:g} days"
        )
        flows = store.workflows.prune_finished(older_than=timedelta(days=opts["jobs_older_than"]))
        self.stdout.write(
            f"pruned {flows} finished workflow(s) older than {opts['jobs_older_than']:g} days"
        )
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
