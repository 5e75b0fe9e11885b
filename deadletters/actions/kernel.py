"""The operator kernel: every action an operator can take, declared once.

An `Action` names what it does (`queue.pause`), the kind of its target, the permissions it
needs, the form that validates its input (one set of rules and messages for every channel),
whether it is bulk (carried out through a frozen selection: freeze and preview, then a reason
and confirm) or needs a second person above the approval threshold, and the service that
carries it out through the store.

The console's views, `manage.py act` and the JSON API all go through `perform` (and `freeze`
and `confirm` for bulk actions): the same checks in the same order, the same messages, and one
audit entry for each change, naming the channel (and the API token) it came through. Errors are
typed so that each channel answers in its own way: `Missing` (403), `Invalid` (400), `Gone`
(404), `Conflict` (409, the state refused it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from django import forms
from django.core.exceptions import PermissionDenied

from jobqueue import store
from jobqueue.store import payloads

from .. import databases, jobs, redaction, search, selectors, services
from ..forms import (
    refusal,
)
from ..models import Selection
from ..roles import (
    VIEW,
)

REASON_CHARS = payloads.MAX_REASON_CHARS


# --- what goes wrong, typed once for every channel -------------------------------------------


class ActionError(Exception):
    """Why an action was not carried out; nothing was written."""

    @property
    def message(self) -> str:
        return str(self)


class Unknown(ActionError, LookupError):
    """No action of that name."""


class Missing(ActionError, PermissionDenied):
    """Refused for want of `permission` (the console's 403 page names it and its role)."""

    def __init__(self, permission: str, message: str = ""):
        super().__init__(message or f"Not allowed: this needs the permission {permission}.")
        self.permission = permission


class Invalid(ActionError, ValueError):
    """The input did not validate: `errors` maps each field to its messages."""

    def __init__(self, message: str, errors: dict | None = None):
        super().__init__(message)
        self.errors = errors or {}


class Gone(ActionError, LookupError):
    """The target the input names does not exist (any more)."""

    def __init__(self, what: str, pk=None, hint: str = ""):
        super().__init__(f"Nothing changed: no {what}" + (f" #{pk}." if pk is not None else "."))
        self.what, self.pk, self.hint = what, pk, hint


class Conflict(ActionError):
    """The target's state refused the action (already confirmed, not awaiting approval, ...).
    `code` lets a channel add its own hint (the console's tick box, the CLI's flag)."""

    def __init__(self, message: str, code: str = ""):
        super().__init__(message)
        self.code = code


# --- the parts of an action --------------------------------------------------------------------


@dataclass(frozen=True)
class Actor:
    """Who acts, through which channel (jobqueue.models.AuditEntry.Channel), with which API
    token (its id, as the audit names it; "" outside the API)."""

    user: object
    channel: str
    token: str = ""

    @property
    def name(self) -> str:
        return self.user.get_username()

    def require(self, *permissions: str) -> None:
        for permission in permissions:
            # has_perm is False for an inactive user: a deactivated operator's token or
            # session acts no more.
            if not self.user.has_perm(permission):
                raise Missing(permission)


@dataclass
class Outcome:
    """What an action did. `changed`: whether anything changed (a pause of a paused queue did
    not); `message`: what happened, as an operator reads it; `data`: the JSON an API or
    `--json` caller gets; `result`: the Python object a console page renders from (a run, a
    revealed letter's detail, an export's stream), not serialized."""

    changed: bool
    message: str
    data: dict = field(default_factory=dict)
    result: object = None

    def as_json(self) -> dict:
        return {"changed": self.changed, "message": self.message, **self.data}


@dataclass(frozen=True)
class Action:
    name: str  # "<target>.<verb>"
    target: str  # the kind of target: queue, job, jobs, schedule, letter, letters, run, ...
    label: str
    summary: str
    permissions: tuple[str, ...]
    form: type[forms.Form]  # the input (for a bulk action: its confirm step's input)
    carry_out: Callable  # (actor, cleaned) -> Outcome; bulk: (actor, cleaned, selection)
    # Bulk: carried out through a frozen selection of this kind (Selection.Kind), chosen by
    # `select_form` and `select` (actor, cleaned) -> (ids, recorded filter, database).
    selection_kind: str = ""
    select_form: type[forms.Form] | None = None
    select: Callable | None = None
    # Above conf APPROVAL_THRESHOLD items a second person approves it (the two-person rule).
    two_person: bool = False
    # The audit's name for what it writes, where the store's name differs from the action's.
    audited_as: str = ""
    # Offered by the JSON API too. Not for making tokens: a leaked token must not mint others
    # that outlive its revocation.
    api: bool = True
    # Its answer shows what is otherwise masked or secret (a reveal, a new token's text):
    # every channel's answer is kept by no cache (Cache-Control: no-store).
    reveals: bool = False

    @property
    def bulk(self) -> bool:
        return bool(self.selection_kind)

    @property
    def audit_action(self) -> str:
        return self.audited_as or self.name

    def fields(self) -> dict[str, forms.Field]:
        """The input's fields: for a bulk action, the selection's then the confirm step's."""
        chosen = dict(self.select_form.base_fields) if self.select_form else {}
        return chosen | dict(self.form.base_fields)


REGISTRY: dict[str, Action] = {}


def register(action: Action) -> Action:
    if action.name in REGISTRY:
        raise ValueError(f"the action {action.name!r} is declared twice")
    REGISTRY[action.name] = action
    return action


def get(name: str) -> Action:
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise Unknown(f"No action {name!r}: actions are {', '.join(sorted(REGISTRY))}.") from None


class Cleaned(dict):
    """A valid form's cleaned data, with the form (whose filter a selection or export reads)."""

    def __init__(self, form: forms.Form):
        super().__init__(form.cleaned_data)
        self.form = form


def validated(form_class: type[forms.Form], data) -> Cleaned:
    """The form's cleaned data, or Invalid with its messages (one line and by field)."""
    form = form_class(data if data is not None else {})
    if not form.is_valid():
        raise Invalid(
            f"Nothing changed: {refusal(form)}",
            {name: list(errors) for name, errors in form.errors.items()},
        )
    return Cleaned(form)


def check(name: str, user) -> Action:
    """The action `name`, if `user` holds the permissions it needs (Missing otherwise): for a
    channel that offers it, or refuses some other part of a request only after this."""
    return _checked(name, user, "code", "")[0]


def _checked(name: str, user, channel: str, token: str) -> tuple[Action, Actor]:
    action = get(name)
    actor = Actor(user, channel, token)
    actor.require(VIEW, *action.permissions)
    return action, actor


def perform(name: str, *, user, channel: str, data=None, token: str = "") -> Outcome:
    """Carry out the action `name` for `user` through `channel` with the input `data` (a dict or
    QueryDict of the form's fields, as text or JSON values). A bulk action is frozen and
    confirmed instead (`freeze`, `confirm`)."""
    action, actor = _checked(name, user, channel, token)
    if action.bulk:
        raise Unknown(f"{name} acts on a frozen selection: freeze it, then confirm it.")
    cleaned = validated(action.form, data)
    with store.audit.acting(token=token):
        try:
            return action.carry_out(actor, cleaned)
        except services.RefusedError as exc:
            raise Conflict(str(exc), code=exc.code) from None


def freeze(name: str, *, user, channel: str, data=None, token: str = "") -> Selection:
    """The first step of a bulk action: record exactly the ids chosen (ticked, or every row
    matching a filter) for `user` to preview and confirm."""
    action, actor = _checked(name, user, channel, token)
    if not action.bulk:
        raise Unknown(f"{name} is not a bulk action: carry it out directly.")
    cleaned = validated(action.select_form, data)
    try:
        ids, recorded, database = action.select(actor, cleaned)
        return services.freeze_selection(
            operator=user,
            kind=action.selection_kind,
            action=action.name.partition(".")[2],
            ids=ids,
            filter=recorded,
            database=database,
        )
    except (selectors.SelectionTooLarge, services.RefusedError) as exc:
        # None chosen, or more than a selection holds: the input's fault, like a bad field.
        raise Invalid(str(exc)) from None
    except search.SearchTimedOut as exc:
        raise Conflict(f"Nothing selected: {exc}. Narrow it by state, task or queue.") from None


def action_of(selection: Selection) -> Action:
    prefix = "letters" if selection.kind == Selection.Kind.LETTERS else "jobs"
    return get(f"{prefix}.{selection.action}")


def own_selection(pk, user) -> Selection:
    """A frozen selection of `user`'s (nobody sees another's), of a database still in use."""
    selection = Selection.objects.filter(pk=pk, operator=user).first() if pk else None
    if selection is None:
        raise Gone(
            "selection",
            pk,
            "A selection is seen only by the operator who made it; make your own from the list.",
        )
    if databases.of_database(selection.database) is None:
        noun = "letters" if selection.kind == Selection.Kind.LETTERS else "jobs"
        raise Gone(
            "selection",
            pk,
            f"Its {noun} are in database {selection.database!r}, which no Redrive TASKS "
            "backend uses now.",
        )
    return selection


def confirm(selection_id, *, user, channel: str, data=None, token: str = "") -> Outcome:
    """The second step of a bulk action: carry out `user`'s frozen selection with the confirm
    step's input (a reason, and for a replay its pace and canary)."""
    selection = own_selection(selection_id, user)
    action, actor = _checked(action_of(selection).name, user, channel, token)
    cleaned = validated(action.form, data)
    with store.audit.acting(token=token):
        try:
            return action.carry_out(actor, cleaned, selection)
        except services.RefusedError as exc:
            raise Conflict(str(exc), code=exc.code) from None


# What a selection's recorded filter holds besides its filters.
NOT_FILTERS = ("order", "payload_search")


def describe(selection: Selection, *, allow_poisoned: bool = False) -> dict:
    """A frozen selection as its preview shows it: how many, what they are, a sample."""
    recorded = selection.filter if isinstance(selection.filter, dict) else {}
    base = {
        "selection": selection.pk,
        "action": action_of(selection).name,
        "count": len(selection.ids),
        "backend": databases.of_database(selection.database).name,
        "confirmed": bool(getattr(selection, "run", None) or selection.applied_at),
        # How they were chosen: the filters applied ({} for ticked ids).
        "filters": {k: v for k, v in recorded.items() if k not in NOT_FILTERS and v},
    }
    if selection.kind == Selection.Kind.LETTERS:
        preview = selectors.preview(
            selection.ids,
            action=selection.action,
            allow_poisoned=allow_poisoned,
            using=selection.database,
        )
        return base | {
            "will_act": preview.will_act,
            "by_type": [{"task_path": path, "count": n} for path, n in preview.by_type],
            "skipped": [{"reason": why, "count": n} for why, n in preview.skipped],
            "previously_replayed": preview.previously_replayed,
            "poisoned": preview.poisoned,
            "queues": [
                {"queue": queue, "count": n, "paused": queue in preview.paused}
                for queue, n in preview.queues
            ],
            "can_change_queue": not preview.fixed_queue,
            "sample": selection.ids[:20],
        }
    preview = jobs.preview(selection.ids, selection.action, using=selection.database)
    return base | {
        "will_act": preview.actionable,
        "sample": [job.pk for job in preview.sample],
    }


def backend_of(cleaned) -> databases.QueueBackend:
    """The queue backend an action's input names, or the default one."""
    return databases.named(cleaned.get("backend")) or databases.default()


def may_search_payloads(actor: Actor) -> bool:
    """A search looks in payload values only for one who may see them unmasked, or it would
    tell which rows hold a masked value."""
    return actor.user.has_perm(redaction.REVEAL_PERMISSION)


def as_json(action: Action) -> dict:
    """An action as `manage.py act --list --json` and the API's index describe it."""
    return {
        "name": action.name,
        "target": action.target,
        "label": action.label,
        "summary": action.summary,
        "permissions": [VIEW, *action.permissions],
        "bulk": action.bulk,
        "two_person": action.two_person,
        "api": action.api,
        "fields": sorted(action.fields()),
    }
