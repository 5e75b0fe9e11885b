import re

from django import forms
from django.core.exceptions import ValidationError
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.models import MAX_ID, AuditEntry, DeadLetterState
from jobqueue.store import sources

from . import conf, databases, timefilter
from .jobs import STATES as JOB_STATES
from .jobs import JobFilter
from .models import Action
from .paging import Keyset
from .selectors import LETTERS, AuditFilter, ListFilter

ORDER_CHOICES = [("newest", "Newest first"), ("oldest", "Oldest first")]

DIGITS = re.compile(r"[0-9]{1,19}")


def parse_id(value) -> int:
    """`value` as a row id (1..MAX_ID), or ValidationError: the one parse of every id a request
    names. ASCII digits only: str.isdigit() passes "²", which int() then refuses."""
    text = str(value).strip()
    if not DIGITS.fullmatch(text) or not 1 <= int(text) <= MAX_ID:
        raise ValidationError(
            "%(value)s is not an id (a whole number from 1 to %(max)s).",
            code="invalid",
            params={"value": repr(text[:40]), "max": MAX_ID},
        )
    return int(text)


class IdField(forms.Field):
    def to_python(self, value):
        return None if value in self.empty_values else parse_id(value)


# parse_id's rule for a list joined by commas: a select-all of 100,000 ids is parsed in one
# match, a third of the time of one parse_id each (half of freezing it, issue 47).
DIGITS_LIST = re.compile(r"[0-9]{1,19}(?:,[0-9]{1,19})*")


def parse_ids(values) -> list[int]:
    """Each of `values` as a row id, or ValidationError for the first that is none: what
    parse_id says of each, at once."""
    texts = [str(value).strip() for value in values]
    joined = ",".join(texts)
    # As many commas as joins: no text held one, so each matched on its own.
    if joined.count(",") == len(texts) - 1 and DIGITS_LIST.fullmatch(joined):
        ids = list(map(int, texts))
        if min(ids) >= 1 and max(ids) <= MAX_ID:
            return ids
    return [parse_id(value) for value in values]


class IdListField(forms.Field):
    """Repeated ids (`ids=1&ids=2`), each parsed by parse_id; one bad id refuses them all."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value):
        if not value:
            return []
        if isinstance(value, str):
            value = [value]
        return parse_ids(value)


class TimeBoundInput(forms.TextInput):
    """A time bound's text input with the usual choices offered beside it (a datalist): a text
    input, not `type="date"` or `datetime-local`, which show the browser's locale (mm/dd/yyyy in
    en-US) and take no "1h" or "deploy", while everything else on the console is ISO."""

    def __init__(self, attrs=None):
        super().__init__(
            {
                "placeholder": "1h, deploy, 2026-12-04 14:30",
                "title": timefilter.ACCEPTED[0].upper() + timefilter.ACCEPTED[1:],
                "size": 16,
                "maxlength": timefilter.MAX_CHARS,
                "autocomplete": "off",
                "spellcheck": "false",
                **(attrs or {}),
            }
        )

    def render(self, name, value, attrs=None, renderer=None):
        listed = f"{(attrs or {}).get('id') or name}-choices"
        options = format_html_join(
            "", '<option value="{}"></option>', ((c,) for c in timefilter.SUGGESTED)
        )
        return format_html(
            '{}<datalist id="{}">{}</datalist>',
            super().render(name, value, {**(attrs or {}), "list": listed}, renderer),
            listed,
            options,
        )


class TimeBoundField(forms.CharField):
    """A time filter's bound (deadletters.timefilter): a day, a time of day, a span back from
    now, or the last deploy; cleaned to a timefilter.Bound. `end`: the range's end (a day is
    then included whole)."""

    widget = TimeBoundInput

    def __init__(self, *, end: bool = False, **kwargs):
        kwargs.setdefault("max_length", timefilter.MAX_CHARS)
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        self.end = end

    def to_python(self, value):
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return timefilter.parse(text, end=self.end)
        except timefilter.BadBound as exc:
            raise ValidationError(str(exc), code="invalid") from None

    def validate(self, value):
        # The parse validated it; CharField's checks would read the Bound as text.
        if value is None and self.required:
            raise ValidationError(self.error_messages["required"], code="required")

    def run_validators(self, value):
        pass

    def prepare_value(self, value):
        return value.text if isinstance(value, timefilter.Bound) else value


def moment(bound):
    """A cleaned bound's moment, or None."""
    return bound.at if bound is not None else None


def check_range(form, since="since", until="until"):
    """The range's end before its start: named on the end's field."""
    data = form.cleaned_data
    start, end = data.get(since), data.get(until)
    if start is not None and end is not None and start.at >= end.at:
        form.add_error(until, f"The end ({end.label}) is not after the start ({start.label}).")


