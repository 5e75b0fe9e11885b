"""The audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema

from ... import selectors
from ...forms import (
    AuditFilterForm,
)
from ..core import REFUSALS
from ..door import Door, route
from .kit import BackendForm, backend_of, fields, router, valid


class EntryOut(Schema):
    id: int
    seq: int
    at: datetime
    actor: str
    channel: str
    token: str
    action: str
    target_kind: str
    targets: list[str]
    reason: str
    params: dict[str, Any]
    outcome: str


class EntriesOut(Schema):
    backend: str
    entries: list[EntryOut]
    next: str | None


@route(
    router.get,
    "/audit",
    door=Door(
        query=fields(BackendForm)
        | fields(AuditFilterForm, *AuditFilterForm.FILTERS[:-1])
        # The Audit page's name for the entries' cursor.
        | {"after": AuditFilterForm.base_fields["entries_after"]}
    ),
    response={200: EntriesOut, **REFUSALS},
    summary="The audit log",
)
def audit(request):
    """The audit log of a backend's database, newest first, by who, action, target, channel
    and day (the Audit page's filters); `next` is the `after` of the older page."""
    backend = backend_of(request)
    data = request.GET.copy()
    if "after" in data:  # the Audit page's name for the entries' cursor
        data.setlist("entries_after", data.getlist("after"))
    form = valid(AuditFilterForm(data))
    found = selectors.audit_entries(
        form.to_filter(), after=form.cleaned_data.get("entries_after"), using=backend.database
    )
    return {
        "backend": backend.name,
        "entries": [
            {
                "id": e.pk,
                "seq": e.seq,
                "at": e.at,
                "actor": e.actor,
                "channel": e.channel,
                "token": e.token,
                "action": e.action,
                "target_kind": e.target_kind,
                "targets": [str(t) for t in e.targets],
                "reason": e.reason,
                "params": e.params if isinstance(e.params, dict) else {},
                "outcome": e.outcome,
            }
            for e in found.rows
        ],
        "next": found.next_cursor,
    }
