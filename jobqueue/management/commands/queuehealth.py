import argparse
import json
import operator
import re

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
    help = "Print queue health; with --fail-if, exit 1 when a threshold is crossed (for cron)."
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--fail-if",
            action="append",
            type=condition,
            default=[],
            metavar="EXPR",
            help="e.g. 'oldest_ready_age>300' or 'lost_workers>0' (repeatable).",
        )

    def handle(self, *args, **opts):
        conditions = opts["fail_if"]
        health = snapshot()
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
        if opts["json"]:
            self.stdout.write(json.dumps({**health.as_json(), "crossed": crossed}, default=str))
        else:
            self.stdout.write(" ".join(f"{k}={v:g}" for k, v in sorted(health.totals.items())))
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
                self.stderr.write(f"ALERT {line}")
        if crossed:
            raise SystemExit(1)