class CursorField(forms.CharField):
    """A page cursor of the list's keyset order (deadletters.paging), kept as its text (the
    paginator decodes it)."""

    def __init__(self, *args, keyset: Keyset = LETTERS, **kwargs):
        super().__init__(*args, **kwargs)
        self.keyset = keyset

    def validate(self, value):
        super().validate(value)
        if value and self.keyset.decode(value) is None:
            raise ValidationError("Not a page cursor of this list.", code="invalid")


def refusal(form) -> str:
    """A form's errors as one line, for a message or a 400 body."""
    return "; ".join(
        f"{name}: {' '.join(errors)}" if name != "__all__" else " ".join(errors)
        for name, errors in form.errors.items()
    )


class FilterForm(forms.Form):
    """The list's filters, read from and written to the URL query string.

    Only these fields, and only once valid, are echoed back into links and the selection form:
    anything else in a URL (`ids`, `select_all`, a cursor, an unknown name) stays out of both.
    """

    # Which queue database (deadletters.databases): none chosen, the default backend's. Shown
    # only with more than one.
    backend = forms.ChoiceField(required=False, choices=lambda: databases.choices())
    job_type = forms.CharField(
        required=False,
        max_length=255,
        widget=forms.TextInput(attrs={"list": "job-types", "placeholder": "any"}),
    )
    queue = forms.CharField(
        required=False, max_length=100, widget=forms.TextInput(attrs={"placeholder": "any"})
    )
    error_class = forms.CharField(
        required=False,
        max_length=255,
        widget=forms.TextInput(attrs={"list": "error-classes", "placeholder": "any"}),
    )
    source = forms.ChoiceField(
        required=False,
        choices=lambda: [("", "Any source"), *sources.choices()],
    )
    q = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"type": "search"}),
    )
    # The search box's label for who may search payload values (True) and who may not:
    # views.base.filter_for sets it.
    SEARCH_LABELS = {True: "Search error and payload", False: "Search error text"}
    since = TimeBoundField(label="From")
    until = TimeBoundField(end=True, label="To")
    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *DeadLetterState.choices])
    fingerprint = forms.RegexField(
        required=False,
        regex=r"^[0-9a-f]{16}$",
        max_length=16,
        label="Cause",
        error_messages={"invalid": "an error fingerprint is 16 hex characters"},
        widget=forms.TextInput(attrs={"placeholder": "any", "size": 16}),
    )
    order = forms.ChoiceField(required=False, choices=ORDER_CHOICES)

    FILTER_FIELDS = (
        "backend",
        "job_type",
        "queue",
        "error_class",
        "source",
        "q",
        "since",
        "until",
        "state",
        "fingerprint",
    )
    ECHOED = (*FILTER_FIELDS, "order")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # One queue database: no Backend filter to show (its one choice is the default).
        self.hidden_filters = () if databases.multiple() else ("backend",)

    def clean(self):
        data = super().clean()
        check_range(self)
        return data

    def to_filter(self, *, payload_search: bool = False) -> ListFilter:
        """The valid fields as a filter; the template names the invalid ones it ignored.
        `payload_search`: the search looks in payload values too, for a user who may see them
        unmasked (otherwise a search would tell which letters hold a masked value)."""
        self.is_valid()
        data = self.cleaned_data
        return ListFilter(
            payload_search=payload_search,
            backend=data.get("backend", ""),
            job_type=data.get("job_type", ""),
            queue=data.get("queue", ""),
            error_class=data.get("error_class", ""),
            source=data.get("source", ""),
            q=data.get("q", ""),
            since=moment(data.get("since")),
            until=moment(data.get("until")),
            state=data.get("state", ""),
            fingerprint=data.get("fingerprint", ""),
            order=data.get("order") or "newest",
        )

    def echo(self) -> list[tuple[str, str]]:
        """The applied filter fields (valid and set) as (name, text) in their cleaned form."""
        self.is_valid()
        return [
            (name, str(value)) for name in self.ECHOED if (value := self.cleaned_data.get(name))
        ]

    def query(self) -> str:
        return urlencode(self.echo())


class ListPageForm(FilterForm):
    """The list page: the filters plus the keyset cursors of its pager links."""

    after = CursorField(required=False, max_length=60)
    before = CursorField(required=False, max_length=60)


class SelectionForm(FilterForm):
    """The list's selection form: ticked ids, or "select all" of the filter it echoed."""

    action = forms.ChoiceField(choices=Action.choices)
    select_all = forms.ChoiceField(required=False, choices=[("1", "All matching the filter")])
    ids = IdListField(required=False)


