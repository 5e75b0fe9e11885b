"""The forms of the actions that have none of their own elsewhere (deadletters.forms)."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from jobqueue import store
from jobqueue.conf import setting

from .. import databases, exports
from ..forms import (
    EditForm,
    FilterForm,
    IdField,
    JobSelectionForm,
    SelectionForm,
)
from .kernel import (
    REASON_CHARS,
)


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
