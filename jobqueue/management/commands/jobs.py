"""`manage.py jobs`: list jobs, show one; `run-now` and `cancel` are aliases of the registry's
bulk actions `jobs.run_now` and `jobs.cancel` (`manage.py act`, found by name when run: the
engine never imports the console), frozen and confirmed in one command."""

import argparse
import io
import json
from datetime import datetime
from types import SimpleNamespace

from django.db.models import Q
from django.utils import timezone

from jobqueue import store
from jobqueue.management import cli
from jobqueue.models import MAX_ID, DeadLetter, Job, JobStatus

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


JOB_ID = cli.integer(1, MAX_ID, "a job id")


class Command(cli.Command):
    # A quick shell tool: its output stays one line per result, without system-check noise.
    requires_system_checks = []
    help = (
        "List jobs, newest first; show one; or run queued ones now, or cancel them "
        "(`manage.py act jobs.run_now|jobs.cancel`, audited)."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=False)
        for name, verb in (("run-now", "Make these waiting jobs due now"), ("cancel", "Cancel")):
            action = f"jobs.{name.replace('-', '_')}"
            each = sub.add_parser(
                name,
                help=f"{verb} (only jobs not started; running ones are left alone); as "
                f"`manage.py act {action} --ids ...` then `act confirm`.",
            )
            each.add_argument("ids", nargs="+", type=JOB_ID, help="Job ids.")
            cli.add_act_arguments(each, action, json=False)
            each.add_argument(
                "--backend",
                type=cli.text(),
                default=None,
                help="The Redrive TASKS backend whose jobs they are (default: the default one).",
            )
            # No default of its own: `jobs --json cancel ID` keeps the --json given before it.
            each.add_argument(
                "--json",
                action="store_true",
                default=argparse.SUPPRESS,
                help="The outcome as one JSON object, as `manage.py act confirm --json` prints it.",
            )
        show = sub.add_parser(
            "show",
            help="One job: its state, times, failed attempts, and its arguments' shape (type, "
            "keys, size; the console shows them masked).",
        )
        show.add_argument("id", type=JOB_ID)
        # No default of its own: `jobs --json show ID` keeps the --json given before it.
        show.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="One JSON object."
        )
        listing = sub.add_parser("list", help="Jobs, newest first (as `jobs` alone).")
        defaults = {"state": None, "task": None, "limit": 50, "json": False}
        # The sub-command's options have no defaults of their own, so that `jobs --state done
        # list` keeps the --state given before it.
        for each, default in (
            (parser, defaults),
            (listing, dict.fromkeys(defaults, argparse.SUPPRESS)),
        ):
            each.add_argument("--state", choices=JobStatus.values, default=default["state"])
            each.add_argument(
                "--task",
                type=cli.column(Job, "task_path"),
                default=default["task"],
                help="Only this task path.",
            )
            each.add_argument(
                "--limit",
                type=cli.integer(1, cli.MAX_LIST_LIMIT),
                default=default["limit"],
                help=f"At most this many rows (default 50, at most {cli.MAX_LIST_LIMIT}).",
            )
            each.add_argument(
                "--json",
                action="store_true",
                default=default["json"],
                help="One JSON array of objects.",
            )

    def handle(self, *args, **opts):
        if opts.get("command") == "show":
            return self._show(opts)
        if opts.get("command") not in (None, "list"):
            return self._act(opts)
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
        rows = [listed(row, now) for row in rows[:limit]]
        if opts["json"]:
            self.write_json_rows(rows)
        else:
            for row in rows:
                self.stdout.write(
                    cli.one_line(
                        f"{row['id']:>8} {row['state']:<9} "
                        f"{row['attempts']}/{row['max_attempts']} "
                        f"{row['task_path']} key={row['idempotency_key'] or '-'}"
                        + (f" error={row['last_error']!r}" if row["last_error"] else "")
                    )
                )
        if more > 0:
            # On stderr under --json, where stdout holds the one JSON document.
            (self.stderr if opts["json"] else self.stdout).write(cli.more_rows(more))
        if not rows and not opts["json"]:
            self.stdout.write("no jobs")
        # Paused queues explain ready jobs that do not move (on stderr under --json).
        for queue, pause in store.queues.paused().items():
            (self.stderr if opts["json"] else self.stdout).write(
                f"queue {queue} is PAUSED (by {pause.paused_by}: {pause.reason!r}); "
                f"`manage.py queues resume {queue} …` resumes it"
            )

    def _show(self, opts):
        job = Job.objects.filter(pk=opts["id"]).defer("return_value").first()
        if job is None:
            raise cli.usage_error(f"no job {opts['id']}")
        now = timezone.now()
        errors = job.errors if isinstance(job.errors, list) else []
        data = {
            **listed({name: getattr(job, name) for name in FIELDS} | {"errors": errors}, now),
            "priority": job.priority,
            "backend": job.backend,
            "started_at": job.started_at,
            "last_attempted_at": job.last_attempted_at,
            "replayed_from": job.replayed_from_id,
            "dead_letter": DeadLetter.objects.filter(Q(original_job_id=job.pk) | Q(job_id=job.pk))
            .order_by("id")
            .values_list("id", flat=True)
            .first(),
            "args_summary": cli.summary(job.args),
            "kwargs_summary": cli.summary(job.kwargs),
            # What each failed attempt left, without its traceback (the console shows those).
            "attempts_failed": [
                {
                    "attempt": e.get("attempt", n),
                    "at": e.get("at"),
                    "worker": e.get("worker_id"),
                    "class": e.get("exception_class_path", ""),
                    "message": e.get("message", ""),
                }
                for n, e in enumerate(errors, start=1)
                if isinstance(e, dict)
            ],
        }
        if opts["json"]:
            self.stdout.write(cli.json_text(data))
            return
        for key, value in data.items():
            if key == "attempts_failed":
                for each in value:
                    self.stdout.write(
                        cli.one_line(
                            f"attempt {each['attempt']} at {each['at']} on {each['worker']}: "
                            f"{each['class']}: {each['message']}"
                        )
                    )
                continue
            if key.endswith("_summary"):
                value = cli.described(value)
            elif isinstance(value, datetime):
                value = value.isoformat()
            self.stdout.write(cli.one_line(f"{key}: {'-' if value is None else value}"))

    def _act(self, opts):
        """An alias of the registry's bulk action `jobs.run_now` or `jobs.cancel`, both of its
        steps in one command, as `manage.py act jobs.run_now --ids ...` then `act confirm`:
        the same permission check, messages, audit entries and --json outcome."""
        verb = "run_now" if opts["command"] == "run-now" else "cancel"
        operator = cli.act_option("operator", opts["operator"])
        select = ["--ids", *(str(pk) for pk in dict.fromkeys(opts["ids"]))]
        if opts["backend"]:
            select.append(cli.act_option("backend", opts["backend"]))
        frozen = io.StringIO()
        cli.act(self, f"jobs.{verb}", *select, operator, "--json", stdout=frozen)
        selection = json.loads(frozen.getvalue())["selection"]
        confirm = [str(selection), cli.act_option("reason", opts["reason"]), operator]
        if opts["json"]:
            confirm.append("--json")
        cli.act(self, "confirm", *confirm)


def listed(row: dict, now) -> dict:
    """A job as `jobs --json` lists it: FIELDS, its last error's message, its derived state."""
    errors = row.pop("errors")
    last = errors[-1] if isinstance(errors, list) and errors else None
    row["last_error"] = last.get("message") if isinstance(last, dict) else None
    row["state"] = JobStatus.of(SimpleNamespace(**row), now).value
    return row
