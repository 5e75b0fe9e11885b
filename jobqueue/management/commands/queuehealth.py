import argparse
import operator
import re

from jobqueue.databases import MAX_BACKEND_NAME, queue_database, queue_databases
from jobqueue.health import snapshot
from jobqueue.management import cli

COMPARE = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
}
# ASCII digits with at most one decimal point: "1.2.3" and "²" are not numbers.
CONDITION = re.compile(
    r"\s*([a-z_0-9]+)\s*(>=|<=|==|>|<)\s*(-?[0-9]{1,30}(?:\.[0-9]{1,30})?)\s*", re.ASCII
)


def condition(text):
    """An argparse type: NAME OP NUMBER, as (name, op, compare, limit)."""
    match = CONDITION.fullmatch(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r}: write NAME OP NUMBER, e.g. 'ready>100' (OP one of "
            f"{' '.join(COMPARE)})"
        )
    name, op, limit = match.groups()
    return name, op, COMPARE[op], float(limit)


class Command(cli.Command):
    help = (
        "Print queue health (of the default backend's database, or --backend NAME's, or --all "
        "of them); with --fail-if, exit 1 when a threshold is crossed (for cron)."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--fail-if",
            action="append",
            type=condition,
            default=[],
            metavar="EXPR",
            help="e.g. 'oldest_ready_age>300' or 'lost_workers>0' (repeatable; with --all, "
            "judged for each backend).",
        )
        which = parser.add_mutually_exclusive_group()
        which.add_argument(
            "--backend",
            default=None,
            metavar="NAME",
            help="The TASKS backend whose queue database to report (default: the default "
            "backend's).",
        )
        which.add_argument(
            "--all",
            action="store_true",
            help="Every queue database, one after another, each labelled with its backend.",
        )

    def handle(self, *args, **opts):
        conditions = opts["fail_if"]
        known = queue_databases()
        if opts["all"]:
            chosen = known
        elif opts["backend"] is None:
            chosen = known[:1]
        else:
            found = queue_database(opts["backend"])
            if found is None:
                names = ", ".join(name for q in known for name in q.aliases)
                raise cli.usage_error(
                    f"no Redrive TASKS backend {opts['backend'][:MAX_BACKEND_NAME]!r}; one of: "
                    f"{names}"
                )
            chosen = [found]
        # Several queue databases: every line and figure says which backend it is of. One: the
        # output is as it always was.
        several = len(known) > 1
        reports = []
        for queue_db in chosen:
            health = snapshot(using=queue_db.database)
            unknown = [name for name, _, _, _ in conditions if name not in health.totals]
            if unknown:
                raise cli.usage_error(
                    f"unknown figure {unknown[0]!r}; one of: {', '.join(sorted(health.totals))}"
                )
            crossed = [
                f"{name}={health.totals[name]:g} {op} {limit:g}"
                for name, op, compare, limit in conditions
                if compare(health.totals[name], limit)
            ]
            reports.append((queue_db, health, crossed))
        if opts["json"]:
            self._json(reports, several=several, all_=opts["all"])
        else:
            for queue_db, health, crossed in reports:
                self._text(queue_db.name if several else None, health, crossed)
        if any(crossed for _, _, crossed in reports):
            raise SystemExit(1)

    def _json(self, reports, *, several, all_):
        def document(queue_db, health, crossed):
            data = {**health.as_json(), "crossed": crossed}
            return {"backend": queue_db.name, **data} if several else data

        if not all_:
            [report] = reports
            self.stdout.write(cli.json_text(document(*report)))
            return
        # One document: each backend's, and every crossed threshold with its backend's name.
        self.stdout.write(
            cli.json_text(
                {
                    "backends": [document(*report) for report in reports],
                    "crossed": [
                        f"backend={queue_db.name} {line}" if several else line
                        for queue_db, _, crossed in reports
                        for line in crossed
                    ],
                }
            )
        )

    def _text(self, backend, health, crossed):
        label = f"backend={backend} " if backend else ""
        self.stdout.write(label + " ".join(f"{k}={v:g}" for k, v in sorted(health.totals.items())))
        for row in health.rows:
            self.stdout.write(
                f"  {row.queue}/{row.task}: ready={row.ready} scheduled={row.scheduled} "
                f"running={row.running} expired={row.expired} retrying={row.retrying} "
                f"dead_letters={row.dead_letters} oldest_ready_age={row.oldest_ready_age:.0f}s"
                + (" PAUSED" if row.paused else "")
            )
        for queue, pause in health.paused.items():
            self.stdout.write(
                f"  {queue}: PAUSED by {pause['paused_by']} at "
                f"{pause['paused_at']:%Y-%m-%d %H:%M:%S %Z}: {pause['reason']!r}"
            )
        for line in crossed:
            self.stderr.write(f"ALERT {label}{line}")
