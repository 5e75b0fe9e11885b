"""What every read shares: the router, input validation, the backend a read names, ids,
masked payloads, a page's links."""

from __future__ import annotations

import json

from django import forms
from ninja import Router, Schema

from ... import databases
from ...forms import (
    parse_id,
    refusal,
)
from ..core import REFUSALS, Error, Refused
from ..door import Door

router = Router(tags=["reads"])
WITH_404 = {**REFUSALS, 404: Error}


def valid(form: forms.Form) -> forms.Form:
    """The form, valid, or a 400 with its messages."""
    if not form.is_valid():
        raise Refused(400, f"Invalid filter: {refusal(form)}")
    return form


class BackendForm(forms.Form):
    backend = forms.ChoiceField(required=False, choices=lambda: databases.choices())


def fields(form: type[forms.Form], *names: str) -> dict[str, forms.Field]:
    """The fields of `form` (those named; none named: all) a read takes as its parameters."""
    found = form.base_fields
    return {name: found[name] for name in names or found}


BY_BACKEND = Door(query=fields(BackendForm))


def backend_of(request) -> databases.QueueBackend:
    """The queue backend the `backend` parameter names (none: the default one), else 400."""
    form = valid(BackendForm(request.GET))
    return databases.named(form.cleaned_data.get("backend"))


def row_id(text: str, what: str) -> int:
    """A path's id, or the 404 a page gives for a URL that names no row."""
    try:
        return parse_id(text)
    except forms.ValidationError:
        raise Refused(404, f"No {what} {str(text)[:40]!r}: ids are whole numbers.") from None


def masked_json(text: str):
    """A page's pretty JSON back as a value: the API shows exactly what the page shows."""
    return json.loads(text)


class Page(Schema):
    next: str | None = None
    prev: str | None = None
