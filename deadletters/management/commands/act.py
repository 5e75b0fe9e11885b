"""`manage.py act`: every operator action of the registry (deadletters.actions) from the command
line, with the console's and the API's permissions, validation and messages, audited as done
through the command line.

    manage.py act list [--json]
    manage.py act queue.pause --queue emails --reason "provider outage" --operator ana
    manage.py act letters.replay --job-type app.tasks.send --select-all --operator ana
    manage.py act confirm 42 --reason "provider back" --operator ana
    manage.py act confirm 43 --reason "slow lane" --to-queue emails-slow --operator ana

A bulk action's first call freezes the selection and prints its preview; `act confirm ID`
carries it out, as the console's confirm page does.
"""

from django import forms

from deadletters import actions
from jobqueue.management import cli
from jobqueue.models import MAX_ID

CONFIRM = "confirm"


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _dest(name: str) -> str:
    # Prefixed: a form field named `args` (an edit's payload) is Django's own option name.
    return f"field_{name}"


def _add_fields(parser, fields: dict[str, forms.Field]) -> None:
    """One option a form field, none required here: the form says what is missing, with the
    message every channel gives."""
    for name, f in fields.items():
        help_text = str(f.help_text or f.label or name.replace("_", " "))
        if isinstance(f, forms.BooleanField):
            parser.add_argument(
                _option(name), dest=_dest(name), action="store_true", help=help_text
            )
        elif _flag_value(f) is not None:  # "select all": a choice of one value, a flag here
            parser.add_argument(
                _option(name),
                dest=_dest(name),
                action="store_const",
                const=_flag_value(f),
                help=help_text,
            )
        elif name == "ids" or isinstance(f, forms.MultipleChoiceField):
            parser.add_argument(
                _option(name), dest=_dest(name), nargs="+", type=cli.text(), help=help_text
            )
        else:
            parser.add_argument(
                _option(name), dest=_dest(name), type=cli.text(empty=True), help=help_text
            )


def _flag_value(f: forms.Field) -> str | None:
    choices = [value for value, _ in getattr(f, "choices", [])]
    return str(choices[0]) if isinstance(f, forms.ChoiceField) and len(choices) == 1 else None


def _data(opts, fields) -> dict:
    """The options given, as a form's data: a flag given is "on", one not given is absent."""
    data = {}
    for name in fields:
        value = opts.get(_dest(name))
        if value is None or value is False:
            continue
        data[name] = "on" if value is True else value
    return data


def _confirm_fields() -> dict[str, forms.Field]:
    """Every bulk action's confirm-step fields (a selection's action picks its own form)."""
    fields = {}
    for action in actions.REGISTRY.values():
        if action.bulk:
            fields |= dict(action.form.base_fields)
    return fields


class Command(cli.Command):
    requires_system_checks = []
    help = "Carry out an operator action (as the console and the API do), audited; `act list`."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = sub.add_parser("list", help="The actions, their targets and permissions.")
        listing.add_argument("--json", action="store_true", help="One JSON array.")
        for action in actions.REGISTRY.values():
            each = sub.add_parser(action.name, help=action.summary, description=action.summary)
            fields = dict(action.select_form.base_fields) if action.bulk else action.fields()
            _add_fields(each, fields)
            self._add_common(each)
        confirm = sub.add_parser(
            CONFIRM, help="Carry out a frozen selection (a bulk action's second step)."
        )
        confirm.add_argument("selection", type=cli.integer(1, MAX_ID, "a selection's id"))
        _add_fields(confirm, _confirm_fields())
        self._add_common(confirm)

    def _add_common(self, parser):
        parser.add_argument(
            "--operator",
            type=cli.operator_name,
            required=True,
            help="Username the action is done and audited as; their permissions apply.",
        )
        parser.add_argument("--json", action="store_true", help="The outcome as one JSON object.")

    def handle(self, *args, **opts):
        name = opts["action"]
        if name == "list":
            return self._list(opts["json"])
        user = cli.operator(opts["operator"])
        fields = {}
        try:
            if name == CONFIRM:
                fields = _confirm_fields()
                data = _data(opts, fields)
                outcome = actions.confirm(opts["selection"], user=user, channel="cli", data=data)
            elif actions.get(name).bulk:
                return self._freeze(name, user, opts)
            else:
                fields = actions.get(name).fields()
                outcome = actions.perform(name, user=user, channel="cli", data=_data(opts, fields))
        except actions.ActionError as exc:
            raise cli.usage_error(_without_hint(exc, fields)) from None
        self._print_outcome(name, outcome, opts["json"])

    def _freeze(self, name, user, opts):
        action = actions.get(name)
        try:
            selection = actions.freeze(
                name, user=user, channel="cli", data=_data(opts, action.select_form.base_fields)
            )
        except actions.ActionError as exc:
            raise cli.usage_error(_without_hint(exc)) from None
        preview = actions.describe(selection)
        if opts["json"]:
            self.stdout.write(cli.json_text(preview))
            return
        lines = [
            f"Selection {selection.pk}: {preview['count']} to {action.label.lower()}, "
            f"{preview['will_act']} of them now.",
        ]
        for row in preview.get("by_type", []):
            lines.append(f"  {row['count']:>8}  {row['task_path']}")
        for row in preview.get("skipped", []):
            lines.append(f"  skipped {row['count']}: {row['reason']}")
        replay = name == "letters.replay"
        if replay and preview.get("queues"):
            own = ", ".join(f"{row['queue']}={row['count']}" for row in preview["queues"])
            fixed = "" if preview["can_change_queue"] else " (they cannot go to another queue)"
            lines.append(f"  their own queues: {own}{fixed}")
        lines.append(
            f"Confirm with: manage.py act confirm {selection.pk} --reason WHY "
            f"--operator {user.get_username()}"
            + (" [--to-queue QUEUE]" if replay and preview.get("can_change_queue") else "")
        )
        self.stdout.write("\n".join(cli.terminal_safe(line) for line in lines))

    def _print_outcome(self, name, outcome, as_json):
        if name == "letters.export":
            _, chunks = outcome.result
            for chunk in chunks:
                self.stdout.write(chunk, ending="")
            return
        if as_json:
            self.stdout.write(cli.json_text(outcome.as_json()))
        elif name == "letter.reveal":
            self.stdout.write(cli.json_text(outcome.data, indent=2))
        else:
            self.stdout.write(cli.terminal_safe(outcome.message))

    def _list(self, as_json):
        described = [actions.as_json(action) for action in actions.REGISTRY.values()]
        if as_json:
            self.stdout.write(cli.json_text(described))
            return
        for action in described:
            bulk = " (bulk: freeze, then confirm)" if action["bulk"] else ""
            self.stdout.write(f"{action['name']:<24} {action['label']}{bulk}")


def _without_hint(exc: actions.ActionError, fields=()) -> str:
    """The refusal as one line, its hint after it; a queue no one knows yet names the flag
    that allows one (--allow-unknown for a pause, --allow-unknown-queue for a replay)."""
    hint = getattr(exc, "hint", "")
    if getattr(exc, "code", "") == "unknown_queue":
        flag = next((name for name in fields if name.startswith("allow_unknown")), None)
        if flag:
            hint = f"(give {_option(flag)} to mean a new one)"
    return f"{exc} {hint}".strip()
