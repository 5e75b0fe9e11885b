"""Exports of the list's filter as CSV or JSON Lines (issue 18): contents, masking, formula
injection, the cap, the audit row, permissions, refusals, streaming, the CLI."""

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deadletters import exports, selectors
from deadletters.redaction import REDACTED
from jobqueue.models import AuditChain, AuditEntry, AuditTarget, DeadLetter
from tests.audit import entries
from tests.cli import run
from tests.factories import DeadLetterFactory, UserFactory

from .conftest import logged_in

pytestmark = pytest.mark.django_db

EXPORT = reverse("deadletters:export")
HOSTILE = ['=HYPERLINK("http://evil","x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "|calc"]
# The fullwidth forms some spreadsheets read as the ASCII ones.
FULLWIDTH = ["\uff1d1+1", "\uff0b1", "\uff0d1", "\uff20SUM(A1)", "\uff5ccalc"]


def recorded() -> list[dict]:
    """The parameters of each export's audit entry (letters.export), oldest first."""
    return [params for *_, params in entries("letters.export")]


def body(response) -> str:
    assert response.status_code == 200, response
    assert response.streaming
    return b"".join(response.streaming_content).decode("utf-8")


def parse_csv(text):
    rows = list(csv.reader(io.StringIO(text, newline="")))
    return rows[0], [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]


def parse_jsonl(text):
    assert text.endswith("\n") or text == ""
    return [json.loads(line) for line in text.splitlines()]


def letters_at(n, **kwargs):
    """`n` letters dead-lettered a minute apart, oldest first."""
    start = timezone.now() - timedelta(hours=1)
    return [
        DeadLetterFactory(dead_lettered_at=start + timedelta(minutes=i), **kwargs) for i in range(n)
    ]


# --- contents ---------------------------------------------------------------------------------


def test_csv_holds_a_header_and_one_row_per_letter(operator_client):
    old, new = letters_at(2, task_path="shop.receipt", args=[1, "a"], kwargs={"order": 7})
    response = operator_client.post(EXPORT, {"format": "csv"})
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    header, rows = parse_csv(body(response))
    assert tuple(header) == exports.FIELDS
    assert [int(r["id"]) for r in rows] == [new.pk, old.pk]  # the list's order: newest first
    row = rows[1]
    assert row["source"] == "jobqueue" and row["task_path"] == "shop.receipt"
    assert row["queue"] == "default" and row["state"] == "pending"
    assert row["error_class"] == old.error_class and row["last_error"] == old.last_error
    assert row["attempts"] == "5" and row["replays"] == "0"
    assert row["dead_lettered_at"] == old.dead_lettered_at.isoformat()
    assert row["first_failed_at"].endswith("+00:00")
    assert json.loads(row["args"]) == [1, "a"] and json.loads(row["kwargs"]) == {"order": 7}


def test_jsonl_holds_one_object_per_letter_with_payloads_as_json(operator_client):
    old, new = letters_at(2, args=[{"sku": "x"}], kwargs={"qty": 2, "note": "é"})
    old.fingerprint = "0123456789abcdef"
    old.save()
    response = operator_client.post(EXPORT, {"format": "jsonl", "order": "oldest"})
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    records = parse_jsonl(body(response))
    assert [r["id"] for r in records] == [old.pk, new.pk]
    assert tuple(records[0]) == exports.FIELDS
    assert records[0]["fingerprint"] == "0123456789abcdef"
    assert records[0]["args"] == [{"sku": "x"}] and records[0]["kwargs"] == {"qty": 2, "note": "é"}
    assert records[0]["attempts"] == 5 and records[0]["replays"] == 0


def test_the_filter_decides_the_letters(operator_client):
    DeadLetterFactory(task_path="shop.receipt")
    other = DeadLetterFactory(task_path="shop.refund")
    DeadLetterFactory(task_path="shop.refund", discarded=True)
    response = operator_client.post(
        EXPORT, {"format": "jsonl", "job_type": "shop.refund", "state": "pending"}
    )
    assert [r["id"] for r in parse_jsonl(body(response))] == [other.pk]


def test_an_empty_filter_result_is_a_header_alone(operator_client):
    DeadLetterFactory(task_path="shop.receipt")
    response = operator_client.post(EXPORT, {"format": "csv", "job_type": "nothing.here"})
    header, rows = parse_csv(body(response))
    assert tuple(header) == exports.FIELDS and rows == []
    assert body(operator_client.post(EXPORT, {"format": "jsonl", "job_type": "x"})) == ""
    assert [params["rows"] for params in recorded()] == [0, 0]


SECRETS = {
    "password": "hunter2",
    "user": "bob",
    "headers": {"Authorization": "Bearer abc.def", "X-Trace": "t-1"},
    "cards": [{"card_number": "4111111111111111", "last4": "1111"}],
}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_payloads_are_masked(operator_client, admin_client_, fmt):
    """Always, even for a user who may reveal: a reveal is one audited letter at a time."""
    DeadLetterFactory(args=[{"api_key": "k-123"}, "plain"], kwargs=SECRETS)
    for client in (operator_client, admin_client_):
        text = body(client.post(EXPORT, {"format": fmt}))
        for secret in ("hunter2", "abc.def", "4111111111111111", "k-123"):
            assert secret not in text
        if fmt == "csv":
            _, (row,) = parse_csv(text)
            args, kwargs = json.loads(row["args"]), json.loads(row["kwargs"])
        else:
            (record,) = parse_jsonl(text)
            args, kwargs = record["args"], record["kwargs"]
        assert args == [{"api_key": REDACTED}, "plain"]
        assert kwargs == {
            "password": REDACTED,
            "user": "bob",
            "headers": {"Authorization": REDACTED, "X-Trace": "t-1"},
            "cards": [{"card_number": REDACTED, "last4": "1111"}],
        }


def test_csv_cells_that_would_be_formulas_are_escaped(operator_client):
    for text in HOSTILE:
        DeadLetterFactory(
            task_path=text, queue_name=text[:100], error_class=text, last_error=text, args=text
        )
    _, rows = parse_csv(body(operator_client.post(EXPORT, {"format": "csv"})))
    assert len(rows) == len(HOSTILE)
    for row in rows:
        for name in ("task_path", "queue", "error_class", "last_error"):
            assert row[name].startswith("'"), (name, row[name])
            assert row[name][1:] in HOSTILE
        # Every cell: none starts what a spreadsheet reads as a formula.
        assert not any(cell.startswith(exports.FORMULA_STARTS) for cell in row.values())
    # JSON Lines are data for programs: written as they are.
    records = parse_jsonl(body(operator_client.post(EXPORT, {"format": "jsonl"})))
    assert sorted(r["last_error"] for r in records) == sorted(HOSTILE)
    assert sorted(r["args"] for r in records) == sorted(HOSTILE)


@pytest.mark.parametrize("text", HOSTILE + FULLWIDTH)
def test_every_formula_start_is_escaped_by_the_one_cell_function(text):
    assert exports.safe_cell(text) == "'" + text
    assert exports.safe_cell("x" + text) == "x" + text


def test_the_audit_csv_escapes_actor_and_reason(operator):
    from jobqueue.store import audit

    kept = [text for text in HOSTILE + FULLWIDTH if text == text.strip()]  # as the log keeps
    for n, text in enumerate(kept):
        audit.record(
            "queue.pause",
            actor=text,
            channel="code",
            target_kind="queue",
            targets=[f"q{n}"],
            reason=text,
        )
    _, chunks = exports.export_audit(operator=operator, filter=selectors.AuditFilter(), fmt="csv")
    _, rows = parse_csv("".join(chunks))
    shown = [row for row in rows if row["action"] == "queue.pause"]
    assert len(shown) == len(kept)
    for row in shown:
        assert row["actor"] == row["reason"]
        assert row["reason"].startswith("'") and row["reason"][1:] in kept
        assert not any(cell.startswith(exports.FORMULA_STARTS) for cell in row.values())


def test_a_negative_number_payload_is_escaped_too_but_numbers_in_columns_are_not():
    assert exports.safe_cell("-5") == "'-5"
    assert exports.safe_cell(-5) == -5
    assert exports.safe_cell("a=b") == "a=b"
    assert exports.safe_cell(None) == ""


def test_multiline_and_quoted_text_survives_the_round_trip(operator_client):
    error = 'line one, "quoted"\r\nline two\n\u202eend'
    DeadLetterFactory(last_error=error, kwargs={"k": 'a,b\n"c"'})
    _, (row,) = parse_csv(body(operator_client.post(EXPORT, {"format": "csv"})))
    assert row["last_error"] == error
    assert json.loads(row["kwargs"]) == {"k": 'a,b\n"c"'}
    (record,) = parse_jsonl(body(operator_client.post(EXPORT, {"format": "jsonl"})))
    assert record["last_error"] == error


def test_text_utf8_cannot_hold_becomes_a_replacement_character():
    assert exports._encodable("ok é") == "ok é"
    assert exports._encodable("a\udcffb") == "a?b"


# --- the cap and the audit row ----------------------------------------------------------------


def test_the_cap_bounds_the_rows_and_the_audit_says_truncated(operator, operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "EXPORT_MAX_ROWS": 3}
    letters = letters_at(5, task_path="shop.receipt")
    records = parse_jsonl(body(operator_client.post(EXPORT, {"format": "jsonl"})))
    assert [r["id"] for r in records] == [dl.pk for dl in letters[::-1][:3]]
    assert [(params["rows"], params["truncated"]) for params in recorded()] == [(3, True)]
    _, rows = parse_csv(body(operator_client.post(EXPORT, {"format": "csv", "order": "oldest"})))
    assert [int(r["id"]) for r in rows] == [dl.pk for dl in letters[:3]]


def test_exactly_the_cap_is_not_truncated(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "EXPORT_MAX_ROWS": 3}
    letters_at(3)
    assert len(parse_jsonl(body(operator_client.post(EXPORT, {"format": "jsonl"})))) == 3
    assert [(params["rows"], params["truncated"]) for params in recorded()] == [(3, False)]


def test_the_audit_entry_names_operator_filter_format_and_rows(operator, operator_client):
    letters_at(2, task_path="shop.receipt")
    DeadLetterFactory(task_path="shop.other")
    query = {"format": "csv", "job_type": "shop.receipt", "since": "2020-01-01", "q": "receipt"}
    response = operator_client.post(EXPORT, query)
    [entry] = AuditEntry.objects.all()  # written before the first byte
    assert (entry.action, entry.actor, entry.channel, entry.target_kind, entry.targets) == (
        "letters.export",
        "operator",
        "console",
        "letters",
        [],
    )
    since = entry.params["filter"].pop("since")
    assert since.startswith("2020-01-01T00:00:00")
    assert entry.params == {
        "filter": {"job_type": "shop.receipt", "q": "receipt", "order": "newest"},
        "format": "csv",
        "rows": 2,
        "truncated": False,
    }
    filename = re.fullmatch(
        r'attachment; filename="dead-letters-(\d{8}T\d{6}Z)-e(\d+)\.csv"',
        response["Content-Disposition"],
    )
    assert filename and filename[1] == f"{entry.at:%Y%m%dT%H%M%SZ}"
    assert filename[2] == str(entry.pk)
    assert len(parse_csv(body(response))[1]) == 2


def test_the_entry_keeps_the_count_when_fewer_letters_remain_to_stream(operator, monkeypatch):
    """Counted first (the entry exists before the first byte); a letter pruned before the
    stream reaches it is not in the file: the append-only entry keeps the count, an upper
    bound, and the export, at the end, says what was written."""
    monkeypatch.setattr(exports, "PAGE", 1)
    letters = letters_at(3)
    record, chunks = exports.export(operator=operator, filter=selectors.ListFilter(), fmt="jsonl")
    assert [params["rows"] for params in recorded()] == [3]
    first = next(chunks)  # the newest
    DeadLetter.objects.filter(pk=letters[0].pk).delete()  # the oldest, not streamed yet
    records = parse_jsonl(first + "".join(chunks))
    assert [r["id"] for r in records] == [letters[2].pk, letters[1].pk]
    assert record.rows == 2 and [params["rows"] for params in recorded()] == [3]
    assert record.entry.channel == "code"  # the service's default


def test_letters_added_while_streaming_never_exceed_the_recorded_rows(operator, monkeypatch):
    monkeypatch.setattr(exports, "PAGE", 1)
    letters_at(2)
    record, chunks = exports.export(
        operator=operator, filter=selectors.ListFilter(order="oldest"), fmt="jsonl"
    )
    first = next(chunks)
    DeadLetterFactory()  # newer than both: the stream would reach it
    assert len(parse_jsonl(first + "".join(chunks))) == 2
    assert record.rows == 2 and [params["rows"] for params in recorded()] == [2]


def test_keyset_pages_take_every_letter_once_across_ties(operator, monkeypatch):
    """Letters of one instant straddle pages: the id breaks the tie."""
    monkeypatch.setattr(exports, "PAGE", 2)
    at = timezone.now()
    letters = [DeadLetterFactory(dead_lettered_at=at) for _ in range(5)]
    for order, expected in (("newest", letters[::-1]), ("oldest", letters)):
        _, chunks = exports.export(
            operator=operator, filter=selectors.ListFilter(order=order), fmt="jsonl"
        )
        ids = [r["id"] for r in parse_jsonl("".join(chunks))]
        assert ids == [dl.pk for dl in expected]


def test_the_service_refuses_without_the_permission_and_a_bad_format(viewer, operator):
    DeadLetterFactory()
    with pytest.raises(PermissionDenied):
        exports.export(operator=viewer, filter=selectors.ListFilter(), fmt="csv")
    with pytest.raises(exports.ExportRefused):
        exports.export(operator=operator, filter=selectors.ListFilter(), fmt="xlsx")
    operator.is_active = False
    operator.save()
    with pytest.raises(PermissionDenied):
        exports.export(operator=operator, filter=selectors.ListFilter(), fmt="csv")
    assert recorded() == []


# --- the view: permission, refusals, no other writes --------------------------------------------


def test_anonymous_is_sent_to_login():
    DeadLetterFactory()
    response = Client().post(EXPORT, {"format": "csv"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")
    assert recorded() == []


def test_without_the_export_permission_it_is_403(viewer_client):
    DeadLetterFactory()
    response = viewer_client.post(EXPORT, {"format": "csv"})
    assert response.status_code == 403
    assert "export dead letters" in response.content.decode()
    assert logged_in(UserFactory(username="nobody")).post(
        EXPORT, {"format": "csv"}
    ).status_code == (403)
    assert recorded() == []


@pytest.mark.parametrize(
    "query",
    [
        {"fingerprint": "not-hex"},
        {"since": "2024-02-30"},
        {"until": "yesterday"},
        {"state": "bogus"},
        {"order": "sideways"},
        {"source": "celery"},
        {"job_type": "x" * 256},
        {"q": "x" * 201},
        {"state": "pending", "fingerprint": "ABC"},
    ],
)
def test_an_invalid_filter_is_refused_never_dropped(operator_client, query):
    DeadLetterFactory()
    response = operator_client.post(EXPORT, {**query, "format": "csv"})
    assert response.status_code == 400
    text = response.content.decode()
    assert text.startswith("Invalid filter: ")
    assert any(name in text for name in query)
    assert recorded() == []


@pytest.mark.parametrize("query", [{}, {"format": ""}, {"format": "xlsx"}, {"format": "CSV"}])
def test_a_bad_format_is_refused(operator_client, query):
    DeadLetterFactory()
    response = operator_client.post(EXPORT, query)
    assert response.status_code == 400
    assert "format=csv or format=jsonl" in response.content.decode()
    assert recorded() == []


def test_only_post_and_nothing_but_the_audit_row_is_written(operator_client):
    DeadLetterFactory.create_batch(3)
    for method in ("get", "head", "put", "delete"):
        assert getattr(operator_client, method)(EXPORT + "?format=csv").status_code == 405

    def tables():
        return {
            model._meta.label: list(model.objects.order_by("pk").values_list())
            for label in ("jobqueue", "deadletters")
            for model in apps.get_app_config(label).get_models()
            if model not in (AuditEntry, AuditTarget, AuditChain)
        }

    before = tables()
    response = operator_client.post(EXPORT, {"format": "csv"})
    assert response.streaming
    assert (
        response["Cache-Control"].startswith("max-age=0")
        and "no-store" in response["Cache-Control"]
    )
    body(response)
    assert tables() == before and len(recorded()) == 1
    assert AuditEntry.objects.count() == 1


# --- the list's links, the audit page ----------------------------------------------------------


def test_the_list_offers_exports_of_the_applied_filter(operator_client, viewer_client):
    DeadLetterFactory(task_path="shop.receipt")
    page = operator_client.get(
        reverse("deadletters:list"), {"job_type": "shop.receipt", "after": "", "zzz": "1"}
    ).content.decode()
    assert "Export CSV" in page and "Export JSON Lines" in page
    assert f'action="{EXPORT}"' in page and "csrfmiddlewaretoken" in page
    assert '<input type="hidden" name="job_type" value="shop.receipt">' in page
    assert 'name="format" value="csv"' in page and 'name="format" value="jsonl"' in page
    assert 'name="after"' not in page and 'name="zzz"' not in page
    viewed = viewer_client.get(reverse("deadletters:list")).content.decode()
    assert "Export CSV" not in viewed and EXPORT not in viewed
    invalid = operator_client.get(reverse("deadletters:list"), {"fingerprint": "zz"})
    assert "Correct the filter to export it." in invalid.content.decode()
    assert EXPORT not in invalid.content.decode()


def test_the_list_exports_what_the_page_shows(operator_client):
    DeadLetterFactory(task_path="shop.receipt")
    DeadLetterFactory(task_path="shop.other")
    page = operator_client.get(reverse("deadletters:list"), {"job_type": "shop.receipt"})
    form = re.search(r'<form id="export".*?</form>', page.content.decode(), re.S)[0]
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form))
    fields.pop("csrfmiddlewaretoken", None)
    exported = parse_jsonl(body(operator_client.post(EXPORT, {**fields, "format": "jsonl"})))
    assert [r["task_path"] for r in exported] == ["shop.receipt"]


def params_cells(page: str) -> list[str]:
    return re.findall(r'<td class="params">(.*?)</td>', page, re.S)


def test_the_audit_page_lists_exports(operator_client, admin_client_, viewer_client):
    DeadLetterFactory(task_path="shop.receipt")
    body(operator_client.post(EXPORT, {"format": "csv", "job_type": "shop.receipt"}))
    body(admin_client_.post(EXPORT, {"format": "jsonl", "job_type": "shop.other"}))
    audit = reverse("deadletters:audit")
    page = viewer_client.get(audit).content.decode()
    assert re.findall(r'<td class="actor">(\w+)</td>', page) == ["chief", "operator"]
    assert params_cells(page) == [
        "<code>filter={&quot;job_type&quot;: &quot;shop.other&quot;, &quot;order&quot;: "
        "&quot;newest&quot;}</code> <code>format=jsonl</code> <code>rows=0</code> "
        "<code>truncated=false</code> ",
        "<code>filter={&quot;job_type&quot;: &quot;shop.receipt&quot;, &quot;order&quot;: "
        "&quot;newest&quot;}</code> <code>format=csv</code> <code>rows=1</code> "
        "<code>truncated=false</code> ",
    ]
    mine = viewer_client.get(audit, {"operator": "operator"}).content.decode()
    assert "shop.receipt" in mine and "shop.other" not in mine


def test_the_audit_page_says_when_an_export_was_truncated(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "EXPORT_MAX_ROWS": 1}
    DeadLetterFactory.create_batch(2)
    body(operator_client.post(EXPORT, {"format": "csv"}))
    page = operator_client.get(reverse("deadletters:audit")).content.decode()
    assert "<code>rows=1</code> <code>truncated=true</code>" in page


# --- the CLI ------------------------------------------------------------------------------------


def export_cli(*argv, operator="operator"):
    return run("deadletters", "export", *argv, "--operator", operator)


def test_cli_exports_to_stdout_and_audits(operator):
    letters_at(2, task_path="shop.receipt", kwargs={"token": "t0p"})
    DeadLetterFactory(task_path="shop.other")
    result = export_cli("--format", "csv", "--job-type", "shop.receipt")
    assert result.code == 0, result
    header, rows = parse_csv(result.out)
    assert tuple(header) == exports.FIELDS and len(rows) == 2
    assert json.loads(rows[0]["kwargs"]) == {"token": REDACTED} and "t0p" not in result.out
    assert entries("letters.export") == [
        (
            [],
            "operator",
            "cli",
            "",
            {
                "filter": {"job_type": "shop.receipt", "order": "newest"},
                "format": "csv",
                "rows": 2,
                "truncated": False,
            },
        )
    ]


def test_cli_writes_a_file_and_never_over_one(operator, tmp_path):
    letters_at(3)
    target = tmp_path / "letters.jsonl"
    result = export_cli("--format", "jsonl", "--output", str(target), "--order", "oldest")
    assert result.code == 0, result
    assert result.out.strip() == f"3 dead letters written to {target} (jsonl)"
    assert len(parse_jsonl(target.read_text(encoding="utf-8"))) == 3
    again = export_cli("--format", "jsonl", "--output", str(target))
    assert again.refused_cleanly, again
    assert "File exists" in again.err
    missing_dir = export_cli("--format", "csv", "--output", str(tmp_path / "no" / "x.csv"))
    assert missing_dir.refused_cleanly, missing_dir
    assert len(recorded()) == 1


def test_cli_takes_the_consoles_filters(operator):
    letter = DeadLetterFactory(task_path="shop.receipt", last_error="card declined 42")
    letter.fingerprint = "0123456789abcdef"
    letter.save()
    DeadLetterFactory(task_path="shop.receipt")
    result = export_cli(
        "--format", "jsonl", "--fingerprint", "0123456789abcdef", "--state", "pending",
        "--since", "2000-01-01", "--until", "9998-12-31",
    )  # fmt: skip
    assert result.code == 0, result
    assert [r["id"] for r in parse_jsonl(result.out)] == [letter.pk]


def test_cli_says_when_the_export_was_truncated(operator, settings):
    settings.REDRIVE = {**settings.REDRIVE, "EXPORT_MAX_ROWS": 2}
    letters_at(3)
    result = export_cli("--format", "jsonl")
    assert result.code == 0 and len(parse_jsonl(result.out)) == 2
    assert "truncated" in result.err and "EXPORT_MAX_ROWS" in result.err
    assert [params["truncated"] for params in recorded()] == [True]


@pytest.mark.parametrize(
    ("argv", "who", "message"),
    [
        (["--format", "csv"], "viewer", "lacks deadletters.export_deadletter"),
        (["--format", "csv"], "ghost", "No user 'ghost'"),
        (["--format", "xlsx"], "operator", "invalid choice"),
        (["--format", "csv", "--fingerprint", "XYZ"], "operator", "fingerprint"),
        (["--format", "csv", "--since", "2024-02-30"], "operator", "since"),
        (["--format", "csv", "--until", "10000-01-01"], "operator", "until"),
        (["--format", "csv", "--search", "x" * 201], "operator", "q"),
        (["--format", "csv", "--state", "bogus"], "operator", "invalid choice"),
        (["--format", "csv", "--job-type", "x" * 256], "operator", "at most 255"),
    ],
)
def test_cli_refusals_are_one_line_and_write_nothing(operator, viewer, argv, who, message):
    DeadLetterFactory()
    result = export_cli(*argv, operator=who)
    assert result.refused_cleanly, result
    assert message in result.err
    assert recorded() == []


def test_cli_needs_an_operator():
    result = run("deadletters", "export", "--format", "csv")
    assert result.refused_cleanly and "--operator" in result.err
    assert recorded() == []


def test_an_export_takes_a_post_with_the_csrf_token(operator):
    DeadLetterFactory()
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(operator)
    assert guarded.get(EXPORT, {"format": "csv"}).status_code == 405  # a link cannot export
    assert guarded.post(EXPORT, {"format": "csv"}).status_code == 403  # nor a foreign form
    assert recorded() == []
