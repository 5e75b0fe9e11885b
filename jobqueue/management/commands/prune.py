"""`manage.py prune`: delete what is past its retention, and say so in the audit log.

Each run is one entry of the audit log (`chore.prune`, channel `cli`), written after the deletes
by `chores.record_prune`, the writer the leader's `Prune` chore audits its runs with too (channel
`system`): how many rows of each kind it deleted and the retentions it used. Prune is also run
by a scheduler (cron), so `--operator` is optional: without it the entry's actor is `system`;
with it, the named user (active; prune needs no permission of the console's, being
housekeeping, not an operator's action on a target).
"""

from django.utils import timezone

from jobqueue import chores
from jobqueue.management import cli

# A century: older cut-offs are a typo, and date arithmetic overflows not far beyond.
MAX_DAYS = 36_525.0
DAYS = cli.number(0, MAX_DAYS, unit="days")


class Command(cli.Command):
    help = (
        "Delete published outbox messages older than the retention (unpublished ones stay), "
        "finished jobs (done or cancelled) older than theirs, per-minute job counters and "
        "timing buckets older than the health window, and the records of workers that "
        "stopped heartbeating long ago (crashed; a clean exit removes its own)."
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
            help="Keep per-minute job counters and timings this long (default 7; health reads the "
            "last hour, timings up to 7 days).",
        )

        parser.add_argument(
            "--workers-lost-for",
            type=DAYS,
            default=1.0,
            metavar="DAYS",
            help="Remove records of workers silent this long (default 1; the dashboard shows "
            "them as lost until then).",
        )
        parser.add_argument(
            "--json", action="store_true", help="What was deleted, as one JSON object."
        )
        parser.add_argument(
            "--operator",
            type=cli.operator_name,
            default=None,
            help="Username the audit entry names (an active user); without it, `system` (a "
            "scheduled run).",
        )
        parser.add_argument(
            "--reason", type=cli.text(), default=None, help="Why (kept in the audit log)."
        )

    def handle(self, *args, **opts):
        # Refused before anything is deleted: an unknown or inactive user.
        actor = (
            cli.operator(opts["operator"]).get_username()
            if opts["operator"]
            else chores.SYSTEM_ACTOR
        )
        now = timezone.now()
        report = chores.prune(
            chores.Retention(
                outbox=opts["older_than"],
                jobs=opts["jobs_older_than"],
                counters=opts["counters_older_than"],
                workers=opts["workers_lost_for"],
            ),
            now=now,
        )
        chores.record_prune(report, actor=actor, channel="cli", reason=opts["reason"] or "", at=now)
        if opts["json"]:
            self.stdout.write(
                cli.json_text(
                    {
                        what: {"deleted": deleted, "older_than_days": days}
                        for what, deleted, days, _ in report
                    }
                )
            )
            return
        for _, deleted, days, words in report:
            self.stdout.write(f"pruned {deleted} {words} {days:g} days")
