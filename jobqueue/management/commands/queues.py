"""`manage.py queues`: list queues; `pause` and `resume` are aliases of `manage.py act
queue.pause|queue.resume`, the registry's actions (found by name when run: the engine never
imports the console), so they check the same permissions, say the same and audit the same."""

from jobqueue import store
from jobqueue.health import snapshot
from jobqueue.management import cli
from jobqueue.models import UNFINISHED, PausedQueue

# A queue's live figures: its jobs not finished, by state (jobqueue.models.JobStatus).
LIVE = tuple(status.value for status in UNFINISHED)


class Command(cli.Command):
    requires_system_checks = []
    help = "List queues, and pause or resume one (`manage.py act queue.pause|resume`, audited)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        listing = sub.add_parser("list", help="Queues with live jobs or paused, and their state.")
        listing.add_argument("--json", action="store_true", help="One JSON array of objects.")
        for name, verb in (("pause", "Stop every worker claiming from"), ("resume", "Resume")):
            each = sub.add_parser(
                name,
                help=f"{verb} a queue (running jobs finish); as `manage.py act queue.{name}`.",
            )
            each.add_argument("queue", type=cli.column(PausedQueue, "queue_name"))
            cli.add_act_arguments(each, f"queue.{name}")
            each.add_argument(
                "--backend",
                type=cli.text(),
                default=None,
                help="The Redrive TASKS backend whose queue it is (default: the default one).",
            )
            if name == "pause":
                each.add_argument(
                    "--allow-unknown",
                    action="store_true",
                    help="Pause a queue that has no jobs yet and is configured nowhere.",
                )

    def handle(self, *args, **opts):
        if opts["command"] == "list":
            return self._list(opts["json"])
        # An alias of `manage.py act queue.pause|queue.resume` (the registry's action): the
        # same permission check, messages, audit entry and --json outcome.
        argv = [cli.act_option("queue", opts["queue"])]
        if opts.get("allow_unknown"):
            argv.append("--allow-unknown")
        if opts["backend"]:
            argv.append(cli.act_option("backend", opts["backend"]))
        argv += [
            cli.act_option("reason", opts["reason"]),
            cli.act_option("operator", opts["operator"]),
        ]
        if opts["json"]:
            argv.append("--json")
        cli.act(self, f"queue.{opts['command']}", *argv)

    def _list(self, as_json):
        # The health snapshot's figures, summed per queue (it counts by queue and task).
        health = snapshot()
        live: dict[str, dict] = {}
        for row in health.rows:
            figures = live.setdefault(row.queue, dict.fromkeys(LIVE, 0))
            for status in LIVE:
                figures[status] += getattr(row, status)
        paused = store.queues.paused()
        limits = store.rate_limits()
        names = sorted({q for q, f in live.items() if any(f.values())} | set(paused) | set(limits))
        rows = []
        for name in names:
            figures = live.get(name, dict.fromkeys(LIVE, 0))
            pause = paused.get(name)
            row = {
                "queue": name,
                "paused": pause is not None,
                "rate_limit": limits.get(name),
                **figures,
                "paused_by": pause.paused_by if pause else None,
                "paused_at": pause.paused_at.isoformat() if pause else None,
                "reason": pause.reason if pause else None,
            }
            rows.append(row)
            if not as_json:
                state = f"PAUSED by {pause.paused_by}: {pause.reason!r}" if pause else "running"
                if name in limits:
                    state += f", at most {limits[name]:g} jobs/s"
                self.stdout.write(
                    cli.one_line(
                        f"{name:<24} "
                        + " ".join(f"{status}={row[status]}" for status in LIVE)
                        + f"  {state}"
                    )
                )
        if as_json:
            self.write_json_rows(rows)
        elif not names:
            self.stdout.write("no queues with live jobs, none paused")
