from django.db import connections

from jobqueue import store
from jobqueue.management import cli
from jobqueue.models import AuditEntry

LISTED = ("seq", "at", "actor", "channel", "token", "action", "target_kind", "targets", "reason")


class Command(cli.Command):
    requires_system_checks = []
    help = "Read the audit log of what operators did, or verify its hash chain."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        verify = sub.add_parser(
            "verify", help="Check that no entry was edited, removed or inserted (exit 1 if so)."
        )
        listing = sub.add_parser("list", help="The newest entries first.")
        listing.add_argument("--actor", type=cli.column(AuditEntry, "actor"), default=None)
        listing.add_argument("--action", type=cli.column(AuditEntry, "action"), default=None)
        listing.add_argument(
            "--limit",
            type=cli.integer(1, cli.MAX_LIST_LIMIT),
            default=50,
            help=f"At most this many entries (default 50, at most {cli.MAX_LIST_LIMIT}).",
        )
        listing.add_argument("--json", action="store_true", help="One JSON array of objects.")
        for each in (verify, listing):
            each.add_argument(
                "--database",
                default="default",
                choices=list(connections),
                help="The database whose audit log to read (default: default).",
            )

    def handle(self, *args, **opts):
        using = opts["database"]
        if opts["command"] == "verify":
            breaks = 0
            for problem in store.audit.verify(using):
                breaks += 1
                self.stderr.write(cli.one_line(f"BROKEN {problem}"))
            count = AuditEntry.objects.using(using).count()
            if breaks:
                raise cli.CommandError(
                    f"the audit log of {using!r} is not intact: {breaks} break(s) among {count} "
                    "entries",
                    returncode=1,
                )
            self.stdout.write(f"the audit log of {using!r} is intact: {count} entries")
            return
        entries = AuditEntry.objects.using(using).order_by("-id")
        if opts["actor"]:
            entries = entries.filter(actor=opts["actor"])
        if opts["action"]:
            entries = entries.filter(action=opts["action"])
        entries = entries[: opts["limit"]]
        if opts["json"]:
            self.write_json_rows(
                {
                    "id": entry.id,
                    **{field: getattr(entry, field) for field in LISTED},
                    "params": entry.params,
                    "outcome": entry.outcome,
                    "hash": entry.hash,
                }
                for entry in entries.iterator()
            )
            return
        for entry in entries:
            targets = ",".join(entry.targets[:5]) + ("…" if len(entry.targets) > 5 else "")
            self.stdout.write(
                cli.one_line(
                    f"#{entry.seq} {entry.at.isoformat()} {entry.actor} via {entry.channel} "
                    f"{entry.action} {entry.target_kind} {targets} reason={entry.reason!r}"
                )
            )
