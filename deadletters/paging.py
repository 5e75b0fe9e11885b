"""One keyset paginator for every list of the console: dead letters, jobs, workflows, replay
runs, a run's ledger and the audit log.

A list is ordered by a time column and the id (or the id alone), newest or oldest first, and a
page is read from an index range that starts at a cursor: the last row of the page before
(`after`) or the first of the page after (`before`). A deep page costs what the first one does,
unlike OFFSET, and a row added meanwhile shifts nothing.

A cursor is text: `<microseconds since the epoch>-<id>` for a time-and-id order, the id's digits
for an id order (so `?after=123` links stay valid). Anything else is not a cursor (`decode`
gives None; forms refuse it, see deadletters.forms.CursorField).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Q

from jobqueue.models import MAX_ID

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIMED = re.compile(r"(-?[0-9]{1,20})-([0-9]{1,19})")  # ASCII digits only, not "²" or "٣"
_ID = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True)
class Keyset:
    """An order a list pages by: `time` (a datetime column) then id, or the id alone."""

    time: str | None = None

    def encode(self, row) -> str:
        if self.time is None:
            return str(row.pk)
        return f"{(getattr(row, self.time) - EPOCH) // timedelta(microseconds=1)}-{row.pk}"

    def decode(self, text) -> tuple[datetime | None, int] | None:
        """The (instant, id) a cursor of this order names, or None if `text` is not one."""
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        if self.time is None:
            if not _ID.fullmatch(text) or not 1 <= int(text) <= MAX_ID:
                return None
            return None, int(text)
        match = _TIMED.fullmatch(text)
        if not match or not 1 <= int(match[2]) <= MAX_ID:
            return None
        try:
            return EPOCH + timedelta(microseconds=int(match[1])), int(match[2])
        except OverflowError:
            return None

    @property
    def pattern(self) -> str:
        """The cursors' form as a regular expression (the API's document says it)."""
        return "^" + (_ID if self.time is None else _TIMED).pattern + "$"

    def order(self, *, newest: bool) -> list[str]:
        keys = ["id"] if self.time is None else [self.time, "id"]
        return [f"-{k}" for k in keys] if newest else keys

    def beyond(self, qs, cursor, *, descending: bool):
        """Rows strictly past `cursor` in the given direction. The plain range comes first so
        the index scan starts at the cursor; the OR only breaks ties within one instant."""
        at, pk = cursor
        if self.time is None:
            return qs.filter(pk__lt=pk) if descending else qs.filter(pk__gt=pk)
        t = self.time
        if descending:
            return qs.filter(**{f"{t}__lte": at}).filter(Q(**{f"{t}__lt": at}) | Q(pk__lt=pk))
        return qs.filter(**{f"{t}__gte": at}).filter(Q(**{f"{t}__gt": at}) | Q(pk__gt=pk))


BY_ID = Keyset()


@dataclass
class Page:
    rows: list
    next_cursor: str | None = None  # the `after` of the following page
    prev_cursor: str | None = None  # the `before` of the preceding page
    extra: dict = field(default_factory=dict)


def page(qs, keyset: Keyset, *, after=None, before=None, size: int, newest: bool = True) -> Page:
    """One page of `qs` in `keyset` order, newest first unless `newest` is False: after the
    cursor `after`, or before the cursor `before` (the page that leads to it); the first page
    when neither is a cursor."""
    before_cursor, after_cursor = keyset.decode(before), keyset.decode(after)
    if before_cursor:
        rows = list(
            keyset.beyond(qs, before_cursor, descending=not newest).order_by(
                *keyset.order(newest=not newest)
            )[: size + 1]
        )
        more = len(rows) > size
        rows = rows[:size][::-1]
        return Page(
            rows,
            next_cursor=keyset.encode(rows[-1]) if rows else None,
            prev_cursor=keyset.encode(rows[0]) if rows and more else None,
        )
    if after_cursor:
        qs = keyset.beyond(qs, after_cursor, descending=newest)
    rows = list(qs.order_by(*keyset.order(newest=newest))[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return Page(
        rows,
        next_cursor=keyset.encode(rows[-1]) if rows and more else None,
        prev_cursor=keyset.encode(rows[0]) if rows and after_cursor else None,
    )