# The audit log's actions and target kinds the Audit page offers (its inputs take any name of
# the same shape: a kind of action added later is found too).
AUDIT_ACTIONS = (
    "letters.replay",
    "letters.discard",
    "letter.edit_replay",
    "letter.reveal",
    "letters.export",
    "run.paused",
    "run.resumed",
    "run.cancelled",
    "run.approved",
    "run.halted",
    "job.run_now",
    "job.cancel",
    "queue.pause",
    "queue.resume",
    "schedule.pause",
    "schedule.resume",
    "schedule.run",
    "workflow.signal",
    "worker.quiet",
    "worker.stop",
    "deploy.mark",
    "audit.export",
)
AUDIT_TARGET_KINDS = (
    "letter",
    "letters",
    "selection",
    "run",
    "job",
    "queue",
    "schedule",
    "workflow",
    "worker",
    "deploy",
)
ACTION_NAME = re.compile(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*")
KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")


class AuditFilterForm(forms.Form):
    """The Audit page's filters. As on the list, an invalid one is named on the page (in its
    field and above the entries) and the valid ones apply."""

    operator = forms.CharField(required=False, max_length=150, label="Who")
    action = forms.CharField(
        required=False,
        max_length=40,
        widget=forms.TextInput(attrs={"list": "audit-actions", "placeholder": "queue.pause"}),
    )
    target_kind = forms.CharField(
        required=False,
        max_length=20,
        label="Target kind",
        widget=forms.TextInput(attrs={"list": "audit-kinds", "placeholder": "job"}),
    )
    target = forms.CharField(
        required=False,
        max_length=255,
        widget=forms.TextInput(attrs={"placeholder": "an id or a name"}),
    )
    channel = forms.ChoiceField(required=False, choices=[("", "Any"), *AuditEntry.Channel.choices])
    since = TimeBoundField(label="From")
    until = TimeBoundField(end=True, label="To")
    job_type = forms.CharField(required=False, max_length=255)  # the replay runs' section
    before = IdField(required=False)  # the runs' page: older than this run
    entries_after = IdField(required=False)  # the audit log's page: older than this entry
    entries_before = IdField(required=False)  # the audit log's page: newer than this entry

    def clean_action(self):
        action = self.cleaned_data["action"]
        if action and not ACTION_NAME.fullmatch(action):
            raise ValidationError(
                "Not an action: a kind and a verb, e.g. queue.pause or letters.replay.",
                code="invalid",
            )
        return action

    def clean_target_kind(self):
        kind = self.cleaned_data["target_kind"]
        if kind and not KIND_NAME.fullmatch(kind):
            raise ValidationError(
                "Not a target kind: one word, e.g. job, queue, schedule, run or letter.",
                code="invalid",
            )
        return kind

    def clean(self):
        data = super().clean()
        if data.get("target") and not data.get("target_kind"):
            self.add_error(
                "target",
                "Say what kind of target it is too (Target kind: job, queue, schedule, run, "
                "letter, ...).",
            )
        check_range(self)
        return data

    def to_filter(self) -> AuditFilter:
        """The valid fields as a filter; the template names the invalid ones it ignored."""
        self.is_valid()
        data = self.cleaned_data
        return AuditFilter(
            operator=data.get("operator", ""),
            action=data.get("action", ""),
            target_kind=data.get("target_kind", ""),
            target=data.get("target", ""),
            channel=data.get("channel", ""),
            since=moment(data.get("since")),
            until=moment(data.get("until")),
            job_type=data.get("job_type", ""),
        )

    FILTERS = (
        "operator",
        "action",
        "target_kind",
        "target",
        "channel",
        "since",
        "until",
        "job_type",
    )

    def applied(self) -> list[tuple[str, str]]:
        """The applied filters as (name, value) pairs: the pager's links and the export form."""
        self.is_valid()
        return [
            (name, str(value)) for name in self.FILTERS if (value := self.cleaned_data.get(name))
        ]

    def query(self) -> str:
        """The applied filters for the pager link (the cursor is added there)."""
        return urlencode(self.applied())


class RunPageForm(forms.Form):
    after = IdField(required=False)


class ConfirmForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Why? e.g. receipt API fixed"}),
    )
    allow_poisoned = forms.BooleanField(required=False)
    rate = forms.FloatField(
        required=False,
        # The range itself is checked in clean_rate, with the message every entry point gives.
        widget=forms.NumberInput(attrs={"min": 0, "max": conf.MAX_REPLAY_RATE, "step": "any"}),
        help_text="Items per second for a background run; 0 or empty is unlimited.",
    )

    # A replay's canary (deadletters.services.start_run): empty is the setting's default. The
    # ranges are checked in the clean methods, with the messages the CLI and start-up give.
    canary_size = forms.IntegerField(
        required=False,
        initial=lambda: setting("CANARY_SIZE"),
        widget=forms.NumberInput(attrs={"min": 0, "max": conf.MAX_CANARY_SIZE, "step": 1}),
        help_text="Items replayed first, alone: the run waits for their jobs and halts itself "
        "if too many die again. 0 is none.",
    )
    canary_max_dead_share = forms.FloatField(
        required=False,
        initial=lambda: setting("CANARY_MAX_DEAD_SHARE"),
        widget=forms.NumberInput(attrs={"min": 0, "max": 1, "step": "any"}),
        help_text="The share of the canary that may die again (0 to 1) before the run halts.",
    )
    # A replay's destination (deadletters.services.check_destination, which every door calls:
    # the queue's name is checked here too, to be said beside the field).
    to_queue = forms.CharField(
        required=False,
        max_length=100,
        strip=False,
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
        help_text="The queue the replayed jobs go to; empty is each letter's own queue.",
    )
    allow_unknown_queue = forms.BooleanField(
        required=False,
        label="Send them to a new queue",
        help_text="A queue no worker has taken from and no setting or job names yet (refused "
        "otherwise, so that a typo cannot leave the jobs where nothing claims them).",
    )

    def clean_to_queue(self):
        queue = self.cleaned_data.get("to_queue", "")
        if queue == "":
            return ""
        try:
            return store.queues.checked_name(queue)
        except ValueError as exc:
            raise forms.ValidationError(f"Not a queue to replay to: {exc}.") from None

    def clean_rate(self):
        rate = self.cleaned_data.get("rate")
        if rate is None:
            return setting("REPLAY_RATE")
        try:
            return conf.validate_replay_rate(rate)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_canary_size(self):
        size = self.cleaned_data.get("canary_size")
        try:
            return conf.validate_canary_size(setting("CANARY_SIZE") if size is None else size)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_canary_max_dead_share(self):
        share = self.cleaned_data.get("canary_max_dead_share")
        try:
            return conf.validate_canary_share(
                setting("CANARY_MAX_DEAD_SHARE") if share is None else share
            )
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class JobFilterForm(forms.Form):
    """The jobs browser's filters and keyset cursors (job ids)."""

    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *JOB_STATES.items()])
    task = forms.CharField(required=False, max_length=255)
    queue = forms.CharField(required=False, max_length=100)
    key = forms.CharField(required=False, max_length=255)
    q = forms.CharField(required=False, max_length=200)
    SEARCH_LABELS = {True: "Text in arguments or errors", False: "Text in errors"}
    since = TimeBoundField(label="Enqueued from")
    until = TimeBoundField(end=True, label="Enqueued to")
    after = IdField(required=False)
    before = IdField(required=False)

    TEXT = ("state", "task", "queue", "key", "q")
    ECHOED = (*TEXT, "since", "until")

    def clean(self):
        data = super().clean()
        check_range(self)
        return data

    def to_filter(self, *, payload_search: bool = False) -> JobFilter:
        """The valid fields as a filter; the template names the invalid ones it ignored.
        `payload_search`: as FilterForm.to_filter's."""
        self.is_valid()
        data = self.cleaned_data
        return JobFilter(
            **{name: data.get(name) or "" for name in self.TEXT},
            since=moment(data.get("since")),
            until=moment(data.get("until")),
            payload_search=payload_search,
        )

    def echo(self) -> list[tuple[str, str]]:
        self.is_valid()
        return [
            (name, str(value)) for name in self.ECHOED if (value := self.cleaned_data.get(name))
        ]

    def query(self) -> str:
        return urlencode(self.echo())


