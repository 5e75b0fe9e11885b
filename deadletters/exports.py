"""Exports of the list's filter as CSV or JSON Lines, each audited (deadletters.Export).

The audit row is written before the first byte: `rows` is the count of matching letters,
counted at most EXPORT_MAX_ROWS + 1 deep (selectors.count_matching), and `truncated` says the
filter matched more. The stream then writes at most that many letters, so the recorded count is
never below what left the system, even when the download is abandoned half-way; a stream that
runs to its end and wrote fewer (letters pruned between the count and the read) corrects the
row to what it wrote.

Letters are read a page at a time by keyset on (dead_lettered_at, id) in the list's order
(newest first unless the filter says "oldest"): memory stays flat for any size, no server-side
cursor is needed (the stream runs after the request's transaction, behind poolers too), and a
page costs what the first one does.

Payloads are always masked (deadletters/redaction.py): seeing them unmasked takes an audited
reveal of one letter at a time, which an export of thousands does not make. CSV cells that a
spreadsheet would read as a formula (starting with = + - @, tab or carriage return) get a
leading apostrophe; JSON Lines are data for programs and are written as they are.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from . import conf, redaction, selectors
from .models import Export
from .roles import EXPORT
from .selectors import LETTERS

FORMATS = ("csv", "jsonl")
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/x-ndjson; charset=utf-8",
}
# The columns of a CSV export and the keys of a JSON Lines object, in order.
FIELDS = (
    "id",
    "source",
    "task_path",
    "queue",
    "state",
    "error_class",
    "fingerprint",
    "attempts",
    "replays",
    "first_failed_at",
    "dead_lettered_at",
    "last_error",
    "args",
    "kwargs",
)
# The DeadLetter columns they are read from (same order): the names, but for the queue.
COLUMNS = tuple({"queue": "queue_name"}.get(name, name) for name in FIELDS)
# Letters per keyset read, and per chunk of the stream.
PAGE = 500
# What a spreadsheet takes for the start of a formula (OWASP's list for CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class ExportRefused(ValueError):
    """An export that cannot be made as asked (unknown format); nothing was written."""


def export(*, operator, filter: selectors.ListFilter, fmt: str, now=None):
    """Record the export of the letters matching `filter` by `operator` and return
    (the Export row, an iterator of text chunks of the file).

    Raises PermissionDenied (writing nothing) unless `operator` is active and holds the export
    permission, and ExportRefused for a format other than "csv" or "jsonl"."""
    if fmt not in FORMATS:
        raise ExportRefused(f"format must be csv or jsonl, not {str(fmt)[:20]!r}")
    if not (operator.is_active and operator.has_perm(EXPORT)):
        raise PermissionDenied(f"{operator} may not export dead letters ({EXPORT})")
    cap = max(int(conf.get("EXPORT_MAX_ROWS")), 1)
    rows, truncated = selectors.count_matching(filter, cap)
    record = Export.objects.create(
        operator=operator,
        operator_name=operator.get_username(),
        filter=filter.as_json(),
        format=fmt,
        rows=rows,
        truncated=truncated,
        at=now or timezone.now(),
    )
    return record, _stream(record, filter, fmt)


def filename(record: Export) -> str:
    """`dead-letters-20261201T012753Z.csv`: the export's time in UTC, its format."""
    return f"dead-letters-{record.at.astimezone(UTC):%Y%m%dT%H%M%SZ}.{record.format}"


def _stream(record: Export, f: selectors.ListFilter, fmt: str) -> Iterator[str]:
    write_page = _csv_page if fmt == "csv" else _jsonl_page
    if fmt == "csv":
        yield _csv_text([FIELDS])
    written = 0
    for page in _pages(f, limit=record.rows):
        written += len(page)
        yield _encodable(write_page(page))
    if written != record.rows:
        # Fewer than counted: letters were pruned in between. Said as it happened.
        Export.objects.filter(pk=record.pk).update(rows=written)
        record.rows = written


def _pages(f: selectors.ListFilter, *, limit: int) -> Iterator[list[dict]]:
    """The matching letters, at most `limit`, a page at a time in the list's order."""
    newest = f.order != "oldest"
    letters = selectors.filtered(f).order_by(*LETTERS.order(newest=newest)).values(*COLUMNS)
    cursor, left = None, limit
    while left > 0:
        qs = letters if cursor is None else LETTERS.beyond(letters, cursor, descending=newest)
        page = list(qs[: min(PAGE, left)])
        if not page:
            return
        yield page
        left -= len(page)
        cursor = (page[-1]["dead_lettered_at"], page[-1]["id"])


def _record(row: dict) -> dict:
    """One letter as exported: times in UTC (ISO 8601), payloads masked."""
    out = {}
    for field, column in zip(FIELDS, COLUMNS, strict=True):
        value = row[column]
        if column in ("first_failed_at", "dead_lettered_at"):
            value = value.astimezone(UTC).isoformat() if value else None
        elif column in ("args", "kwargs"):
            value = redaction.redact(value)
        out[field] = value
    return out


def _jsonl_page(page: list[dict]) -> str:
    return "".join(json.dumps(_record(row), ensure_ascii=False) + "\n" for row in page)


def _csv_page(page: list[dict]) -> str:
    rows = []
    for row in page:
        record = _record(row)
        for key in ("args", "kwargs"):
            record[key] = json.dumps(record[key], ensure_ascii=False, sort_keys=True)
        rows.append([safe_cell(record[field]) for field in FIELDS])
    return _csv_text(rows)


def _csv_text(rows) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def safe_cell(value):
    """A CSV cell a spreadsheet shows as text: a leading apostrophe before what would start a
    formula (hostile payloads and error messages are expected in dead letters)."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _encodable(text: str) -> str:
    """`text` as UTF-8 can write it: a lone surrogate (which SQLite may hold) becomes U+FFFD
    instead of failing the download half-way."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text
