"""Console parity for incidents without a browser: the same selectors, services and audit.

`replay`, `discard` and `approve` are aliases of `manage.py act` (the registry's
`letters.replay|discard` and `confirm`, `run.approve`): its checks, refusals, messages, audit
entries and --json outcome. What they add is the run carried out in this process afterwards,
with its progress printed, as they always did.
"""

import argparse
import contextlib
import io
import json
import os

from django.core.management import CommandError
from django.db import transaction

from deadletters import (
    conf,
    databases,
    exports,
    redaction,
    selectors,
    services,
    summaries,
    timefilter,
)
from deadletters.forms import FilterForm, refusal
from deadletters.models import Action, ReplayRun, RunState
from deadletters.roles import EXPORT, VIEW
from jobqueue.conf import setting
from jobqueue.management import cli
from jobqueue.management.cli import usage_error
from jobqueue.models import MAX_ID, DeadLetter, DeadLetterState
from jobqueue.store import Among, sources

LIST_FIELDS = [
    "id",
    "source",
    "task_path",
    "queue_name",
    "state",
    "error_class",
    "attempts",
    "replays",
    "dead_lettered_at",
]
# The filter options, as ListFilter fields.
FILTERS = ("job_type", "error_class", "queue", "source")
LETTER_ID = cli.integer(1, MAX_ID, "a dead-letter id")
# Causes a listing names at most: each is a few index probes, and a type's real causes are few.
MAX_CAUSES = 1_000


def backend(text):
    """A Redrive TASKS backend's name (read when the command runs): the database it names."""
    found = databases.named(text)
    if found is None:
        names = ", ".join(b.name for b in databases.backends())
        raise argparse.ArgumentTypeError(
            f"no Redrive TASKS backend {text[:100]!r} (backends: {names})"
        )
    return found.database


def backend_name(database: str) -> str:
    """The filter's `backend` for the letters of `database`: "" for the default backend's, as
    the console records it."""
    found = databases.of_database(database)
    return "" if found is None or found.is_default else found.name


def time_bound(*, end: bool):
    """An argparse type: --since/--until as every time filter reads them (deadletters.timefilter:
    a day, a time, 1h, deploy, ...)."""

    def parse(text: str) -> timefilter.Bound:
        try:
            return timefilter.parse(text, end=end)
        except timefilter.BadBound as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


BOUNDS = ("since", "until")


def bounds_of(opts) -> dict:
    """The --since/--until given, as the filter's moments."""
    return {name: opts[name].at for name in BOUNDS if opts.get(name)}


def rate(text):
    try:
        return conf.validate_replay_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


CANARY_SIZE = cli.integer(0, conf.MAX_CANARY_SIZE, "a whole number of items")
CANARY_SHARE = cli.number(0.0, 1.0)


