from types import SimpleNamespace

from django.utils import timezone

from jobqueue import store
from jobqueue.management import cli
from jobqueue.models import Job, JobStatus

FIELDS = [
    "id",
    "task_path",
    "queue_name",
    "state",
    "attempts",
    "max_attempts",
    "idempotency_key",
    "run_after",
    "locked_until",
    "locked_by",
    "enqueued_at",
    "finished_at",
]


class Command(cli.Command):
    # A quick shell tool: its output stays one line per result, without system-check noise.
    requires_system_checks = []
    help = "List jobs, newest first."

    def add_arguments(self, parser):
        parser.add_argument("--state", choices=JobStatus.values, default=None)
        parser.add_argument(
            "--task", type=cli.column(Job, "task_path"), default=None, help="Only this task path."
        )
        parser.add_argument(
            "--limit",
            type=cli.integer(1, cli.MAX_LIST_LIMIT),
            default=50,
            help=f"At most this many rows (default 50, at most {cli.MAX_LIST_LIMIT}).",
        )
        parser.add_argument("--json", action="store_true", help="One JSON object per line.")

    def handle(self, *args, **opts):
        now = timezone.now()
        jobs = Job.objects.order_by("-id")
        if opts["state"]:
            jobs = jobs.filter(JobStatus(opts["state"]).q(now))
        if opts["task"]:
            jobs = jobs.filter(task_path=opts["task"])
        limit = opts["limit"]
        # One row past the limit says whether to count the rest (the count is the slow part).
        rows = list(jobs.values(*FIELDS, "errors")[: limit + 1])
        more = jobs.count() - limit if len(rows) > limit else 0
        for row in rows[:limit]:
            errors = row.pop("errors")
            row["last_error"] = errors[-1]["message"] if errors else None
            row["state"] = JobStatus.of(SimpleNamespace(**row), now).value
            if opts["json"]:
                self.stdout.write(cli.json_text(row))
            else:
                self.stdout.write(
                    cli.one_line(
                        f"{row['id']:>8} {row['state']:<9} {row['attempts']}/{row['max_attempts']} "
                        f"{row['task_path']} key={row['idempotency_key'] or '-'}"
                        + (f" error={row['last_error']!r}" if row["last_error"] else "")
                    )
                )
        if more > 0:
            # On stderr under --json, where every stdout line must stay a JSON object.
            (self.stderr if opts["json"] else self.stdout).write(cli.more_rows(more))
        if not rows and not opts["json"]:
            self.stdout.write("no jobs")
        # Paused queues explain ready jobs that do not move (on stderr under --json).
        for queue, pause in store.queues.paused().items():
            (self.stderr if opts["json"] else self.stdout).write(
                f"queue {queue} is PAUSED (by {pause.paused_by}: {pause.reason!r}); "
                f"`manage.py queues resume {queue} …` resumes it"
            )
