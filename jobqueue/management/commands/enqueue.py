import inspect
from datetime import timedelta

from django.db import DataError
from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from jobqueue import store
from jobqueue.backend import load_task
from jobqueue.errors import UnstorableValue
from jobqueue.management import cli
from jobqueue.management.cli import usage_error
from jobqueue.models import Job

MAX_DELAY = 10 * 365 * 24 * 3600.0  # ten years: beyond it, a date arithmetic overflow


def parse_json(option, text, kind):
    try:
        value = store.loads(text, option)
    except UnstorableValue as exc:  # nested past the one depth limit
        raise usage_error(str(exc)) from None
    except ValueError as exc:  # JSONDecodeError, an int too long to read
        raise usage_error(f"{option} is not valid JSON: {exc}") from exc
    if not isinstance(value, kind):
        raise usage_error(f"{option} must be a JSON {'array' if kind is list else 'object'}")
    return value


class Command(cli.Command):
    # A quick shell tool: its output stays one line per result, without system-check noise.
    requires_system_checks = []
    help = "Enqueue a task by its dotted path and print the new (or existing) job id."

    def add_arguments(self, parser):
        parser.add_argument(
            "task_path", type=cli.column(Job, "task_path"), help="Dotted path of a @task function."
        )
        parser.add_argument(
            "--args", dest="task_args", default="[]", help="Positional arguments, a JSON array."
        )
        parser.add_argument(
            "--kwargs", dest="task_kwargs", default="{}", help="Keyword arguments, a JSON object."
        )
        parser.add_argument(
            "--key", type=cli.column(Job, "idempotency_key"), default=None, help="Idempotency key."
        )
        parser.add_argument("--queue", type=cli.column(Job, "queue_name"), default=None)
        parser.add_argument(
            "--priority", type=cli.integer(TASK_MIN_PRIORITY, TASK_MAX_PRIORITY), default=None
        )
        parser.add_argument(
            "--delay",
            type=cli.number(0, MAX_DELAY, unit="seconds"),
            default=None,
            metavar="SECONDS",
        )

    def handle(self, *args, **opts):
        task_args = parse_json("--args", opts["task_args"], list)
        task_kwargs = parse_json("--kwargs", opts["task_kwargs"], dict)
        try:
            task = load_task(opts["task_path"])
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise usage_error(f"unknown task {opts['task_path']!r}: {exc}") from exc
        try:
            # Arguments the task cannot take would only dead-letter later: refuse them now.
            context = [None] if task.takes_context else []
            inspect.signature(task.func).bind(*context, *task_args, **task_kwargs)
        except TypeError as exc:
            raise usage_error(f"arguments do not fit {opts['task_path']}: {exc}") from exc
        try:
            task = task.using(
                queue_name=opts["queue"],
                priority=opts["priority"],
                run_after=timezone.now() + timedelta(seconds=opts["delay"])
                if opts["delay"] is not None
                else None,
                **({"idempotency_key": opts["key"]} if opts["key"] is not None else {}),
            )
            result = task.enqueue(*task_args, **task_kwargs)
        except (InvalidTask, TypeError, ValueError, RecursionError) as exc:
            # The backend's own validation (not JSON, too large or deep, a value the database
            # cannot store such as NUL): its message, whatever the value.
            raise usage_error(str(exc)) from exc
        except DataError as exc:
            # A value a database refuses that validation let through (the insert failed
            # whole, so nothing was written): still the operator's input, not a crash.
            raise usage_error(f"the database refused the job: {exc}") from exc
        self.stdout.write(result.id)
