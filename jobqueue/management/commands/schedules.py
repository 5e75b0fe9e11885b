"""`manage.py schedules`: list, show and sync periodic jobs; `pause`, `resume` and `run` are
aliases of `manage.py act schedule.pause|resume|run`, the registry's actions (found by name when
run: the engine never imports the console), so they check, say and audit the same."""

from django.db.models import F

from jobqueue import schedules
from jobqueue.management import cli
from jobqueue.models import Job, Schedule, ScheduleRun


class Command(cli.Command):
    requires_system_checks = []
    help = (
        "List periodic jobs or show one; pause, resume or run one now (audited); sync declarations."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        listing = sub.add_parser("list", help="Every schedule: cron, next and last run, state.")
        listing.add_argument("--json", action="store_true", help="One JSON array of objects.")
        show = sub.add_parser("show", help="One schedule, with its last ticks (newest first).")
        show.add_argument("schedule", type=cli.column(Schedule, "name"))
        show.add_argument(
            "--runs",
            type=cli.integer(1, cli.MAX_LIST_LIMIT),
            default=10,
            help=f"At most this many ticks (default 10, at most {cli.MAX_LIST_LIMIT}).",
        )
        show.add_argument("--json", action="store_true", help="One JSON object.")
        sub.add_parser(
            "sync",
            help="Write the declared schedules (@periodic) to the database and retire rows no "
            "longer declared (workers sync at start, without retiring).",
        )
        for name, verb in (
            ("pause", "Stop ticking"),
            ("resume", "Resume ticking (missed ticks follow its catch_up)"),
            ("run", "Enqueue a run now, outside the ticks"),
        ):
            each = sub.add_parser(
                name, help=f"{verb}: a schedule; as `manage.py act schedule.{name}`."
            )
            each.add_argument("schedule", type=cli.column(Schedule, "name"))
            cli.add_act_arguments(each, f"schedule.{name}")

    def handle(self, *args, **opts):
        command = opts["command"]
        if command == "list":
            return self._list(opts["json"])
        if command == "show":
            return self._show(opts)
        if command == "sync":
            return self._sync()
        # An alias of `manage.py act schedule.pause|resume|run` (the registry's action): the
        # same permission check, messages, audit entry and --json outcome.
        argv = [
            cli.act_option("schedule", opts["schedule"]),
            cli.act_option("reason", opts["reason"]),
            cli.act_option("operator", opts["operator"]),
        ]
        if opts["json"]:
            argv.append("--json")
        cli.act(self, f"schedule.{command}", *argv)

    def _sync(self):
        try:
            report = schedules.sync(retire=True)
        except (ImportError, TypeError, ValueError) as exc:
            raise cli.CommandError(f"a periodic job cannot be declared: {exc}") from None
        for change, names in report.items():
            for name in names:
                self.stdout.write(f"{change} {name}")
        if not any(report.values()):
            self.stdout.write("schedules up to date")

    def _list(self, as_json):
        rows = Schedule.objects.order_by("name").annotate(last_state=F("last_job__state"))
        states = dict(Job._meta.get_field("state").choices)
        if as_json:
            self.write_json_rows(schedule_summary(schedule) for schedule in rows)
            return
        any_rows = False
        for schedule in rows:
            any_rows = True
            row = schedule_summary(schedule)
            last = (
                f"last {row['last_tick_at']} ({states.get(row['last_state'], 'no job')})"
                if row["last_tick_at"]
                else "never run"
            )
            self.stdout.write(
                cli.one_line(
                    f"{row['name']:<32} {row['cron']:<16} {row['timezone']:<12} "
                    f"next {row['next_run_at']}  {last}  {row['state'].upper()}"
                    + (
                        f" by {row['paused_by']}: {row['pause_reason']!r}"
                        if row["paused_by"]
                        else ""
                    )
                )
            )
        if not any_rows:
            self.stdout.write("no schedules (declare one with @periodic, then sync)")

    def _show(self, opts):
        name = opts["schedule"]
        schedule = (
            Schedule.objects.filter(name=name).annotate(last_state=F("last_job__state")).first()
        )
        if schedule is None:
            raise cli.usage_error(f"no schedule {name!r} (`manage.py schedules list` lists them)")
        runs = (
            ScheduleRun.objects.filter(schedule=schedule)
            .order_by("-at", "-id")
            .annotate(job_state=F("job__state"))[: opts["runs"]]
        )
        data = {
            **schedule_summary(schedule),
            "runs": [
                {
                    "id": run.id,
                    "tick": run.tick,
                    "at": run.at,
                    "outcome": run.outcome,
                    "job_id": run.job_id,
                    "job_state": run.job_state,
                    "note": run.note or None,
                }
                for run in runs
            ],
        }
        if opts["json"]:
            self.stdout.write(cli.json_text(data))
            return
        for key, value in data.items():
            if key != "runs":
                self.stdout.write(cli.one_line(f"{key}: {'-' if value is None else value}"))
        self.stdout.write(f"runs ({len(data['runs'])}):" if data["runs"] else "no runs recorded")
        for run in data["runs"]:
            made = f" job {run['job_id']} ({run['job_state'] or 'gone'})" if run["job_id"] else ""
            note = f": {run['note']}" if run["note"] else ""
            self.stdout.write(
                cli.one_line(
                    f"  tick {run['tick'].isoformat()} at {run['at'].isoformat()} "
                    f"{run['outcome']}{made}{note}"
                )
            )


def schedule_summary(schedule: Schedule) -> dict:
    """A schedule as `list --json` prints it."""
    return {
        "id": schedule.pk,
        "name": schedule.name,
        "task": schedule.task_path,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "overlap": schedule.overlap,
        "catch_up": schedule.catch_up,
        "next_run_at": schedule.next_run_at.isoformat(),
        "last_tick_at": schedule.last_tick_at.isoformat() if schedule.last_tick_at else None,
        "last_job_id": schedule.last_job_id,
        "last_state": getattr(schedule, "last_state", None),
        "state": "retired"
        if not schedule.declared
        else "paused"
        if schedule.paused_at
        else "active",
        "paused_by": schedule.paused_by or None,
        "pause_reason": schedule.pause_reason or None,
    }
