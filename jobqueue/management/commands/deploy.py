"""manage.py deploy mark --version 2026.12.4 [--note "..."] [--by NAME]: a deploy pipeline's
marker, drawn on the console's charts and behind its "since the last deploy" filters; `deploy
list` prints the newest. Workers record one themselves when they start with a code version
other than the newest marker's (REDRIVE["VERSION"] or $REDRIVE_VERSION: jobqueue.store.deploys).

Not an operator action of the console's registry: a pipeline has no operator account, and a
marker changes no job; it is audited all the same (deploy.mark, channel cli), naming --by.
"""

from django.db import connections

from jobqueue import store
from jobqueue.management import cli
from jobqueue.models import AuditEntry, Deploy
from jobqueue.store.payloads import MAX_REASON_CHARS

DEFAULT_BY = "deploy"


def as_json(deploy: Deploy) -> dict:
    return {
        "seq": deploy.seq,
        "version": deploy.version,
        "at": deploy.at,
        "note": deploy.note,
        "source": deploy.source,
        "recorded_by": deploy.recorded_by,
    }


class Command(cli.Command):
    requires_system_checks = []
    help = "Record a deploy marker (for a deploy pipeline), or list the newest ones."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        mark = sub.add_parser("mark", help="Record that a version was deployed now (audited).")
        mark.add_argument(
            "--version",
            dest="deploy_version",  # --version of the command itself is Django's
            required=True,
            type=cli.column(Deploy, "version"),
            help="The version deployed: a tag, a build number, a commit.",
        )
        mark.add_argument(
            "--note", type=cli.text(MAX_REASON_CHARS, empty=True), default="", help="What it is."
        )
        mark.add_argument(
            "--by",
            type=cli.column(AuditEntry, "actor"),
            default=DEFAULT_BY,
            help=f"Who deploys, as the audit names it (default {DEFAULT_BY!r}).",
        )
        mark.add_argument("--json", action="store_true", help="The marker as one JSON object.")
        listing = sub.add_parser("list", help="The newest deploy markers first.")
        listing.add_argument(
            "--limit",
            type=cli.integer(1, cli.MAX_LIST_LIMIT),
            default=20,
            help=f"At most this many (default 20, at most {cli.MAX_LIST_LIMIT}).",
        )
        listing.add_argument("--json", action="store_true", help="One JSON array of objects.")
        for each in (mark, listing):
            each.add_argument(
                "--database",
                default="default",
                choices=list(connections),
                help="The queue database to record in or read (default: default).",
            )

    def handle(self, *args, **opts):
        using = opts["database"]
        if opts["command"] == "list":
            deploys = store.deploys.recent(opts["limit"], using=using)
            if opts["json"]:
                self.write_json_rows(as_json(d) for d in deploys)
            elif not deploys:
                self.stdout.write("no deploy recorded: `manage.py deploy mark --version X`")
            for d in deploys if not opts["json"] else ():
                note = f" {d.note!r}" if d.note else ""
                self.stdout.write(
                    cli.one_line(
                        f"#{d.seq} {d.at.isoformat()} {d.version} by {d.recorded_by} "
                        f"({d.source}){note}"
                    )
                )
            return
        try:
            deploy = store.deploys.mark(
                opts["deploy_version"],
                actor=opts["by"],
                note=opts["note"],
                channel=AuditEntry.Channel.CLI,
                source=Deploy.Source.COMMAND,
                using=using,
            )
        except ValueError as exc:
            raise cli.usage_error(exc) from None
        if opts["json"]:
            self.stdout.write(cli.json_text(as_json(deploy)))
        else:
            self.stdout.write(f"deploy {deploy.version} marked at {deploy.at.isoformat()}")
