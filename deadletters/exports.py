"""Exports of the list's filter as CSV or JSON Lines, each audited (letters.export in the audit
log, jobqueue.store.audit).

The audit entry is written before the first byte: its `rows` is the count of matching letters,
counted at most EXPORT_MAX_ROWS + 1 deep (selectors.count_matching), and `truncated` says the
filter matched more. The stream then writes at most that many letters, so the recorded count is
never below what left the system, even when the download is abandoned half-way. The log is
append-only, so a stream that wrote fewer (letters pruned between the count and the read) does
not correct the entry: the count stays an upper bound, and the returned Export says what was
written once the stream has run to its end.

Letters are read a page at a time by keyset on (dead_lettered_at, id) in the list's order
(newest first unless the filter says "oldest"): memory stays flat for any size, no server-side
cursor is needed (the stream runs after the request's transaction, behind poolers too), and a
page costs what the first one does.

Payloads are always masked (deadletters/redaction.py): seeing them unmasked takes an audited
reveal of one letter at a time, which an export of thousands does not make. CSV cells that a
spreadsheet would read as a formula (starting with = + - @ |, tab or carriage return, or their
fullwidth forms U+FF1D, U+FF0B, U+FF0D, U+FF20, U+FF5C) get a leading apostrophe, in the one
CSV writer every export uses (`_csv_text`, through `safe_cell`); JSON Lines are data for
programs and are written as they are.

The audit log exports itself the same way (`export_audit`: the Audit page's filter, its entries
before the export's own entry, audit.export, their parameters masked as the page shows them).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from jobqueue.conf import setting
from jobqueue.models import AuditEntry
from jobqueue.store import audit

from . import redaction, selectors
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
# What a spreadsheet takes for the start of a formula: OWASP's list for CSV injection, the pipe
# (a DDE call in some), and their fullwidth forms, which some spreadsheets read as the ASCII ones.
FORMULA_STARTS = (
    "=",
    "+",
    "-",
    "@",
    "\t",
    "\r",
    "|",
    "\uff1d",
    "\uff0b",
    "\uff0d",
    "\uff20",
    "\uff5c",
)


ACTION = "letters.export"  # the audit log's action of an export


class ExportRefused(ValueError):
    """An export that cannot be made as asked (unknown format); nothing was written."""


@dataclass
class Export:
    """One export as it is made: its audit entry, the format, the letters counted before the
    first byte (`rows`, at most the cap; once the stream has run to its end, what it wrote) and
    whether the filter matched more than the cap."""

    entry: AuditEntry
    format: str
    rows: int
    truncated: bool

    @property
    def at(self) -> datetime:
        return self.entry.at


def export(
    *, operator, filter: selectors.ListFilter, fmt: str, channel: str = "code", now=None
) -> tuple[Export, Iterator[str]]:
    """Record the export of the letters matching `filter` by `operator` through `channel` in
    the audit log and return (the Export, an iterator of text chunks of the file).

    Raises PermissionDenied (writing nothing) unless `operator` is active and holds the export
    permission, and ExportRefused for a format other than "csv" or "jsonl"."""
    if fmt not in FORMATS:
        raise ExportRefused(f"format must be csv or jsonl, not {str(fmt)[:20]!r}")
    if not (operator.is_active and operator.has_perm(EXPORT)):
        raise PermissionDenied(f"{operator} may not export dead letters ({EXPORT})")
    cap = max(int(setting("EXPORT_MAX_ROWS")), 1)
    rows, truncated = selectors.count_matching(filter, cap)
    entry = audit.record(
        ACTION,
        actor=operator.get_username(),
        channel=channel,
        target_kind="letters",
        params={
            "filter": filter.as_json(),
            "format": fmt,
            "rows": rows,
            "truncated": truncated,
        },
        at=now or timezone.now(),
    )
    record = Export(entry=entry, format=fmt, rows=rows, truncated=truncated)
    return record, _stream(record, filter, fmt)


def filename(record: Export) -> str:
    """`dead-letters-20261201T012753Z-e42.csv`: the export's time in UTC, its audit entry (so a
    file found later leads to who exported it, and why), its format."""
    stamp = f"{record.at.astimezone(UTC):%Y%m%dT%H%M%SZ}"
    return f"dead-letters-{stamp}-e{record.entry.pk}.{record.format}"


def _stream(record: Export, f: selectors.ListFilter, fmt: str) -> Iterator[str]:
    write_page = _csv_page if fmt == "csv" else _jsonl_page
    if fmt == "csv":
        yield _csv_text([FIELDS])
    written = 0
    for page in _pages(f, limit=record.rows):
        written += len(page)
        yield _encodable(write_page(page))
    # Fewer than counted: letters were pruned in between. The entry keeps the upper bound.
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
        rows.append([record[field] for field in FIELDS])
    return _csv_text(rows)


def _csv_text(rows) -> str:
    """The one writer of every CSV export: each cell through safe_cell."""
    buffer = io.StringIO()
    csv.writer(buffer).writerows([safe_cell(cell) for cell in row] for row in rows)
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


# --- the audit log ----------------------------------------------------------------------------

AUDIT_ACTION = "audit.export"  # the audit log's action of an export of itself
# The columns of an audit CSV export and the keys of its JSON Lines objects, in order.
AUDIT_FIELDS = (
    "seq",
    "at",
    "actor",
    "channel",
    "token",
    "action",
    "target_kind",
    "targets",
    "reason",
    "params",
    "outcome",
    "hash",
)


def export_audit(
    *, operator, filter: selectors.AuditFilter, fmt: str, channel: str = "code", now=None
) -> tuple[Export, Iterator[str]]:
    """Record the export of the audit log's entries matching `filter` (audit.export, itself an
    entry) and return (the Export, an iterator of text chunks of the file): the entries before
    this one, newest first, their parameters masked as the Audit page shows them to `operator`.
    Refused as `export` refuses (PermissionDenied, ExportRefused), writing nothing."""
    if fmt not in FORMATS:
        raise ExportRefused(f"format must be csv or jsonl, not {str(fmt)[:20]!r}")
    if not (operator.is_active and operator.has_perm(EXPORT)):
        raise PermissionDenied(f"{operator} may not export the audit log ({EXPORT})")
    entry = audit.record(
        AUDIT_ACTION,
        actor=operator.get_username(),
        channel=channel,
        target_kind="audit",
        params={"filter": filter.as_json(), "format": fmt},
        at=now or timezone.now(),
    )
    record = Export(entry=entry, format=fmt, rows=0, truncated=False)
    return record, _audit_stream(record, filter, operator)


def audit_filename(record: Export) -> str:
    """`audit-log-20261201T012753Z-e42.jsonl`: as `filename`, for the audit log."""
    return (
        f"audit-log-{record.at.astimezone(UTC):%Y%m%dT%H%M%SZ}-e{record.entry.pk}.{record.format}"
    )


def _audit_stream(record: Export, f: selectors.AuditFilter, operator) -> Iterator[str]:
    if record.format == "csv":
        yield _csv_text([AUDIT_FIELDS])
    # The log as it was when asked: the entries before the export's own.
    entries = selectors.audit_matching(f).filter(pk__lt=record.entry.pk).order_by("-id")
    cursor = None
    while True:
        page = list((entries if cursor is None else entries.filter(pk__lt=cursor))[:PAGE])
        if not page:
            return
        rows = [_audit_record(entry, operator) for entry in page]
        record.rows += len(rows)
        if record.format == "csv":
            yield _encodable(
                _csv_text(
                    [
                        [
                            value
                            if isinstance(value, str | int) or value is None
                            else json.dumps(value, ensure_ascii=False, sort_keys=True)
                            for value in row.values()
                        ]
                        for row in rows
                    ]
                )
            )
        else:
            yield _encodable("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        cursor = page[-1].pk


def _audit_record(entry, operator) -> dict:
    """One entry as exported: its time in UTC (ISO 8601), its parameters as the page shows
    them (selectors.audit_params), with the hash that `audit verify` checks."""
    params = dict(redaction.redact(entry.params if isinstance(entry.params, dict) else {}))
    if isinstance(params.get("filter"), dict):
        params["filter"] = dict(selectors.recorded_filter_for(params["filter"], operator))
    return {
        "seq": entry.seq,
        "at": entry.at.astimezone(UTC).isoformat(),
        "actor": entry.actor,
        "channel": entry.channel,
        "token": entry.token,
        "action": entry.action,
        "target_kind": entry.target_kind,
        "targets": entry.targets,
        "reason": entry.reason,
        "params": params,
        "outcome": entry.outcome,
        "hash": entry.hash,
    }
