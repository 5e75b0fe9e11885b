"""Workflows from the shell: list them, show one with its steps, send one a signal.

A step's result may hold anything its function returned (a token, a customer's address), and
the only masking helper (deadletters.redaction) belongs to the console, which this app never
imports: `show` prints a result's shape (type, keys, size) and the values only with --results.
A dead workflow is replayed through its dead letter (`manage.py deadletters replay`), which
resumes it at the step it died at; this command has no replay of its own.

`signal` is an alias of `manage.py act workflow.signal`, the registry's action, found by name
when it runs (this app never imports the console): the same permission check (`act list` names
it), validation, messages and `--json` outcome, and a delivered signal is the registry's one
audit entry, channel `cli`, with the payload masked as the console masks it. Without the console
app installed it refuses, naming `act` (docs/architecture.md).
"""

from jobqueue.management import cli
from jobqueue.management.cli import described, summary
from jobqueue.models import (
    MAX_ID,
    DeadLetter,
    DeadLetterState,
    Job,
    Workflow,
    WorkflowSignal,
    WorkflowState,
    WorkflowStep,
)

WORKFLOW_ID = cli.integer(1, MAX_ID, "a workflow id")
LIST_FIELDS = [
    "id",
    "task_path",
    "state",
    "step",
    "wake_at",
    "waiting_for",
    "job_id",
    "started_at",
    "updated_at",
]


class Command(cli.Command):
    # A quick shell tool: its output stays one line per result, without system-check noise.
    requires_system_checks = []
    help = "List workflows, show one with its steps, or send one a signal."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)

        listing = sub.add_parser("list", help="Workflows, the most recently changed first.")
        listing.add_argument("--state", choices=WorkflowState.values, default=None)
        listing.add_argument(
            "--limit",
            type=cli.integer(1, cli.MAX_LIST_LIMIT),
            default=50,
            help=f"At most this many rows (default 50, at most {cli.MAX_LIST_LIMIT}).",
        )
        listing.add_argument("--json", action="store_true", help="One JSON array of objects.")

        show = sub.add_parser("show", help="One workflow with its steps, in the order they ran.")
        show.add_argument("id", type=WORKFLOW_ID)
        show.add_argument("--json", action="store_true", help="One JSON object.")
        show.add_argument(
            "--results",
            action="store_true",
            help="Print what steps returned and signals carried (they may hold secrets); "
            "without it only their type, keys and size.",
        )

        signal = sub.add_parser(
            "signal",
            help="Send an event to a workflow: its wait_for(EVENT) returns the payload (once); "
            "as `manage.py act workflow.signal`.",
        )
        signal.add_argument("id", type=WORKFLOW_ID)
        signal.add_argument("event", type=cli.column(WorkflowSignal, "name"))
        signal.add_argument(
            "--payload", default=None, help="What wait_for returns, as JSON (default {})."
        )
        cli.add_act_arguments(signal, "workflow.signal")

    def handle(self, *args, **opts):
        return getattr(self, f"do_{opts['command']}")(opts)

    # --- list ------------------------------------------------------------------------------

    def do_list(self, opts):
        found = Workflow.objects.order_by("-updated_at", "-id")
        if opts["state"]:
            found = found.filter(state=opts["state"])
        limit = opts["limit"]
        # One row past the limit says whether to count the rest (the count is the slow part).
        rows = list(found.values(*LIST_FIELDS)[: limit + 1])
        more = found.count() - limit if len(rows) > limit else 0
        if opts["json"]:
            self.write_json_rows(listed(row) for row in rows[:limit])
        else:
            for row in rows[:limit]:
                parts = [f"{row['id']:>8} {row['state']:<8} {row['task_path']}"]
                parts += [
                    f"step={quoted(row['step'])}",
                    waiting(row),
                    f"job={row['job_id'] or '-'}",
                ]
                self.stdout.write(cli.one_line(" ".join(part for part in parts if part)))
        if more > 0:
            # On stderr under --json, where stdout holds the one JSON document.
            (self.stderr if opts["json"] else self.stdout).write(cli.more_rows(more))
        if not rows and not opts["json"]:
            self.stdout.write("no workflows")

    # --- show ------------------------------------------------------------------------------

    def do_show(self, opts):
        workflow = Workflow.objects.filter(pk=opts["id"]).first()
        if workflow is None:
            raise missing(opts["id"])
        job_state = (
            Job.objects.filter(pk=workflow.job_id).values_list("state", flat=True).first()
            if workflow.job_id
            else None
        )
        letter = (
            DeadLetter.objects.filter(
                source="jobqueue", original_job_id=workflow.pk, task_path=workflow.task_path
            )
            .order_by("-id")
            .values("id", "state")
            .first()
        )
        steps = list(WorkflowStep.objects.filter(workflow=workflow).order_by("id"))
        signals = list(WorkflowSignal.objects.filter(workflow=workflow).order_by("sent_at", "id"))
        reveal = opts["results"]
        data = {
            **listed({name: getattr(workflow, name) for name in LIST_FIELDS}),
            "job_state": job_state,
            "dead_letter": letter,
            "steps": [step_data(s, reveal) for s in steps],
            "signals": [
                {
                    "name": s.name,
                    "sent_at": s.sent_at.isoformat(),
                    **shown("payload", s.payload, reveal),
                }
                for s in signals
            ],
        }
        if opts["json"]:
            self.stdout.write(cli.json_text(data))
            return
        self._print_show(data, reveal)

    def _print_show(self, data, reveal):
        write = self.stdout.write
        write(f"workflow {data['id']} {data['task_path']}")
        write(f"  state    {data['state']}" + (f" {waiting(data)}" if waiting(data) else ""))
        if data["step"]:
            write(f"  step     {quoted(data['step'])}")
        job = data["job_id"]
        write(f"  job      {job} ({data['job_state'] or 'gone'})" if job else "  job      -")
        write(f"  started  {data['started_at']}")
        write(f"  updated  {data['updated_at']}")
        letter = data["dead_letter"]
        if letter:
            write(f"  letter   {letter['id']} ({letter['state']})")
            if data["state"] == WorkflowState.DEAD and letter["state"] == DeadLetterState.PENDING:
                write(
                    f"  replay   manage.py deadletters replay {letter['id']} --reason … "
                    f"--operator …  (resumes at step {quoted(data['step'])})"
                )
        write(f"steps ({len(data['steps'])}):" if data["steps"] else "no steps recorded yet")
        for n, step in enumerate(data["steps"], 1):
            times = f"started={step['started_at']}"
            if step["finished_at"]:
                times += f" finished={step['finished_at']}"
            if step["wake_at"]:
                times += f" wake_at={step['wake_at']}"
            write(
                f"  {n:>3}. {quoted(step['name'])} [{step['kind']}] {step['state']} "
                f"attempts={step['attempts']} {times}"
            )
            if step.get("progress"):
                p = step["progress"]
                write(
                    f"       progress {p['next']}/{p['total']} done={p['done']} "
                    f"failed={p['failed']} letters={p['dead_letters'] or '-'}"
                )
            if "result" in step:
                write(f"       result {cli.json_text(step['result'])}")
            elif step["result_summary"] is not None and "progress" not in step:
                write(f"       result {described(step['result_summary'])}")
            if step["last_error"]:
                error = step["last_error"]
                write(f"       error  {error['class']}: {one_line(error['message'])}")
        for s in data["signals"]:
            payload = (
                cli.json_text(s["payload"]) if "payload" in s else described(s["payload_summary"])
            )
            write(f"signal {quoted(s['name'])} sent {s['sent_at']}: {payload}")
        if not reveal and (
            any(s["result_summary"] is not None for s in data["steps"]) or data["signals"]
        ):
            write("(values hidden: --results prints them)")

    # --- signal ----------------------------------------------------------------------------

    def do_signal(self, opts):
        """An alias of `manage.py act workflow.signal` (the registry's action, found by name
        when run): the same permission check, validation, messages, audit entry (the payload
        masked as the console masks it) and --json outcome."""
        argv = [
            cli.act_option("workflow", opts["id"]),
            cli.act_option("event", opts["event"]),
        ]
        if opts["payload"] is not None:
            argv.append(cli.act_option("payload", opts["payload"]))
        argv += [
            cli.act_option("reason", opts["reason"]),
            cli.act_option("operator", opts["operator"]),
        ]
        if opts["json"]:
            argv.append("--json")
        cli.act(self, "workflow.signal", *argv)


