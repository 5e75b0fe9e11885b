from django.db.models import F

from jobqueue import schedules, store
from jobqueue.management import cli
from jobqueue.models import Job, Schedule

PERMISSION = "jobqueue.manage_schedule"


class Command(cli.Command):
    requires_system_checks = []
    help = "List periodic jobs; pause, resume or run one now (audited); sync declarations."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        listing = sub.add_parser("list", help="Every schedule: cron, next and last run, state.")
        listing.add_argument("--json", action="store_true", help="One JSON object per line.")
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
            each = sub.add_parser(name, help=f"{verb}: a schedule.")
            each.add_argument("schedule", type=cli.column(Schedule, "name"))
            cli.add_audit_arguments(each, PERMISSION)

    def handle(self, *args, **opts):
        command = opts["command"]
        if command == "list":
            return self._list(opts["json"])
        if command == "sync":
            return self._sync()
        operator = cli.operator(opts["operator"], PERMISSION).get_username()
        name, reason = opts["schedule"], opts["reason"]
        try:
            if command == "run":
                job = schedules.run_now(name, actor=operator, reason=reason, channel="cli")
                self.stdout.write(f"{name}: job {job.pk} enqueued")
                return
            change = store.schedules.pause if command == "pause" else store.schedules.resume
            changed = change(name, actor=operator, reason=reason, channel="cli")
        except ValueError as exc:
            raise cli.usage_error(exc) from None
        state = "paused" if command == "pause" else "running"
        self.stdout.write(f"{name} {state}" if changed else f"{name} was already {state}")

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
        any_rows = False
        for schedule in rows:
            any_rows = True
            row = schedule_summary(schedule)
            if as_json:
                self.stdout.write(cli.json_text(row))
                continue
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
        if not any_rows and not as_json:
            self.stdout.write("no schedules (declare one with @periodic, then sync)")


def schedule_summary(schedule: Schedule) -> dict:
    """A schedule as `list --json` prints it."""
    return {
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
