from datetime import datetime, time, timedelta

from django import forms
from django.utils import timezone

from jobqueue.models import DeadLetterState

from . import conf
from .selectors import ListFilter

ORDER_CHOICES = [("newest", "Newest first"), ("oldest", "Oldest first")]


class FilterForm(forms.Form):
    """The list's filters, read from and written to the URL query string."""

    job_type = forms.CharField(required=False, max_length=255)
    queue = forms.CharField(required=False, max_length=100)
    error_class = forms.CharField(required=False, max_length=255)
    source = forms.ChoiceField(
        required=False,
        choices=[
            ("", "Any source"),
            ("jobqueue", "jobqueue"),
            ("outbox", "outbox"),
            ("django_q2", "django-q2"),
        ],
    )
    q = forms.CharField(required=False, max_length=200, label="Text in last error")
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *DeadLetterState.choices])
    order = forms.ChoiceField(required=False, choices=ORDER_CHOICES)

    def to_filter(self) -> ListFilter:
        """The valid fields as a filter; the template names the invalid ones it ignored."""
        self.is_valid()
        data = self.cleaned_data
        return ListFilter(
            job_type=data.get("job_type", ""),
            queue=data.get("queue", ""),
            error_class=data.get("error_class", ""),
            source=data.get("source", ""),
            q=data.get("q", ""),
            since=_day_start(data.get("since")),
            until=_day_start(data.get("until"), plus_days=1),
            state=data.get("state", ""),
            order=data.get("order") or "newest",
        )


def _day_start(day, plus_days=0):
    if day is None:
        return None
    moment = datetime.combine(day + timedelta(days=plus_days), time.min)
    return timezone.make_aware(moment, timezone.get_current_timezone())


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

    def clean_rate(self):
        rate = self.cleaned_data.get("rate")
        if rate is None:
            return conf.get("REPLAY_RATE")
        try:
            return conf.validate_replay_rate(rate)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
