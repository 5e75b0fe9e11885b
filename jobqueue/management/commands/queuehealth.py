import json
import operator
import re

from django.core.management.base import BaseCommand, CommandError

from jobqueue.health import snapshot

COMPARE = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
}
CONDITION = re.compile(r"^\s*([a-z_0-9]+)\s*(>=|<=|==|>|<)\s*(-?[0-9.]+)\s*$")


class Command(BaseCommand):
    help = "Print queue health; with --fail-if, exit 1 when a threshold is crossed (for cron)."
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--fail-if",
            action="append",
            default=[],
            metavar="EXPR",
            help="e.g. 'oldest_ready_age>300' or 'lost_workers>0' (repeatable).",
        )

    def handle(self, *args, **opts):
        conditions = [self.parse(text) for text in opts["fail_if"]]
        health = snapshot()
        unknown = [name for name, _, _, _ in conditions if name not in health.totals]
        if unknown:
            raise CommandError(
                f"unknown figure {unknown[0]!r}; one of: {', '.join(sorted(health.totals))}",
                returncode=2,
            )
        crossed = [
            f"{name}={health.totals[name]:g} {op} {limit:g}"
            for name, op, compare, limit in conditions
            if compare(health.totals[name], limit)
        ]
        if opts["json"]:
            self.stdout.write(json.dumps({**health.as_json(), "crossed": crossed}, default=str))
        else:
            self.stdout.write(" ".join(f"{k}={v:g}" for k, v in sorted(health.totals.items())))
            for row in health.rows:
                self.stdout.write(
                    f"  {row.queue}/{row.task}: ready={row.ready} scheduled={row.scheduled} "
                    f"running={row.running} expired={row.expired} retrying={row.retrying} "
                    f"dead_letters={row.dead_letters} oldest_ready_age={row.oldest_ready_age:.0f}s"
                )
            for line in crossed:
                self.stderr.write(f"ALERT {line}")
        if crossed:
            raise SystemExit(1)

    def parse(self, text):
        match = CONDITION.match(text)
        if not match:
            raise CommandError(f"cannot read --fail-if {text!r}: write NAME>NUMBER", returncode=2)
        name, op, limit = match.groups()
        return name, op, COMPARE[op], float(limit)