class Command(cli.Command):
    help = "Browse, replay and discard dead letters from the command line."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        self._read_arguments(sub)
        self._run_arguments(sub)
        self._export_arguments(sub)
        self._approve_arguments(sub)
        self._sync_arguments(sub)

    def _read_arguments(self, sub):
        """list, types, causes, show."""
        listing = sub.add_parser("list", help="Dead letters, newest first.")
        self._filters(listing)
        listing.add_argument("--state", choices=DeadLetterState.values, default=None)
        listing.add_argument(
            "--limit",
            type=cli.integer(1, cli.MAX_LIST_LIMIT),
            default=50,
            help=f"At most this many rows (default 50, at most {cli.MAX_LIST_LIMIT}).",
        )
        listing.add_argument("--json", action="store_true", help="One JSON array of objects.")

        types = sub.add_parser(
            "types", help="Pending dead letters by job type, most first (the console's overview)."
        )
        types.add_argument("--json", action="store_true", help="One JSON array of objects.")
        causes = sub.add_parser(
            "causes", help="A job type's pending dead letters by cause (error fingerprint)."
        )
        causes.add_argument("job_type", type=cli.column(DeadLetter, "task_path"))
        causes.add_argument(
            "--limit",
            type=cli.integer(1, MAX_CAUSES),
            default=20,
            help=f"At most this many causes (default 20, at most {MAX_CAUSES}).",
        )
        causes.add_argument("--json", action="store_true", help="One JSON array of objects.")
        for each in (types, causes):
            each.add_argument(
                "--backend",
                type=backend,
                default="default",
                help="The TASKS backend whose letters to count (default: the default one).",
            )

        show = sub.add_parser("show", help="One dead letter with its errors and history.")
        show.add_argument("id", type=LETTER_ID)
        show.add_argument(
            "--backend",
            type=backend,
            default="default",
            help="The TASKS backend whose database holds the letter (default: the default one).",
        )
        show.add_argument("--json", action="store_true", help="One JSON object.")
        show.add_argument(
            "--reveal",
            action="store_true",
            help="Show masked values unmasked (needs --operator with the permission; audited).",
        )
        show.add_argument("--operator", help="Username the reveal is recorded under.")

    def _run_arguments(self, sub):
        """replay and discard: aliases of `act letters.replay|discard` then `act confirm`."""
        for name in ("replay", "discard"):
            act = sub.add_parser(
                name,
                help=f"{name.title()} by id or by filter (audited): as `manage.py act "
                f"letters.{name}` then `act confirm`, then the run carried out here.",
                description=f"An alias of `manage.py act letters.{name}` (the ids, or "
                "--select-all of the filter's pending letters, the oldest --limit first) then "
                "`act confirm`, in one transaction: the same permission checks, refusals, "
                "messages, audit entry and --json outcome. Then the run is carried out in this "
                "process, at its rate, with its progress printed (on stderr under --json), "
                "beside the background runner the confirm queues, which finds the run done. "
                "--dry-run keeps the frozen selection and prints its preview: "
                "`manage.py act confirm ID` carries it out.",
            )
            act.add_argument("ids", nargs="*", type=LETTER_ID)
            self._filters(act)
            act.add_argument(
                "--limit",
                # The largest selection a run may freeze, read when the command runs.
                type=cli.integer(1, lambda: setting("MAX_SELECTION")),
                help="Required with a filter: at most N items, the oldest pending first.",
            )
            cli.add_act_arguments(act, f"letters.{name}")
            act.add_argument(
                "--dry-run",
                action="store_true",
                help="Freeze and preview only (as `manage.py act letters.ACTION`).",
            )
            if name == "replay":
                act.add_argument(
                    "--rate",
                    type=rate,
                    default=None,
                    metavar="ITEMS_PER_SECOND",
                    help="Pace of the run (default REDRIVE['REPLAY_RATE']; 0 unlimited).",
                )
                act.add_argument(
                    "--allow-poisoned",
                    action="store_true",
                    help="Also replay items past the poison limit (needs the permission).",
                )
                act.add_argument(
                    "--to-queue",
                    default=None,
                    metavar="QUEUE",
                    help="Send the replayed jobs to this queue instead of each letter's own "
                    "(jobqueue letters only; a queue no worker or setting names needs "
                    "--allow-unknown-queue).",
                )
                act.add_argument(
                    "--allow-unknown-queue",
                    action="store_true",
                    help="Let --to-queue name a queue no worker has taken from and no setting "
                    "names yet.",
                )
                act.add_argument(
                    "--canary",
                    type=CANARY_SIZE,
                    default=None,
                    metavar="N",
                    help="Replay the first N items alone, wait for their jobs and halt the run "
                    "if too many die again (default REDRIVE['CANARY_SIZE']; 0 none).",
                )
                act.add_argument(
                    "--canary-max-dead-share",
                    type=CANARY_SHARE,
                    default=None,
                    metavar="SHARE",
                    help="The share of the canary (0 to 1) that may die again before the run "
                    "halts (default REDRIVE['CANARY_MAX_DEAD_SHARE']).",
                )

    def _sync_arguments(self, sub):
        sync = sub.add_parser(
            "sync",
            help="Mirror the dead letters brokers keep (RabbitMQ, SQS) and finish the replays "
            "and discards an interruption left (workers also do it every "
            "REDRIVE['SOURCES_SYNC_SECONDS']).",
        )
        sync.add_argument(
            "--source",
            choices=["rabbitmq", "sqs"],
            default=None,
            help="Only this source (default: every configured one).",
        )

    def _filters(self, parser):
        # Empty means "any", as in the console; longer than the column can match nothing.
        parser.add_argument(
            "--job-type", type=cli.column(DeadLetter, "task_path", empty=True), default=""
        )
        parser.add_argument(
            "--error-class", type=cli.column(DeadLetter, "error_class", empty=True), default=""
        )
        parser.add_argument(
            "--queue", type=cli.column(DeadLetter, "queue_name", empty=True), default=""
        )
        parser.add_argument(
            "--source",
            default="",
            choices=["", *sources.names()],
            help=", ".join(sources.names()) + ".",
        )
        parser.add_argument(
            "--since",
            type=time_bound(end=False),
            default=None,
            metavar="WHEN",
            help="Dead-lettered from: a day (2026-12-04), a time (2026-12-04 14:30), 1h, 7d, "
            "deploy (the last deploy).",
        )
        parser.add_argument(
            "--until",
            type=time_bound(end=True),
            default=None,
            metavar="WHEN",
            help="Dead-lettered before this time (a day: to its end, included).",
        )
        # Which letters, not a filter of them: with ids too, the database those ids are in.
        parser.add_argument(
            "--backend",
            type=backend,
            default="default",
            help="The TASKS backend whose database holds the letters (default: the default one).",
        )

    def handle(self, *args, **opts):
        return getattr(self, f"do_{opts['command']}")(opts)

    def do_list(self, opts):
        f = selectors.ListFilter(
            job_type=opts["job_type"],
            error_class=opts["error_class"],
            queue=opts["queue"],
            source=opts["source"],
            state=opts["state"] or "",
            backend=backend_name(opts["backend"]),
            **bounds_of(opts),
        )
        limit = opts["limit"]
        letters = selectors.filtered(f)
        # One row past the limit says whether to count the rest (the count is the slow part).
        rows = list(
            letters.order_by("-dead_lettered_at", "-id").values(*LIST_FIELDS, "last_error")[
                : limit + 1
            ]
        )
        more = letters.count() - limit if len(rows) > limit else 0
        if opts["json"]:
            self.write_json_rows(rows[:limit])
        else:
            for row in rows[:limit]:
                self.stdout.write(
                    cli.one_line(
                        f"{row['id']:>8} {row['state']:<9} {row['task_path']} "
                        f"{row['error_class']} replays={row['replays']} "
                        f"{row['last_error'].splitlines()[0][:80] if row['last_error'] else ''!r}"
                    )
                )
        if more > 0:
            # On stderr under --json, where stdout holds the one JSON document.
            (self.stderr if opts["json"] else self.stdout).write(cli.more_rows(more))
        if not rows and not opts["json"]:
            self.stdout.write("no dead letters")

    def do_types(self, opts):
        rows = [
            {
                "task_path": t.task_path,
                "source": t.source,
                "pending": t.count,
                "died_again": t.died_again,
                "oldest": t.oldest,
                "newest": t.newest,
                "top_errors": [{"error_class": c, "pending": n} for c, n in t.top_errors],
            }
            for t in summaries.by_type(using=opts["backend"])
        ]
        if opts["json"]:
            self.write_json_rows(rows)
            return
        for row in rows:
            errors = ", ".join(f"{e['error_class']}={e['pending']}" for e in row["top_errors"])
            self.stdout.write(
                cli.one_line(
                    f"{row['pending']:>8} {row['task_path']} ({row['source']}) "
                    f"died_again={row['died_again']} oldest={row['oldest'].isoformat()} "
                    f"newest={row['newest'].isoformat()}  {errors}"
                )
            )
        if not rows:
            self.stdout.write("no pending dead letters")

    def do_causes(self, opts):
        found = summaries.causes(opts["job_type"], limit=opts["limit"], using=opts["backend"])
        rows = [
            {
                "fingerprint": c.fingerprint,
                "error_class": c.error_class,
                "pending": c.pending,
                "first_seen": c.first_seen,
                "last_seen": c.last_seen,
                # The newest letter's last error, as the console's cause row shows it.
                "sample": c.sample.splitlines()[0][:200] if c.sample.strip() else "",
                "last_24h": sum(c.hourly),
            }
            for c in found
        ]
        if opts["json"]:
            self.write_json_rows(rows)
            return
        for row in rows:
            self.stdout.write(
                cli.one_line(
                    f"{row['pending']:>8} {row['fingerprint']} {row['error_class']} "
                    f"last_24h={row['last_24h']} {row['sample']!r}"
                )
            )
        if not rows:
            self.stdout.write(f"no pending dead letters of {opts['job_type']}")

    def do_show(self, opts):
        operator = None
        if opts["reveal"]:
            if not opts["operator"]:
                raise usage_error("--reveal needs --operator NAME (the reveal is audited).")
            operator = cli.operator(opts["operator"], VIEW, redaction.REVEAL_PERMISSION)
        try:
            d = selectors.detail(opts["id"], redacted=operator is None, using=opts["backend"])
        except DeadLetter.DoesNotExist:
            raise usage_error(f"No dead letter {opts['id']}") from None
        letter = d.letter
        if operator is not None:
            redaction.record_reveal(operator, letter, via="cli", channel="cli")
        data = {
            **{name: getattr(letter, name) for name in LIST_FIELDS},
            "idempotency_key": letter.idempotency_key,
            "payload": json.loads(d.payload_json),
            "last_error": letter.last_error,
            # A row written by hand may hold anything: only a dict's traceback is left out.
            "errors": [
                {k: v for k, v in e.items() if k != "traceback"} if isinstance(e, dict) else e
                for e in (letter.errors if isinstance(letter.errors, list) else [letter.errors])
            ],
            "replay_jobs": [{"id": j.pk, "state": j.state} for j in d.replay_jobs],
            "history": [
                {
                    "run": item.run_id,
                    "operator": item.run.operator_name,
                    "outcome": item.outcome,
                    "reason": item.run.reason,
                    "skip_reason": item.skip_reason,
                    "job": item.job_id,
                    # A replay that made no job of ours: what it made, as its source says.
                    "made": (
                        {"what": made.what, "reference": made.reference or None}
                        if (made := item.made_elsewhere)
                        else None
                    ),
                    "replay_outcome": item.job_outcome,
                    "at": item.at,
                }
                for item in d.history
            ],
        }
        if opts["json"]:
            self.stdout.write(cli.json_text(data))
            return
        for key, value in data.items():
            if isinstance(value, list | dict):
                value = cli.json_text(value, indent=2)
            self.stdout.write(f"{key}: {value}")

    def do_replay(self, opts):
        self._act(Action.REPLAY, opts)

    def do_discard(self, opts):
        self._act(Action.DISCARD, opts)

    def _act(self, action, opts):
        """An alias of `manage.py act letters.replay|discard` (freeze) then `act confirm`: the
        registry's permission checks, refusals, messages, audit entry and --json outcome,
        because it is `act` that runs. Both steps are one transaction, so a refused confirm
        (a permission only it checks, a queue it refuses) leaves no frozen selection behind;
        the preview is printed once both are through, never before a refusal."""
        typed = {name: opts[name] for name in FILTERS if opts[name]}
        bounds = {name: opts[name].text for name in BOUNDS if opts.get(name)}
        if opts["ids"]:
            if typed or bounds:
                raise usage_error("Give ids or a filter, not both.")
            if opts["limit"] is not None:
                raise usage_error("--limit goes with a filter, not with ids.")
            select = ["--ids", *(str(pk) for pk in dict.fromkeys(opts["ids"]))]
        elif typed or bounds:
            if not opts["limit"]:
                raise usage_error("A filter needs --limit N (the most items to act on).")
            # Only pending items can be acted on (the rest would only be skipped): the oldest
            # --limit of them.
            select = [
                "--select-all",
                *(cli.act_option(name.replace("_", "-"), v) for name, v in typed.items()),
                *(cli.act_option(name, text) for name, text in bounds.items()),
                cli.act_option("state", DeadLetterState.PENDING),
                cli.act_option("order", "oldest"),
                cli.act_option("limit", opts["limit"]),
            ]
        else:
            raise usage_error(
                "Give dead-letter ids or --job-type/--error-class/--queue/--source/--since/--until."
            )
        if name := backend_name(opts["backend"]):
            select.append(cli.act_option("backend", name))
        operator = cli.act_option("operator", opts["operator"])
        confirm = [cli.act_option("reason", opts["reason"]), operator]
        for option in ("allow_poisoned", "allow_unknown_queue"):
            if opts.get(option):
                confirm.append("--" + option.replace("_", "-"))
        for option, value in (
            ("rate", opts.get("rate")),
            ("to_queue", opts.get("to_queue")),
            ("canary_size", opts.get("canary")),
            ("canary_max_dead_share", opts.get("canary_max_dead_share")),
        ):
            if value is not None:
                confirm.append(cli.act_option(option.replace("_", "-"), value))
        # Under --json stdout holds act's one document; what the command says besides goes to
        # stderr.
        notes = self.stderr if opts["json"] else self.stdout
        with transaction.atomic():
            frozen = self._act_json(f"letters.{action}", *select, operator)
            preview = json.loads(frozen)
            if opts["ids"]:
                self._refuse_missing(opts["ids"], opts["backend"])
            if opts["dry_run"]:
                self._preview(notes, action, preview, opts.get("to_queue"))
                if opts["json"]:
                    self.stdout.write(frozen, ending="")
                else:
                    self.stdout.write(
                        f"Confirm with: manage.py act confirm {preview['selection']} --reason WHY "
                        f"--operator {opts['operator']}"
                    )
                return
            confirmed = self._act_json("confirm", str(preview["selection"]), *confirm)
        outcome = json.loads(confirmed)
        self._preview(notes, action, preview, outcome.get("to_queue"))
        if opts["json"]:
            self.stdout.write(confirmed, ending="")
        else:
            self.stdout.write(outcome["message"])
        self._drive(notes, outcome["run"])

    def _act_json(self, name, *argv) -> str:
        """What `manage.py act NAME ARGV... --json` prints; its refusals are the command's."""
        out = io.StringIO()
        cli.act(self, name, *argv, "--json", stdout=out)
        return out.getvalue()

    def _refuse_missing(self, ids, database):
        """Ids of no letter at all are a typo: refused (the frozen selection with them rolled
        back) rather than carried out as skipped."""
        found = set(
            DeadLetter.objects.using(database).filter(Among(ids)).values_list("pk", flat=True)
        )
        missing = sorted(set(ids) - found)
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (" …" if len(missing) > 5 else "")
            raise usage_error(f"No dead letter {shown}")

    def _preview(self, notes, action, preview, to_queue):
        """The frozen selection as `act --json` previews it, in the command's lines."""
        skipped = sum(row["count"] for row in preview.get("skipped", []))
        notes.write(
            f"{action}: {preview['count']} selected, {preview['will_act']} to {action}"
            + (f" to queue {cli.terminal_safe(to_queue)}" if to_queue else "")
            + f", {skipped} skipped; types: "
            + ", ".join(f"{row['task_path']}={row['count']}" for row in preview["by_type"])
        )
        if preview.get("previously_replayed"):
            notes.write(
                f"warning: {preview['previously_replayed']} were replayed before (possible poison)"
            )
        for row in preview.get("skipped", []):
            notes.write(f"  skip {row['count']}: {row['reason']}")

    def _drive(self, notes, run_id):
        """Carry out the run `act` started, in this process, and say how it went. The confirm
        (or approval) also queued its background runner, as every door's does: both go through
        the run's locked row, batch by batch, so neither repeats the other's items, and the
        runner that comes after the run is done does nothing. Any generation: the command
        drives the run to its end (or its pause, cancel or halt), whoever else takes a turn."""
        run = ReplayRun.objects.get(pk=run_id)
        if run.state == RunState.AWAITING:  # the two-person rule: nothing is done yet
            notes.write(
                f"a second operator approves it on its page or with: manage.py deadletters "
                f"approve {run.pk} --operator NAME"
            )
            return
        if run.canary_size and run.state in (RunState.QUEUED, RunState.RUNNING):
            notes.write(
                f"canary: the first {run.canary_size} items go alone; waiting up to "
                f"{run.canary_timeout:g} s for their jobs (a worker must run them)"
            )
        services.carry_out(run.pk)
        run = ReplayRun.objects.get(pk=run.pk)
        notes.write(
            f"run {run.pk} {run.state}: {run.done} {run.action}ed"
            + (f" to queue {cli.terminal_safe(run.to_queue)}" if run.to_queue else "")
            + f", {run.skipped} skipped in {run.batches} batch(es)"
        )
        if run.canary_size:
            notes.write(
                f"canary {run.canary_state or 'not out'}: {run.canary_done} done, "
                f"{run.canary_dead} died again of {run.canary_size}"
            )
        if run.state == RunState.HALTED:
            self.stderr.write(
                f"run {run.pk} halted by its canary: the items after it were not replayed; "
                "resume it from the console to replay them anyway, or cancel it"
            )

    # --- brokers' dead letters (jobqueue/store/sources/brokers.py) ---------------------------

    def do_sync(self, opts):
        """One line per source; a broker that cannot be reached is an error naming it, and
        loses nothing (its messages stay where they are until the next sync)."""
        from jobqueue.store.sources.brokers import Unreachable

        try:
            chosen = sources.syncable(opts["source"])
        except sources.UnknownSource as exc:
            raise usage_error(str(exc)) from exc
        if not chosen:
            raise usage_error(
                "No broker source is configured: set REDRIVE['RABBITMQ_DEAD_LETTERS'] or "
                "REDRIVE['SQS_DEAD_LETTERS'] with its \"queues\"."
            )
        failed = []
        for source in chosen:
            try:
                done = source.sync()
            except Unreachable as exc:
                failed.append(f"{source.label} is unreachable: {exc}")
                continue
            self.stdout.write(done.line())
            for error in done.errors:
                self.stderr.write(f"source={source.name} error={error}")
        if failed:
            raise CommandError("; ".join(failed) + " (nothing was lost: run sync again)")

    # --- export (audited; deadletters/exports.py) -------------------------------------------

    def _export_arguments(self, sub):
        export = sub.add_parser(
            "export",
            help="The letters of a filter as CSV or JSON Lines, payloads masked (audited).",
        )
        export.add_argument("--format", required=True, choices=exports.FORMATS)
        self._filters(export)
        export.add_argument("--state", choices=DeadLetterState.values, default=None)
        export.add_argument(
            "--fingerprint", default="", help="A cause: the error fingerprint (16 hex)."
        )
        export.add_argument(
            "--search", default="", help="Text in the last error or the payload (as the list's)."
        )
        export.add_argument("--order", choices=["newest", "oldest"], default="newest")
        export.add_argument(
            "--operator",
            type=cli.operator_name,
            required=True,
            help=f"Username the audit names; needs {EXPORT}.",
        )
        export.add_argument(
            "--output",
            metavar="FILE",
            help="Write to FILE, which must not exist yet (default: standard output).",
        )

    def do_export(self, opts):
        """Every refusal comes before the audit row is written and before the file is made."""
        operator = cli.operator(opts["operator"], VIEW, EXPORT)
        # The console's form parses the filter, so the CLI refuses exactly what the list does.
        form = FilterForm(
            {
                "job_type": opts["job_type"],
                "error_class": opts["error_class"],
                "queue": opts["queue"],
                "source": opts["source"],
                "state": opts["state"] or "",
                "fingerprint": opts["fingerprint"],
                "q": opts["search"],
                # As typed: the form parses them as the list's filter does ("1h" stays "1h").
                "since": opts["since"].text if opts["since"] else "",
                "until": opts["until"].text if opts["until"] else "",
                "order": opts["order"],
                "backend": backend_name(opts["backend"]),
            }
        )
        if not form.is_valid():
            raise usage_error(f"Invalid filter: {refusal(form)}")
        path = opts["output"]
        out = None
        if path:
            try:
                # "x": never over an existing file (nor through a symlink planted there).
                out = open(path, "x", encoding="utf-8", newline="")  # noqa: SIM115
            except (OSError, ValueError) as exc:
                reason = getattr(exc, "strerror", "") or exc
                raise usage_error(f"Cannot write {path}: {reason}") from None
        try:
            record, chunks = exports.export(
                operator=operator,
                filter=form.to_filter(
                    payload_search=operator.has_perm(redaction.REVEAL_PERMISSION)
                ),
                fmt=opts["format"],
                channel="cli",
            )
            for chunk in chunks:
                if out is None:
                    self.stdout.write_data(chunk)
                else:
                    _to_file(out.write, chunk, path=path)
            if out is not None:
                _to_file(out.close, path=path)
        except BaseException:
            if out is not None:
                with contextlib.suppress(OSError):  # what it failed to write, it fails again
                    out.close()
                os.remove(path)  # no half file; the audit entry stays (what may have left)
            raise
        if out is not None:
            self.stdout.write(f"{record.rows} dead letters written to {path} ({record.format})")
        if record.truncated:
            self.stderr.write(
                f"truncated: more letters match than REDRIVE['EXPORT_MAX_ROWS'] "
                f"({setting('EXPORT_MAX_ROWS'):,}); narrow the filter"
            )

    # --- approve (the two-person rule) -----------------------------------------------------

    def _approve_arguments(self, sub):
        approve = sub.add_parser(
            "approve",
            help="Approve a run awaiting a second user's approval, and carry it out (audited): "
            "as `manage.py act run.approve --run RUN`, then the run carried out here.",
        )
        approve.add_argument("run", type=cli.integer(1, MAX_ID, "a run id"))
        approve.add_argument(
            "--operator",
            type=cli.operator_name,
            required=True,
            help="Username the approval is recorded under: not the run's requester, holding "
            "the run's action permission.",
        )
        approve.add_argument(
            "--json",
            action="store_true",
            help="The outcome as one JSON object, as `manage.py act run.approve --json` prints "
            "it (the run's progress on stderr).",
        )

    def do_approve(self, opts):
        """An alias of `manage.py act run.approve`: its checks (a missing run, the requester's
        own run, a missing permission, a run not awaiting approval), messages, audit entry and
        --json outcome; then the run is carried out here, as `replay` carries out its own."""
        approved = self._act_json(
            "run.approve",
            cli.act_option("run", opts["run"]),
            cli.act_option("operator", opts["operator"]),
        )
        outcome = json.loads(approved)
        if opts["json"]:
            self.stdout.write(approved, ending="")
        else:
            self.stdout.write(outcome["message"])
        self._drive(self.stderr if opts["json"] else self.stdout, outcome["run"])


def _to_file(write, *args, path: str):
    """A write to the export's file: a full disk or an I/O error is one line, status 1."""
    try:
        write(*args)
    except OSError as exc:
        raise CommandError(f"Cannot write {path}: {exc.strerror or exc}; nothing kept") from None