JOB_ACTIONS = [("run_now", "Run now"), ("cancel", "Cancel")]


class JobSelectionForm(JobFilterForm):
    """The jobs list's selection: ticked ids, or "select all" of the filter it echoed."""

    action = forms.ChoiceField(choices=JOB_ACTIONS)
    select_all = forms.ChoiceField(required=False, choices=[("1", "All matching the filter")])
    ids = IdListField(required=False)


class JobConfirmForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Why? e.g. campaign called off"}),
    )


class EditForm(forms.Form):
    """Edit before replay: a letter's payload as JSON text, and why (kept in the audit). The
    text is parsed here; deadletters.edits checks the rest when the service replays it."""

    JSON_ATTRS = {"rows": 8, "spellcheck": "false", "autocomplete": "off", "class": "json"}

    args = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs=JSON_ATTRS),
        help_text="A JSON array: the positional arguments.",
    )
    kwargs = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs=JSON_ATTRS),
        help_text="A JSON object: the keyword arguments.",
    )
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Why? e.g. amount was in cents"}),
    )
    allow_poisoned = forms.BooleanField(required=False)

    def clean_args(self):
        return self._parsed("args", list)

    def clean_kwargs(self):
        return self._parsed("kwargs", dict)

    def _parsed(self, name, kind):
        from .edits import InvalidEdit, parse

        try:
            return parse(self.cleaned_data[name], kind, name)
        except InvalidEdit as exc:
            raise ValidationError(str(exc), code="invalid") from None
