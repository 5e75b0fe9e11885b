"""Console parity for incidents without a browser: the same selectors, services and audit."""

import argparse
import json

from django.db import transaction

from deadletters import conf, redaction, selectors, services
from deadletters.models import Action, ReplayRun
from deadletters.roles import ACTION_PERMISSION, POISON, VIEW
from jobqueue.management import cli
from jobqueue.management.cli import usage_error
from jobqueue.models import MAX_ID, DeadLetter, DeadLetterState
from jobqueue.store import sources

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


def rate(text):
    try:
        return conf.validate_replay_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(cli.Command):
    help = "Browse, replay and discard dead letters from the command line."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)

        listing = sub.add_parser("list", help="Dead letters, newest first.")
        self._filters(listing)
        listing.add_argument("--state", choices=DeadLetterState.values, default=None)
        listing.add_argument(
            "--limit",
            type=cli.integer(1, cli.MAX_LIST_LIMIT),
            default=50,
            help=f"At most this many rows (default 50, at most {cli.MAX_LIST_LIMIT}).",
        )
        listing.add_argument("--json", action="store_true", help="One JSON object per line.")

        show = sub.add_parser("show", help="One dead letter with its errors and history.")
        show.add_argument("id", type=LETTER_ID)
        show.add_argument("--json", action="store_true")
        show.add_argument(
            "--reveal",
            action="store_true",
            help="Show masked values unmasked (needs --operator with the permission; audited).",
        )
        show.add_argument("--operator", help="Username the reveal is recorded under.")

        for name in ("replay", "discard"):
            act = sub.add_parser(name, help=f"{name.title()} by id or by filter (audited).")
            act.add_argument("ids", nargs="*", type=LETTER_ID)
            self._filters(act)
            act.add_argument(
                "--limit",
                # The largest selection a run may freeze, read when the command runs.
                type=cli.integer(1, lambda: conf.get("MAX_SELECTION")),
                help="Required with a filter: at most N items.",
            )
            cli.add_audit_arguments(act)
            act.add_argument("--dry-run", action="store_true", help="Print the preview only.")
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

    def handle(self, *args, **opts):
        return getattr(self, f"do_{opts['command']}")(opts)

    def do_list(self, opts):
        f = selectors.ListFilter(
            job_type=opts["job_type"],
            error_class=opts["error_class"],
            queue=opts["queue"],
            source=opts["source"],
            state=opts["state"] or "",
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
        for row in rows[:limit]:
            if opts["json"]:
                self.stdout.write(json.dumps(row, default=str))
            else:
                self.stdout.write(
                    f"{row['id']:>8} {row['state']:<9} {row['task_path']} "
                    f"{row['error_class']} replays={row['replays']} "
                    f"{row['last_error'].splitlines()[0][:80] if row['last_error'] else ''!r}"
                )
        if more > 0:
            # On stderr under --json, where every stdout line must stay a JSON object.
            (self.stderr if opts["json"] else self.stdout).write(cli.more_rows(more))
        if not rows and not opts["json"]:
            self.stdout.write("no dead letters")

    def do_show(self, opts):
        operator = None
        if opts["reveal"]:
            if not opts["operator"]:
                raise usage_error("--reveal needs --operator NAME (the reveal is audited).")
            operator = cli.operator(opts["operator"], VIEW, redaction.REVEAL_PERMISSION)
        try:
            d = selectors.detail(opts["id"], redacted=operator is None)
        except DeadLetter.DoesNotExist:
            raise usage_error(f"No dead letter {opts['id']}") from None
        letter = d.letter
        if operator is not None:
            redaction.record_reveal(operator, letter, via="cli")
        data = {
            **{name: getattr(letter, name) for name in LIST_FIELDS},
            "idempotency_key": letter.idempotency_key,
            "payload": json.loads(d.payload_json),
            "last_error": letter.last_error,
            "errors": [{k: v for k, v in e.items() if k != "traceback"} for e in letter.errors],
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
            self.stdout.write(json.dumps(data, default=str))
            return
        for key, value in data.items():
            if isinstance(value, list | dict):
                value = json.dumps(value, default=str, indent=2)
            self.stdout.write(f"{key}: {value}")

    def do_replay(self, opts):
        self._act(Action.REPLAY, opts)

    def do_discard(self, opts):
        self._act(Action.DISCARD, opts)

    def _act(self, action, opts):
        """Every check comes before the preview is printed and before anything is written; the
        selection and its run are written together or not at all."""
        operator = cli.operator(opts["operator"], VIEW, ACTION_PERMISSION[action])
        allow_poisoned = opts.get("allow_poisoned", False)
        if allow_poisoned and not operator.has_perm(POISON):
            raise usage_error(f"{operator} may not replay items past the poison limit.")
        typed = {name: opts[name] for name in FILTERS if opts[name]}
        if opts["ids"]:
            if typed:
                raise usage_error("Give ids or a filter, not both.")
            if opts["limit"] is not None:
                raise usage_error("--limit goes with a filter, not with ids.")
            ids = list(dict.fromkeys(opts["ids"]))
            if len(ids) > conf.get("MAX_SELECTION"):
                raise usage_error(f"A selection holds at most {conf.get('MAX_SELECTION'):,} items.")
            missing = sorted(
                set(ids) - set(DeadLetter.objects.filter(pk__in=ids).values_list("pk", flat=True))
            )
            if missing:
                shown = ", ".join(map(str, missing[:5])) + (" …" if len(missing) > 5 else "")
                raise usage_error(f"No dead letter {shown}")
            recorded = {}  # hand-picked, as in the console
        elif typed:
            if not opts["limit"]:
                raise usage_error("A filter needs --limit N (the most items to act on).")
            # Only pending items can be acted on; the rest would only be skipped.
            f = selectors.ListFilter(**typed, state=DeadLetterState.PENDING)
            ids = list(
                selectors.filtered(f)
                .order_by("dead_lettered_at", "id")
                .values_list("id", flat=True)[: opts["limit"]]
            )
            # The audit shows what the operator typed, not the defaults it was combined with.
            recorded = {**typed, "limit": opts["limit"]}
        else:
            raise usage_error("Give dead-letter ids or --job-type/--error-class/--queue/--source.")
        if not ids:
            raise usage_error("Nothing matches.")
        preview = selectors.preview(ids, action=action, allow_poisoned=allow_poisoned)
        self.stdout.write(
            f"{action}: {preview.total} selected, {preview.will_act} to {action}, "
            f"{preview.skip_count} skipped; types: "
            + ", ".join(f"{t}={n}" for t, n in preview.by_type)
        )
        if preview.previously_replayed:
            self.stdout.write(
                f"warning: {preview.previously_replayed} were replayed before (possible poison)"
            )
        for reason, n in preview.skipped:
            self.stdout.write(f"  skip {n}: {reason}")
        if opts["dry_run"]:
            return
        try:
            with transaction.atomic():
                selection = services.freeze_selection(
                    operator=operator, action=action, ids=ids, filter=recorded
                )
                run = services.start_run(
                    operator=operator,
                    selection=selection,
                    reason=opts["reason"],
                    allow_poisoned=allow_poisoned,
                    rate=opts.get("rate"),
                    background=False,
                )
        except services.RefusedError as exc:
            raise usage_error(str(exc)) from exc
        services.carry_out(run.pk, run.generation)
        run = ReplayRun.objects.get(pk=run.pk)
        self.stdout.write(
            f"run {run.pk} {run.state}: {run.done} {action}ed, {run.skipped} skipped "
            f"in {run.batches} batch(es)"
        )
