import json

from django.core.management.base import BaseCommand

from jobqueue.models import Job, JobState

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


class Command(BaseCommand):
    # A quick shell tool: its output stays one line per result, without system-check noise.
    requires_system_checks = []
    help = "List jobs, newest first."

    def add_arguments(self, parser):
        parser.add_argument("--state", choices=JobState.values, default=None)
        parser.add_argument("--task", default=None, help="Only jobs of this task path.")
        parser.add_argument("--limit", type=int, default=50)
        parser.add_argument("--json", action="store_true", help="One JSON object per line.")

    def handle(self, *args, **opts):
        jobs = Job.objects.order_by("-id")
        if opts["state"]:
            jobs = jobs.filter(state=opts["state"])
        if opts["task"]:
            jobs = jobs.filter(task_path=opts["task"])
        rows = list(jobs.values(*FIELDS, "errors")[: opts["limit"]])
        for row in rows:
            errors = row.pop("errors")
            row["last_error"] = errors[-1]["message"] if errors else None
            if opts["json"]:
                self.stdout.write(json.dumps(row, default=str))
            else:
                self.stdout.write(
                    f"{row['id']:>8} {row['state']:<8} {row['attempts']}/{row['max_attempts']} "
                    f"{row['task_path']} key={row['idempotency_key'] or '-'}"
                    + (f" error={row['last_error']!r}" if row["last_error"] else "")
                )
        if not rows and not opts["json"]:
            self.stdout.write("no jobs")
