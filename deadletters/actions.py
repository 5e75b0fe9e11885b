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
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from jobqueue import store
from jobqueue import workflows as workflow_api
from jobqueue.conf import setting
from jobqueue.models import (
    DeadLetter,
    Job,
    JobStatus,
    Schedule,
    WorkerRecord,
    Workflow,
    WorkflowState,
)
from jobqueue.store import payloads

from . import databases, exports, jobs, redaction, search, selectors, services, tokens
from .forms import (
    ConfirmForm,
    EditForm,
    FilterForm,
    IdField,
    JobConfirmForm,
    JobSelectionForm,
    SelectionForm,
    refusal,
)
from .models import Action as LetterAction
from .models import ApiToken, ReplayRun, RunState, Selection
from .roles import (
    ACT_ON_JOB,
    ACTION_PERMISSION,
    CONTROL_WORKER,
    EDIT,
    EXPORT,
    MANAGE_SCHEDULE,
    PAUSE_QUEUE,
    POISON,
    REVOKE_ANY_TOKEN,
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


# --- the forms of the actions that had none of their own ---------------------------------------


class LetterSelectionForm(SelectionForm):
    """Which letters: ticked ids, or every one matching the filter (the action is the one
    being frozen, not a field), or with `limit` the first so many of them in the list's order
    (`deadletters replay --job-type X --limit N`: the oldest N pending)."""

    action = None
    limit = forms.IntegerField(
        required=False,
        min_value=1,
        help_text="With select all: at most this many, the first in the list's order.",
    )

    def clean_limit(self):
        limit = self.cleaned_data.get("limit")
        cap = setting("MAX_SELECTION")
        if limit is not None and limit > cap:
            raise ValidationError(f"A selection holds at most {cap:,} items.", code="max_value")
        return limit

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("limit") is not None and not cleaned.get("select_all"):
            raise ValidationError("A limit goes with select all, not with ids.", code="invalid")
        return cleaned


class JobsSelectionForm(JobSelectionForm):
    """Which jobs, of which backend: ticked ids, or every one matching the filter."""

    action = after = before = None
    backend = forms.ChoiceField(required=False, choices=lambda: databases.choices())


class Reason(forms.Form):
    reason = forms.CharField(max_length=REASON_CHARS)


class BackendField(forms.ChoiceField):
    """Which queue database (deadletters.databases): none named, the default backend's."""

    def __init__(self, **kwargs):
        super().__init__(required=False, choices=lambda: databases.choices(), **kwargs)


class QueueForm(Reason):
    backend = BackendField()
    queue = forms.CharField(max_length=100, strip=False)

    def clean_queue(self):
        queue = self.cleaned_data["queue"]
        if not queue.strip():
            raise ValidationError("Name a queue.", code="required")
        return queue


class QueuePauseForm(QueueForm):
    allow_unknown = forms.BooleanField(required=False)


class ScheduleForm(Reason):
    schedule = forms.CharField(max_length=200, strip=False)


class JobForm(Reason):
    backend = BackendField()
    job = IdField()


class RunForm(forms.Form):
    run = IdField()


class LetterForm(forms.Form):
    backend = BackendField()
    letter = IdField()


class RevealForm(LetterForm):
    # The edit form's reveal is recorded as such: it is the one that lets masked values be
    # typed back in (an edit that replaces a mask needs a reveal of the letter first).
    for_edit = forms.BooleanField(required=False)


class EditReplayForm(EditForm):
    letter = IdField()


class ExportForm(FilterForm):
    ASK = "Ask for format=csv or format=jsonl."
    format = forms.ChoiceField(
        choices=[(f, f) for f in exports.FORMATS],
        error_messages={"required": ASK, "invalid_choice": ASK},
    )


class SignalForm(Reason):
    workflow = IdField()
    event = forms.CharField(max_length=200)
    payload = forms.CharField(required=False, strip=False, help_text="JSON; {} when empty.")

    def clean_payload(self):
        text = self.cleaned_data["payload"]
        if not text.strip():
            return {}
        try:
            return store.loads(text)
        except ValueError as exc:
            raise ValidationError(f"Not JSON: {exc}", code="invalid") from None


# --- queues -------------------------------------------------------------------------------------


def _backend(cleaned) -> databases.QueueBackend:
    return databases.named(cleaned.get("backend")) or databases.default()


def _queue_change(verb: str):
    done = "paused" if verb == "pause" else "resumed"
    state = "paused" if verb == "pause" else "running"

    def carry_out(actor: Actor, cleaned) -> Outcome:
        queue = cleaned["queue"]
        try:
            queue = store.queues.checked_name(queue)  # as the store names it (NFC)
            changed = services.control_queue(
                verb,
                queue,
                operator=actor.user,
                reason=cleaned["reason"],
                allow_unknown=cleaned.get("allow_unknown", False),
                channel=actor.channel,
                using=_backend(cleaned).database,
            )
        except store.queues.UnknownQueue as exc:
            raise Conflict(f"Nothing changed: {exc}", code="unknown_queue") from None
        except ValueError as exc:
            raise Invalid(f"Nothing changed: {exc}.") from None
        if not changed:
            return Outcome(False, f"Queue {queue} was already {state}: nothing changed.")
        return Outcome(True, f"Queue {queue} {done}.", {"queue": queue, "state": state})

    return carry_out


register(
    Action(
        "queue.pause",
        "queue",
        "Pause",
        "Stop every worker claiming from a queue (running jobs finish).",
        (PAUSE_QUEUE,),
        QueuePauseForm,
        _queue_change("pause"),
    )
)
register(
    Action(
        "queue.resume",
        "queue",
        "Resume",
        "Let workers claim from a paused queue again.",
        (PAUSE_QUEUE,),
        QueueForm,
        _queue_change("resume"),
    )
)


# --- schedules -----------------------------------------------------------------------------------


def _schedule_change(verb: str):
    def carry_out(actor: Actor, cleaned) -> Outcome:
        name = cleaned["schedule"]
        if not Schedule.objects.filter(name=name).exists():
            raise Gone("schedule named " + repr(name), hint="The schedules page lists them.")
        try:
            outcome = services.act_on_schedule(
                verb, name, operator=actor.user, reason=cleaned["reason"], channel=actor.channel
            )
        except ValueError as exc:
            raise Conflict(f"Nothing changed: {exc}.") from None
        if not outcome:  # a pause of a paused schedule, a resume of a running one
            state = "paused" if verb == "pause" else "running"
            return Outcome(False, f"{name} was already {state}: nothing changed.")
        if verb == "run":
            return Outcome(
                True, f"{name}: job {outcome.pk} enqueued.", {"schedule": name, "job": outcome.pk}
            )
        done = "paused" if verb == "pause" else "resumed"
        return Outcome(True, f"{name} {done}.", {"schedule": name})

    return carry_out


for _verb, _label, _summary in (
    ("pause", "Pause", "Stop a periodic job's ticks from enqueueing until resumed."),
    ("resume", "Resume", "Let a paused periodic job's ticks enqueue again."),
    ("run", "Run now", "Enqueue a periodic job's task now, outside its schedule."),
):
    register(
        Action(
            f"schedule.{_verb}",
            "schedule",
            _label,
            _summary,
            (MANAGE_SCHEDULE,),
            ScheduleForm,
            _schedule_change(_verb),
        )
    )


# --- jobs -----------------------------------------------------------------------------------------

JOB_VERBS = {"run_now": "made due now", "cancel": "cancelled"}  # of a selection of jobs


def _job_change(verb: str, *, retrying_only: bool = False):
    def carry_out(actor: Actor, cleaned) -> Outcome:
        backend, pk = _backend(cleaned), cleaned["job"]
        job = Job.objects.using(backend.database).filter(pk=pk).first()
        if job is None:
            raise Gone("job", pk, "Finished jobs may have been pruned, or the id has a typo.")
        if retrying_only and JobStatus.of(job, timezone.now()) != JobStatus.RETRYING:
            raise Conflict(f"Nothing changed: job {pk} is not waiting for a retry.")
        changed = services.act_on_jobs(
            verb,
            [pk],
            operator=actor.user,
            reason=cleaned["reason"],
            channel=actor.channel,
            using=backend.database,
        )
        if changed:
            done = "is due now" if verb == "run_now" else "cancelled"
            paused = store.queues.paused(backend.database).get(job.queue_name)
            if verb == "run_now" and paused is not None:
                # Due, and yet no worker claims it: say why rather than leave them waiting.
                done += (
                    f", but its queue {job.queue_name} is paused (by {paused.paused_by}): it "
                    "runs once the queue is resumed"
                )
            return Outcome(True, f"Job {pk} {done}.", {"job": pk, "queue_paused": bool(paused)})
        why = "for a later time" if verb == "run_now" else "(it started, finished or is gone)"
        return Outcome(False, f"Nothing changed: job {pk} is not waiting {why}.", {"job": pk})

    return carry_out


def _may_search_payloads(actor: Actor) -> bool:
    """A search looks in payload values only for one who may see them unmasked, or it would
    tell which rows hold a masked value."""
    return actor.user.has_perm(redaction.REVEAL_PERMISSION)


def _select_jobs(actor: Actor, cleaned) -> tuple[list[int], dict, str]:
    backend = _backend(cleaned)
    if cleaned["select_all"]:
        f = cleaned.form.to_filter(payload_search=_may_search_payloads(actor))
        ids = jobs.matching_ids(f, setting("MAX_SELECTION"), using=backend.database)
        recorded = dict(cleaned.form.echo())
        # A bound as the moment it meant when frozen ("1h" read later would mean another hour).
        for name in ("since", "until"):
            if bound := cleaned.get(name):
                recorded[name] = bound.at.isoformat()
        return ids, recorded, backend.database
    return cleaned["ids"], {}, backend.database


def _apply_jobs(actor: Actor, cleaned, selection: Selection) -> Outcome:
    if selection.applied_at is not None:
        raise Conflict("This selection was already confirmed.")
    changed = services.apply_job_selection(
        selection, reason=cleaned["reason"], channel=actor.channel
    )
    verb = JOB_VERBS[selection.action]
    skipped = len(selection.ids) - len(changed)
    message = f"{len(changed)} job{'s' if len(changed) != 1 else ''} {verb}" + (
        f"; {skipped} skipped (no longer waiting)." if skipped else "."
    )
    return Outcome(
        bool(changed),
        message,
        {"selection": selection.pk, "changed_ids": changed, "skipped": skipped},
    )


register(
    Action(
        "job.run_now",
        "job",
        "Run now",
        "Make a scheduled or retrying job due now.",
        (ACT_ON_JOB,),
        JobForm,
        _job_change("run_now"),
    )
)
register(
    Action(
        "job.retry_now",
        "job",
        "Retry now",
        "Make a job waiting out its backoff retry now.",
        (ACT_ON_JOB,),
        JobForm,
        _job_change("run_now", retrying_only=True),
        audited_as="job.run_now",
    )
)
register(
    Action(
        "job.cancel",
        "job",
        "Cancel",
        "Cancel a job that has not started: it never will.",
        (ACT_ON_JOB,),
        JobForm,
        _job_change("cancel"),
    )
)
for _verb, _label in (("run_now", "Run now"), ("cancel", "Cancel")):
    register(
        Action(
            f"jobs.{_verb}",
            "jobs",
            _label,
            f"{_label}: the ticked jobs, or every job matching a filter, previewed first.",
            (ACT_ON_JOB,),
            JobConfirmForm,
            _apply_jobs,
            selection_kind=Selection.Kind.JOBS,
            select_form=JobsSelectionForm,
            select=_select_jobs,
            audited_as=f"job.{_verb}",
        )
    )


# --- dead letters -------------------------------------------------------------------------------


def _select_letters(actor: Actor, cleaned) -> tuple[list[int], dict, str]:
    database = _backend(cleaned).database
    if cleaned["select_all"]:
        f = cleaned.form.to_filter(payload_search=_may_search_payloads(actor))
        if limit := cleaned.get("limit"):
            return selectors.matching_ids(f, first=limit), f.as_json() | {"limit": limit}, database
        return selectors.matching_ids(f), f.as_json(), database
    return cleaned["ids"], {}, database


def _start_run(actor: Actor, cleaned, selection: Selection) -> Outcome:
    if hasattr(selection, "run"):
        raise Conflict(f"This selection was already confirmed: run #{selection.run.pk}.")
    if cleaned["allow_poisoned"]:
        actor.require(POISON)
    run = services.start_run(
        operator=actor.user,
        selection=selection,
        reason=cleaned["reason"],
        allow_poisoned=cleaned["allow_poisoned"],
        rate=cleaned["rate"],
        canary_size=cleaned["canary_size"],
        canary_max_dead_share=cleaned["canary_max_dead_share"],
        to_queue=cleaned["to_queue"],
        allow_unknown_queue=cleaned["allow_unknown_queue"],
        channel=actor.channel,
    )
    awaiting = run.state == RunState.AWAITING
    where = f", to queue {run.to_queue}" if run.to_queue else ""
    message = (
        f"Run #{run.pk}{where} is awaiting a second person's approval."
        if awaiting
        else f"Run #{run.pk}{where} has started."
    )
    data = {"run": run.pk, "state": run.state}
    if run.to_queue:
        data["to_queue"] = run.to_queue
    if selection.action == LetterAction.REPLAY:
        paused = _paused_destinations(selection, run.to_queue)
        data["paused_queues"] = paused
        if paused:
            names, several = ", ".join(paused), len(paused) > 1
            message += (
                f" Queue{'s' if several else ''} {names} {'are' if several else 'is'} paused: "
                f"the replayed jobs wait there until {'they are' if several else 'it is'} "
                "resumed."
            )
    return Outcome(True, message, data, run)


def _paused_destinations(selection: Selection, to_queue: str) -> list[str]:
    """The paused queues a replay of `selection` sends jobs to: its destination, else the
    letters' own queues (a replay there is allowed, and said)."""
    paused = store.queues.paused(selection.database)
    if not paused:
        return []
    if to_queue:
        return [to_queue] if to_queue in paused else []
    return sorted(
        DeadLetter.objects.using(selection.database)
        .filter(store.Among(selection.ids), queue_name__in=list(paused))
        .order_by()
        .values_list("queue_name", flat=True)
        .distinct()
    )


for _verb, _label in ((LetterAction.REPLAY, "Replay"), (LetterAction.DISCARD, "Discard")):
    register(
        Action(
            f"letters.{_verb}",
            "letters",
            _label,
            f"{_label} the ticked dead letters, or every one matching a filter, in bounded "
            "batches, previewed first.",
            (ACTION_PERMISSION[_verb],),
            ConfirmForm,
            _start_run,
            selection_kind=Selection.Kind.LETTERS,
            select_form=LetterSelectionForm,
            select=_select_letters,
            two_person=True,
        )
    )


def _letter(cleaned) -> tuple[databases.QueueBackend, DeadLetter]:
    backend = _backend(cleaned)
    letter = DeadLetter.objects.using(backend.database).filter(pk=cleaned["letter"]).first()
    if letter is None:
        raise Gone(
            "dead letter",
            cleaned["letter"],
            "It may have been discarded and pruned, or the id has a typo.",
        )
    return backend, letter


def _reveal(actor: Actor, cleaned) -> Outcome:
    backend, letter = _letter(cleaned)
    detail = selectors.detail(letter.pk, redacted=False, using=backend.database)
    with transaction.atomic():
        via = "edit" if cleaned["for_edit"] else actor.channel
        redaction.record_reveal(actor.user, letter, via=via, channel=actor.channel)
    return Outcome(
        False,
        f"Dead letter {letter.pk} shown unmasked (recorded).",
        {"letter": letter.pk, "args": letter.args, "kwargs": letter.kwargs},
        (backend, detail),
    )


def _edit_replay(actor: Actor, cleaned) -> Outcome:
    # Of the default database only: an edit's record (PayloadEdit) points at a letter there.
    _, letter = _letter({"letter": cleaned["letter"], "backend": ""})
    actor.require(ACTION_PERMISSION[LetterAction.REPLAY])
    if cleaned["allow_poisoned"]:
        actor.require(POISON)
    edit = services.edit_and_replay(
        operator=actor.user,
        dead_letter_id=letter.pk,
        args=cleaned["args"],
        kwargs=cleaned["kwargs"],
        reason=cleaned["reason"],
        allow_poisoned=cleaned["allow_poisoned"],
        channel=actor.channel,
    )
    return Outcome(
        True,
        f"Replayed with the edited payload: job {edit.job_id} is queued.",
        {"letter": letter.pk, "edit": edit.pk, "job": edit.job_id},
        edit,
    )


def _export(actor: Actor, cleaned) -> Outcome:
    f = cleaned.form.to_filter(payload_search=_may_search_payloads(actor))
    fmt = cleaned["format"]
    record, chunks = exports.export(operator=actor.user, filter=f, fmt=fmt, channel=actor.channel)
    return Outcome(
        False,
        f"Export {exports.filename(record)} started.",
        {"filename": exports.filename(record), "format": fmt},
        (record, chunks),
    )


register(
    Action(
        "letter.reveal",
        "letter",
        "Reveal",
        "Show a dead letter's masked payload values (each reveal recorded).",
        (redaction.REVEAL_PERMISSION,),
        RevealForm,
        _reveal,
        reveals=True,
    )
)
register(
    Action(
        "letter.edit_replay",
        "letter",
        "Edit and replay",
        "Replay one pending dead letter with an edited payload.",
        (EDIT,),
        EditReplayForm,
        _edit_replay,
    )
)
register(
    Action(
        "letters.export",
        "letters",
        "Export",
        "Download the dead letters matching a filter as CSV or JSON Lines, masked.",
        (EXPORT,),
        ExportForm,
        _export,
    )
)


# --- replay runs ----------------------------------------------------------------------------------


def _run(cleaned) -> ReplayRun:
    run = ReplayRun.objects.filter(pk=cleaned["run"]).select_related("selection").first()
    if run is None:
        raise Gone("replay run", cleaned["run"], "The audit log lists every run.")
    return run


def _run_change(verb: str):
    handler = {"pause": services.pause, "resume": services.resume, "cancel": services.cancel}[verb]

    def carry_out(actor: Actor, cleaned) -> Outcome:
        run = _run(cleaned)
        actor.require(ACTION_PERMISSION[run.action])
        if not handler(run, operator=actor.user, channel=actor.channel):
            return Outcome(
                False,
                f"The run is {run.get_state_display().lower()}; nothing to {verb}.",
                {"run": run.pk, "state": run.state},
                run,
            )
        return Outcome(
            True,
            f"Run #{run.pk} {run.get_state_display().lower()}.",
            {"run": run.pk, "state": run.state},
            run,
        )

    return carry_out


def _resume_past_canary(actor: Actor, cleaned) -> Outcome:
    run = _run(cleaned)
    actor.require(ACTION_PERMISSION[run.action])
    if run.state != RunState.HALTED:
        raise Conflict(
            f"The run is {run.get_state_display().lower()}: only a run its canary halted "
            "resumes past the canary."
        )
    services.resume(run, operator=actor.user, channel=actor.channel)
    return Outcome(
        True,
        f"Run #{run.pk} goes on past its canary.",
        {"run": run.pk, "state": run.state},
        run,
    )


def _approve(actor: Actor, cleaned) -> Outcome:
    run = _run(cleaned)
    actor.require(ACTION_PERMISSION[run.action])
    if run.allow_poisoned:
        actor.require(POISON)
    services.approve(run, operator=actor.user, channel=actor.channel)
    return Outcome(
        True, f"Approved: run #{run.pk} has started.", {"run": run.pk, "state": run.state}, run
    )


for _verb, _label, _summary in (
    ("pause", "Pause", "Pause a running replay run after its current batch."),
    ("resume", "Resume", "Continue a paused (or stuck) replay run."),
    ("cancel", "Cancel", "Stop a replay run for good; what it did stays done."),
):
    register(
        Action(
            f"run.{_verb}",
            "run",
            _label,
            _summary,
            (),
            RunForm,
            _run_change(_verb),
            audited_as={"pause": "run.paused", "resume": "run.resumed", "cancel": "run.cancelled"}[
                _verb
            ],
        )
    )
register(
    Action(
        "run.resume_past_canary",
        "run",
        "Resume past the canary",
        "Go on with a run its canary halted: the operator's deliberate override.",
        (),
        RunForm,
        _resume_past_canary,
        audited_as="run.resumed",
    )
)
register(
    Action(
        "run.approve",
        "run",
        "Approve",
        "The two-person rule: a second person approves a run awaiting approval.",
        (),
        RunForm,
        _approve,
        audited_as="run.approved",
    )
)


# --- workflows ----------------------------------------------------------------------------------


def _signal(actor: Actor, cleaned) -> Outcome:
    pk, event = cleaned["workflow"], cleaned["event"]
    with transaction.atomic():
        try:
            # A workflow enqueued and not at its first step yet takes the signal too (its record
            # begins with it), as jobqueue.workflows.signal takes it from code.
            sent = workflow_api.signal(pk, event, cleaned["payload"])
        except ValueError as exc:
            raise Invalid(f"Nothing changed: {exc}.") from None
        except LookupError:
            raise Gone(
                "workflow", pk, "A workflow's id is the id of the job first enqueued for it."
            ) from None
        # Read before the signal commits: the state it met, not one a worker made after.
        state, waiting_for = Workflow.objects.values_list("state", "waiting_for").get(pk=pk)
        woke = sent and state == WorkflowState.WAITING and waiting_for == event
        data = {"workflow": pk, "event": event, "woke": woke, "state": state}
        if not sent:
            return Outcome(False, f"Workflow {pk} already had {event!r}: nothing changed.", data)
        store.audit.record(
            "workflow.signal",
            actor=actor.name,
            channel=actor.channel,
            target_kind="workflow",
            targets=[pk],
            reason=cleaned["reason"],
            params={"event": event, "payload": redaction.redact(cleaned["payload"])},
        )
    return Outcome(True, f"Workflow {pk}: {event!r} sent{_signal_met(state, woke, event)}.", data)


def _signal_met(state: str, woke: bool, event: str) -> str:
    """What the signal does now: whoever sent it learns whether anything will read it."""
    if woke:
        return "; it was waiting for it and runs again now"
    if state == WorkflowState.DONE:
        return ", but the workflow is done: nothing will read it"
    if state == WorkflowState.DEAD:
        return (
            f"; the workflow is dead: in a replay of its dead letter, a wait_for({event!r}) it "
            "reaches returns it"
        )
    return f"; the workflow is {state}: a wait_for({event!r}) it reaches returns it at once"


register(
    Action(
        "workflow.signal",
        "workflow",
        "Signal",
        "Send an event to a workflow: a wait_for(event) it is in returns the payload.",
        (ACT_ON_JOB,),
        SignalForm,
        _signal,
    )
)


# --- workers ---------------------------------------------------------------------------------


class WorkerForm(Reason):
    """A worker by its id, or every worker of a host."""

    backend = BackendField()
    worker = forms.CharField(required=False, max_length=255, strip=False)
    host = forms.CharField(required=False, max_length=255, strip=False)

    def clean(self):
        cleaned = super().clean()
        if bool(cleaned.get("worker")) == bool(cleaned.get("host")):
            raise ValidationError("Name a worker or a host (one of the two).", code="required")
        return cleaned


def _worker_command(command: str):
    def carry_out(actor: Actor, cleaned) -> Outcome:
        backend = _backend(cleaned)
        worker, host = cleaned.get("worker"), cleaned.get("host")
        known = WorkerRecord.objects.using(backend.database)
        if not known.filter(**({"worker_id": worker} if worker else {"host": host})).exists():
            raise Gone(
                f"worker {worker!r}" if worker else f"worker on host {host!r}",
                hint="The health page lists the workers that sent a heartbeat.",
            )
        told = store.workers.command(
            command,
            workers=[worker] if worker else [],
            host=host or "",
            actor=actor.name,
            reason=cleaned["reason"],
            channel=actor.channel,
            using=backend.database,
        )
        done = "quiet" if command == "quiet" else "stopping"
        if not told:
            return Outcome(False, f"Nothing changed: already {done}.", {"workers": []})
        names = ", ".join(told)
        return Outcome(
            True,
            f"{names}: {done} at its next heartbeat (within seconds).",
            {"workers": told},
        )

    return carry_out


register(
    Action(
        "worker.quiet",
        "worker",
        "Quiet",
        "A worker (or every worker of a host) claims nothing more and finishes what it holds.",
        (CONTROL_WORKER,),
        WorkerForm,
        _worker_command("quiet"),
    )
)
register(
    Action(
        "worker.stop",
        "worker",
        "Stop",
        "A worker (or every worker of a host) finishes what it holds, then exits.",
        (CONTROL_WORKER,),
        WorkerForm,
        _worker_command("stop"),
    )
)


# --- API tokens ------------------------------------------------------------------------------


class TokenForm(forms.Form):
    name = forms.CharField(max_length=tokens.NAME_CHARS, help_text="What it is for.")
    scopes = forms.MultipleChoiceField(
        choices=[("read", "read (every GET)"), ("act", "act (every POST)")],
        widget=forms.CheckboxSelectMultiple,
        initial=["read"],
    )
    days = forms.IntegerField(
        min_value=1, max_value=tokens.MAX_DAYS, initial=tokens.DEFAULT_DAYS, label="Expires in days"
    )


class TokenRevokeForm(forms.Form):
    token = IdField()


def _token_create(actor: Actor, cleaned) -> Outcome:
    try:
        made = tokens.create(
            actor.user,
            name=cleaned["name"],
            scopes=cleaned["scopes"],
            days=cleaned["days"],
            channel=actor.channel,
        )
    except tokens.TokenError as exc:
        raise Invalid(f"No token made: {exc}") from None
    token = made.token
    return Outcome(
        True,
        f"Token {token.label} made; its text is shown this once.",
        {
            "id": token.pk,
            "label": token.label,
            "scopes": token.scopes,
            "expires_at": token.expires_at.isoformat(),
            "token": made.text,
        },
        made,
    )


def _token_revoke(actor: Actor, cleaned) -> Outcome:
    token = ApiToken.objects.filter(pk=cleaned["token"]).first()
    if token is None:
        raise Gone("API token", cleaned["token"], "The API tokens page lists yours.")
    if not tokens.may_revoke(actor.user, token):
        raise Missing(REVOKE_ANY_TOKEN)
    try:
        tokens.revoke(token.pk, operator=actor.user, channel=actor.channel)
    except tokens.TokenError as exc:
        raise Conflict(f"Nothing changed: {exc}") from None
    return Outcome(True, f"Token {token.label} ({token.name}) revoked.", {"id": token.pk}, token)


register(
    Action(
        "token.create",
        "token",
        "Create",
        "Make an API token for yourself (its text is shown once), with scopes and an expiry.",
        (),
        TokenForm,
        _token_create,
        api=False,
        reveals=True,
    )
)
register(
    Action(
        "token.revoke",
        "token",
        "Revoke",
        "Revoke an API token: yours, or anyone's with the permission to.",
        (),
        TokenRevokeForm,
        _token_revoke,
    )
)


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


__all__ = [
    "REGISTRY",
    "Action",
    "ActionError",
    "Actor",
    "Conflict",
    "Gone",
    "Invalid",
    "Missing",
    "Outcome",
    "Unknown",
    "confirm",
    "describe",
    "freeze",
    "get",
    "own_selection",
    "perform",
    "register",
]