# --- formatting ----------------------------------------------------------------------------


def missing(workflow_id: int) -> cli.CommandError:
    """No workflow by that id; say so when a job has it, whose workflow has not begun yet."""
    hint = ""
    if Job.objects.filter(pk=workflow_id).exists():
        hint = (
            f" (job {workflow_id} exists: a workflow's record begins at its first step, "
            "so it has not run one yet, or its task is not a workflow)"
        )
    return cli.usage_error(f"no workflow {workflow_id}{hint}")


def iso(value):
    return value.isoformat() if value is not None else None


def listed(row: dict) -> dict:
    """A workflow as `list --json` prints it."""
    return {
        "id": row["id"],
        "task_path": row["task_path"],
        "state": row["state"],
        "step": row["step"] or None,
        "wake_at": iso(row["wake_at"]),
        "waiting_for": row["waiting_for"] or None,
        "job_id": row["job_id"],
        "started_at": iso(row["started_at"]),
        "updated_at": iso(row["updated_at"]),
    }


def waiting(row: dict) -> str:
    """What a sleeping or waiting workflow waits for, or a step's retry time."""
    wake_at = row["wake_at"]
    wake_at = wake_at if isinstance(wake_at, str) or wake_at is None else wake_at.isoformat()
    if row["waiting_for"]:
        return f"waiting_for={quoted(row['waiting_for'])} until={wake_at}"
    return f"wake_at={wake_at}" if wake_at else ""


def quoted(name) -> str:
    """A step or event name (any text but NUL), quoted so one stays on one line."""
    return repr(name) if name else "-"


def one_line(text: str) -> str:
    return text if text.isprintable() else repr(text)


def shown(name: str, value, reveal: bool) -> dict:
    return {name: value} if reveal else {f"{name}_summary": summary(value)}


def step_data(step: WorkflowStep, reveal: bool) -> dict:
    last = step.errors[-1] if step.errors else None
    data = {
        "name": step.name,
        "kind": step.kind,
        "state": step.state,
        "attempts": step.attempts,
        "started_at": iso(step.started_at),
        "finished_at": iso(step.finished_at),
        "wake_at": iso(step.wake_at),
        "last_error": {
            "class": last.get("exception_class_path", ""),
            "message": last.get("message", ""),
            "at": last.get("at"),
        }
        if last
        else None,
    }
    if step.kind == WorkflowStep.Kind.BATCH and isinstance(step.result, dict):
        # A batch's result is the queue's own bookkeeping (counts, letters), not a value.
        r = step.result
        data["progress"] = {
            key: r.get(key) for key in ("total", "next", "done", "failed", "dead_letters")
        }
    return data | shown("result", step.result, reveal)
