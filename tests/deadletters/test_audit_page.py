"""The Audit page: every kind of action from the one log, each row's cells, each filter,
keyset pages, the export of the log, hostile filter values, and each target's link to its own
history."""

import csv
import io
import json
import re
from datetime import UTC, timedelta
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deadletters import exports, redaction, selectors, services
from deadletters.models import ReplayRun
from jobqueue import schedules, store
from jobqueue.models import AuditEntry, DeadLetter, Job, Schedule
from jobqueue.schedules import Periodic
from tests.conftest import SECOND_DATABASE
from tests.factories import TWO_BACKENDS, DeadLetterFactory, JobFactory, LetterB

from .conftest import logged_in, user_with_role

pytestmark = pytest.mark.django_db

AUDIT = reverse("deadletters:audit")
AUDIT_EXPORT = reverse("deadletters:audit-export")
OVERVIEW = reverse("deadletters:overview")
ADD = "tests.tasks.add"  # add(a, b)
CELLS = ("seq", "at", "actor", "channel", "action", "targets", "reason", "outcome", "params")


def rows(response) -> list[dict]:
    """Each entry row of the page as {cell class: its inner HTML}, top to bottom."""
    assert response.status_code == 200, response
    html = response.content.decode()
    table = re.search(r'<table class="grid audit entries">.*?</table>', html, re.S)[0]
    found = []
    for row in re.findall(r'<tr id="entry-\d+">(.*?)</tr>', table, re.S):
        # An action is an identifier (|ident): read without its break opportunities.
        cells = dict(re.findall(r'<td class="(\w+)">(.*?)</td>', row.replace("<wbr>", ""), re.S))
        assert tuple(cells) == CELLS
        found.append(cells)
    return found


def seqs(response) -> list[int]:
    return [int(row["seq"].lstrip("#")) for row in rows(response)]


def make_schedule(name="nightly") -> Schedule:
    declaration = Periodic(name=name, task_path="tests.tasks.noop", cron="0 3 * * *")
    fields = declaration.row()
    now = timezone.now()
    store.schedules.upsert(
        name, fields, first_tick=schedules.next_tick("0 3 * * *", "UTC", now), now=now
    )
    return Schedule.objects.get(name=name)


def drained(chunks) -> str:
    return "".join(chunks)


@pytest.fixture
def chief(db):
    return user_with_role("admin", "chief")


@pytest.fixture
def second(db):
    return user_with_role("admin", "deputy")


def seed_every_kind(chief, second, settings):
    """One of each action, each through its own service, oldest first; what each entry's
    cells must then read, keyed by action."""
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 1}
    replayed = DeadLetterFactory(task_path="shop.receipt")
    selection = services.freeze_selection(operator=chief, action="replay", ids=[replayed.pk])
    replay = services.start_run(operator=chief, selection=selection, reason="receipts back")
    dropped = DeadLetterFactory(task_path="shop.receipt")
    selection = services.freeze_selection(operator=chief, action="discard", ids=[dropped.pk])
    discard = services.start_run(
        operator=chief, selection=selection, reason="duplicates", channel="cli"
    )
    secret = DeadLetterFactory(
        task_path=ADD, args=[1], kwargs={"b": {"api_token": "t0k3n", "amount": 5}}
    )
    redaction.record_reveal(chief, secret, via="console")
    edit = services.edit_and_replay(
        operator=chief,
        dead_letter_id=secret.pk,
        args=[1],
        kwargs={"b": {"api_token": redaction.REDACTED, "amount": 6}},
        reason="b was off by one",
        channel="console",
    )
    edit_run = ReplayRun.objects.get(selection__filter={"payload_edit": edit.pk})
    _, chunks = exports.export(
        operator=chief,
        filter=selectors.ListFilter(job_type="shop.receipt"),
        fmt="csv",
        channel="console",
    )
    drained(chunks)
    # A run of two items (batch size 1) goes to the background runner: it can be controlled.
    many = DeadLetterFactory.create_batch(2, task_path="shop.receipt")
    selection = services.freeze_selection(
        operator=chief, action="replay", ids=[dl.pk for dl in many]
    )
    long_run = services.start_run(operator=chief, selection=selection, reason="slowly")
    services.pause(long_run, operator=chief, channel="console")
    services.resume(long_run, operator=chief, channel="console")
    services.cancel(long_run, operator=chief, channel="console")
    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": 1}
    both = DeadLetterFactory.create_batch(2, task_path="shop.receipt")
    selection = services.freeze_selection(
        operator=chief, action="replay", ids=[dl.pk for dl in both]
    )
    big = services.start_run(operator=chief, selection=selection, reason="needs two")
    services.approve(big, operator=second, channel="console")
    queued = JobFactory(run_after=timezone.now() + timedelta(hours=1))
    later = JobFactory(run_after=timezone.now() + timedelta(hours=1))
    services.act_on_jobs("run_now", [queued.pk], operator=chief, reason="vip", channel="console")
    services.act_on_jobs("cancel", [later.pk], operator=chief, reason="stale", channel="console")
    services.control_queue(
        "pause", "mail", operator=chief, reason="smtp down", allow_unknown=True, channel="console"
    )
    services.control_queue("resume", "mail", operator=chief, reason="smtp up", channel="console")
    schedule = make_schedule()
    services.act_on_schedule("pause", "nightly", operator=chief, reason="hold", channel="cli")
    services.act_on_schedule("resume", "nightly", operator=chief, reason="go", channel="cli")
    made = services.act_on_schedule("run", "nightly", operator=chief, reason="late", channel="cli")
    _, chunks = exports.export_audit(
        operator=chief, filter=selectors.AuditFilter(), fmt="jsonl", channel="console"
    )
    drained(chunks)

    def run_link(run):
        return f'<a href="/deadletters/runs/{run.pk}/">#{run.pk}</a>'

    def selection_link(run):
        text = f"#{run.selection_id} (run #{run.pk})"
        return f'selection <a href="/deadletters/runs/{run.pk}/">{text}</a>'

    def start(run, count):
        return (
            f"<code>allow_poisoned=false</code> <code>count={count}</code> "
            f"<code>filter={{}}</code> <code>rate=0.0</code> <code>run={run.pk}</code> "
        )

    letter_link = f'<a href="{OVERVIEW}{secret.pk}/">#{secret.pk}</a>'
    edit_link = f'<a href="{OVERVIEW}{secret.pk}/#edit-{edit.pk}">#{secret.pk}</a>'
    return {
        "letters.replay": (
            "chief",
            "Python code",
            'Replay <code class="ident muted">letters.replay</code>',
            selection_link(replay),
            "receipts back",
            start(replay, 1),
        ),
        "letters.discard": (
            "chief",
            "Command line",
            'Discard <code class="ident muted">letters.discard</code>',
            selection_link(discard),
            "duplicates",
            start(discard, 1),
        ),
        "letter.reveal": (
            "chief",
            "Console",
            'Reveal <code class="ident muted">letter.reveal</code>',
            f"letter {letter_link}",
            "",
            f"<code>task_path={ADD}</code> <code>via=console</code> ",
        ),
        "letter.edit_replay": (
            "chief",
            "Console",
            'Edit and replay <code class="ident muted">letter.edit_replay</code>',
            f"letter {edit_link}",
            "b was off by one",
            "<code>changed=[&quot;kwargs[&#x27;b&#x27;][&#x27;amount&#x27;]&quot;]</code> "
            f"<code>edit={edit.pk}</code> <code>job={edit.job_id}</code> "
            f"<code>run={edit_run.pk}</code> ",
        ),
        "letters.export": (
            "chief",
            "Console",
            'Export <code class="ident muted">letters.export</code>',
            "letters",
            "",
            "<code>filter={&quot;job_type&quot;: &quot;shop.receipt&quot;, &quot;order&quot;: "
            "&quot;newest&quot;}</code> <code>format=csv</code> <code>rows=2</code> "
            "<code>truncated=false</code> ",
        ),
        "run.paused": (
            "chief",
            "Console",
            'Paused <code class="ident muted">run.paused</code>',
            f"run {run_link(long_run)}",
            "",
            "",
        ),
        "run.resumed": (
            "chief",
            "Console",
            'Resumed <code class="ident muted">run.resumed</code>',
            f"run {run_link(long_run)}",
            "",
            "",
        ),
        "run.cancelled": (
            "chief",
            "Console",
            'Cancelled <code class="ident muted">run.cancelled</code>',
            f"run {run_link(long_run)}",
            "",
            "",
        ),
        "run.approved": (
            "deputy",
            "Console",
            'Approved <code class="ident muted">run.approved</code>',
            f"run {run_link(big)}",
            "",
            "",
        ),
        "job.run_now": (
            "chief",
            "Console",
            'Run now <code class="ident muted">job.run_now</code>',
            f'job <a href="/deadletters/jobs/{queued.pk}/">{queued.pk}</a>',
            "vip",
            None,  # the store's own parameters (tests/jobqueue/test_job_actions.py)
        ),
        "job.cancel": (
            "chief",
            "Console",
            'Cancel <code class="ident muted">job.cancel</code>',
            f'job <a href="/deadletters/jobs/{later.pk}/">{later.pk}</a>',
            "stale",
            None,
        ),
        "queue.pause": (
            "chief",
            "Console",
            'Pause <code class="ident muted">queue.pause</code>',
            'queue <a href="/deadletters/health/#queue-control">mail</a>',
            "smtp down",
            None,
        ),
        "queue.resume": (
            "chief",
            "Console",
            'Resume <code class="ident muted">queue.resume</code>',
            'queue <a href="/deadletters/health/#queue-control">mail</a>',
            "smtp up",
            None,
        ),
        "schedule.pause": (
            "chief",
            "Command line",
            'Pause <code class="ident muted">schedule.pause</code>',
            f'schedule <a href="/deadletters/schedules/#schedule-{schedule.pk}">nightly</a>',
            "hold",
            None,
        ),
        "schedule.resume": (
            "chief",
            "Command line",
            'Resume <code class="ident muted">schedule.resume</code>',
            f'schedule <a href="/deadletters/schedules/#schedule-{schedule.pk}">nightly</a>',
            "go",
            None,
        ),
        "schedule.run": (
            "chief",
            "Command line",
            'Run now <code class="ident muted">schedule.run</code>',
            f'schedule <a href="/deadletters/schedules/#schedule-{schedule.pk}">nightly</a>',
            "late",
            f"<code>job={made.pk}</code> ",
        ),
        "audit.export": (
            "chief",
            "Console",
            'Export <code class="ident muted">audit.export</code>',
            "audit",
            "",
            "<code>filter={}</code> <code>format=jsonl</code> ",
        ),
    }


def test_every_kind_of_action_is_a_row_of_the_audit_page_with_its_cells(chief, second, settings):
    expected = seed_every_kind(chief, second, settings)
    listed = rows(logged_in(user_with_role("viewer")).get(AUDIT))
    entries = list(AuditEntry.objects.order_by("-id"))
    assert [row["seq"] for row in listed] == [f"#{e.seq}" for e in entries]
    # Two runs started besides those listed above (the long run and the approved one), and the
    # edit's entry stands for its one-item run: one entry each.
    by_action = {}
    for row, entry in zip(listed, entries, strict=True):
        by_action.setdefault(entry.action, []).append(row)
    assert sorted(by_action) == sorted(expected)
    for action, (actor, channel, label, targets, reason, params) in expected.items():
        row = by_action[action][-1]  # the oldest of its action
        cells = (row["actor"], row["channel"], row["action"], row["targets"], row["reason"])
        assert cells == (actor, channel, label, targets, reason), action
        assert row["outcome"] == "done", action
        if params is not None:
            assert row["params"] == params, action
    assert len(by_action["letters.replay"]) == 3  # replay, the long run, the approved one
    assert "t0k3n" not in str(listed)


def test_each_filter_narrows_to_exactly_its_entries(chief, second, settings):
    seed_every_kind(chief, second, settings)
    viewer = logged_in(user_with_role("viewer"))

    def expect(query, **where):
        wanted = AuditEntry.objects.filter(**where).order_by("-id").values_list("seq", flat=True)
        assert seqs(viewer.get(AUDIT, query)) == list(wanted), query

    expect({"operator": "deputy"}, actor="deputy")
    expect({"action": "letters.replay"}, action="letters.replay")
    expect({"channel": "cli"}, channel="cli")
    expect({"target_kind": "queue"}, target_kind="queue")
    expect({"target_kind": "schedule", "target": "nightly"}, target_kind="schedule")
    run = ReplayRun.objects.filter(requested=2, state="cancelled").get()
    expect(
        {"target_kind": "run", "target": run.pk}, action__startswith="run.", targets=[str(run.pk)]
    )
    expect({"target_kind": "job", "target": "999"}, pk=0)  # names nothing: nothing listed
    expect({"operator": "chief", "channel": "cli", "action": "schedule.run"}, action="schedule.run")
    today = timezone.localdate()
    expect({"since": today.isoformat(), "until": today.isoformat()}, seq__gt=0)
    expect({"since": (today + timedelta(days=1)).isoformat()}, pk=0)
    expect({"until": (today - timedelta(days=1)).isoformat()}, pk=0)


def test_a_filter_on_what_only_entries_have_hides_the_replay_runs(chief, second, settings):
    seed_every_kind(chief, second, settings)
    viewer = logged_in(user_with_role("viewer"))
    assert '<section class="runs"' in viewer.get(AUDIT).content.decode()
    assert (
        '<section class="runs"' not in viewer.get(AUDIT, {"action": "queue.pause"}).content.decode()
    )
    run = ReplayRun.objects.filter(requested=2, state="cancelled").get()
    only = viewer.get(AUDIT, {"target_kind": "run", "target": run.pk}).content.decode()
    section = re.search(r'<section class="runs".*?</section>', only, re.S)[0]
    assert re.findall(r'href="/deadletters/runs/(\d+)/">#', section) == [str(run.pk)]


def test_pages_of_entries_by_keyset_take_each_entry_once(viewer_client):
    for n in range(1, 121):
        store.audit.record(
            "queue.pause", actor="ana", channel="code", target_kind="queue", targets=[f"q{n}"]
        )
    newest_first = list(range(120, 0, -1))
    seen, query, pages = [], {}, 0
    while True:
        response = viewer_client.get(AUDIT, query)
        page = seqs(response)
        seen += page
        pages += 1
        older = re.search(r'entries_after=(\d+)#actions-title">Older', response.content.decode())
        if not older:
            break
        query = {"entries_after": older[1]}
    assert (seen, pages) == (newest_first, 3)
    # And back: the second page's "Newer" link leads to the first page again.
    second = viewer_client.get(AUDIT, {"entries_after": AuditEntry.objects.get(seq=71).pk})
    assert seqs(second) == list(range(70, 20, -1))
    newer = re.search(r'entries_before=(\d+)#actions-title">← Newer', second.content.decode())
    assert seqs(viewer_client.get(AUDIT, {"entries_before": newer[1]})) == list(range(120, 70, -1))
    # The filter rides along in the pager's links.
    filtered = viewer_client.get(AUDIT, {"operator": "ana"}).content.decode()
    assert "?operator=ana&amp;entries_after=" in filtered


# --- the export of the log --------------------------------------------------------------------


def exported(response) -> str:
    assert response.status_code == 200, response
    return b"".join(response.streaming_content).decode()


def test_the_export_holds_the_filtered_entries_and_is_itself_audited(chief, operator_client):
    store.audit.record(
        "queue.pause", actor="ana", channel="cli", target_kind="queue", targets=["mail"],
        reason="=HYPERLINK(1)", params={"password": "hunter2"},
    )  # fmt: skip
    store.audit.record("queue.resume", actor="ben", channel="code", target_kind="queue")
    response = operator_client.post(AUDIT_EXPORT, {"format": "jsonl", "operator": "ana"})
    [line] = [json.loads(text) for text in exported(response).splitlines()]
    first = AuditEntry.objects.get(seq=1)
    assert line == {
        "seq": 1,
        "at": first.at.astimezone(UTC).isoformat(),
        "actor": "ana",
        "channel": "cli",
        "token": "",
        "action": "queue.pause",
        "target_kind": "queue",
        "targets": ["mail"],
        "reason": "=HYPERLINK(1)",
        "params": {"password": redaction.REDACTED},  # masked as payloads are
        "outcome": "done",
        "hash": first.hash,
    }
    export = AuditEntry.objects.get(seq=3)
    assert (export.action, export.actor, export.channel, export.target_kind) == (
        "audit.export",
        "operator",
        "console",
        "audit",
    )
    assert export.params == {"filter": {"operator": "ana"}, "format": "jsonl"}
    assert re.fullmatch(
        rf'attachment; filename="audit-log-\d{{8}}T\d{{6}}Z-e{export.pk}\.jsonl"',
        response["Content-Disposition"],
    )
    text = exported(operator_client.post(AUDIT_EXPORT, {"format": "csv"}))
    table = list(csv.reader(io.StringIO(text, newline="")))
    assert tuple(table[0]) == exports.AUDIT_FIELDS
    # Newest first, up to the export before this one (not this one itself).
    assert [row[0] for row in table[1:]] == ["3", "2", "1"]
    assert table[3][8] == "'=HYPERLINK(1)"  # a formula is text to a spreadsheet
    assert json.loads(table[3][9]) == {"password": redaction.REDACTED}
    assert list(store.audit.verify()) == []


def test_the_export_is_refused_without_the_permission_a_format_or_a_valid_filter(
    viewer_client, operator_client, operator
):
    store.audit.record("queue.pause", actor="ana", channel="cli", target_kind="queue")
    assert viewer_client.post(AUDIT_EXPORT, {"format": "csv"}).status_code == 403
    assert operator_client.post(AUDIT_EXPORT, {"format": "xlsx"}).status_code == 400
    bad = operator_client.post(AUDIT_EXPORT, {"format": "csv", "channel": "carrier-pigeon"})
    assert bad.status_code == 400 and "channel" in bad.content.decode()
    assert operator_client.get(AUDIT_EXPORT, {"format": "csv"}).status_code == 405
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(operator)
    assert guarded.post(AUDIT_EXPORT, {"format": "csv"}).status_code == 403
    assert list(AuditEntry.objects.values_list("action", flat=True)) == ["queue.pause"]


def test_the_page_offers_the_export_of_its_filter_to_who_may_export(operator_client, viewer_client):
    page = operator_client.get(AUDIT, {"operator": "ana", "channel": "cli"}).content.decode()
    form = re.search(
        r'<form method="post" action="/deadletters/audit/export/".*?</form>', page, re.S
    )
    assert form is not None
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form[0])
    assert [(n, v) for n, v in fields if n != "csrfmiddlewaretoken"] == [
        ("operator", "ana"),
        ("channel", "cli"),
    ]
    assert AUDIT_EXPORT not in viewer_client.get(AUDIT).content.decode()


# --- hostile filter values --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"operator": "a\x00b"}, "operator", "Null characters are not allowed"),
        ({"operator": "x" * 151}, "operator", "at most 150 characters"),
        ({"action": "DROP TABLE"}, "action", "Not an action"),
        ({"action": "queue.pause'--"}, "action", "Not an action"),
        ({"action": "x" * 41}, "action", "at most 40 characters"),
        ({"target_kind": "../job"}, "target_kind", "Not a target kind"),
        ({"target_kind": "\uff2aob"}, "target_kind", "Not a target kind"),  # a fullwidth J
        ({"target": "123"}, "target", "Say what kind of target it is too"),
        ({"target_kind": "job", "target": "1" * 256}, "target", "at most 255 characters"),
        ({"target_kind": "job", "target": "\x00"}, "target", "Null characters are not allowed"),
        ({"channel": "carrier-pigeon"}, "channel", "Select a valid choice"),
        ({"since": "2026-02-30"}, "since", "Enter a valid date"),
        ({"until": "9999-12-31"}, "until", "Enter a date between"),
        ({"since": "2026-12-02", "until": "2026-12-01"}, "until", "is not after the start"),
        ({"entries_after": "²"}, "entries_after", "is not an id"),
        ({"entries_before": "9" * 30}, "entries_before", "is not an id"),
    ],
)
def test_a_hostile_filter_value_is_named_never_a_server_error(viewer_client, query, field, message):
    store.audit.record(
        "queue.pause", actor="ana", channel="cli", target_kind="queue", targets=["q"]
    )
    response = viewer_client.get(AUDIT, query)
    assert response.status_code == 200
    page = response.content.decode()
    errors = re.search(r'<p class="error">Ignored invalid filters?: (.*?)</p>', page, re.S)
    assert errors and f"<code>{field}</code>" in errors[1], page
    assert message in unescape(errors[1])
    # The valid ones apply; the entry is listed unless a valid filter excludes it.
    assert seqs(response) in ([1], [])


def test_a_well_formed_filter_that_matches_nothing_lists_nothing(viewer_client):
    store.audit.record(
        "queue.pause", actor="ana", channel="cli", target_kind="queue", targets=["q"]
    )
    for query in (
        {"operator": "'; DROP TABLE jobqueue_auditentry; --"},
        {"action": "queue.explode"},
        {"target_kind": "queue", "target": "q%"},
        {"target_kind": "queue", "target": "Q"},
        {"target_kind": "job", "target": "q"},
    ):
        response = viewer_client.get(AUDIT, query)
        assert seqs(response) == [] and "No entries matching this filter." in unescape(
            response.content.decode()
        ), query
    assert seqs(viewer_client.get(AUDIT, {"target_kind": "queue", "target": "q"})) == [1]


# --- each target's page links to its own history ---------------------------------------------


def history_link(kind, ref) -> str:
    return f'href="{AUDIT}?target_kind={kind}&amp;target={ref}"'


def test_each_targets_page_links_to_its_own_history(chief, settings, client):
    client.force_login(chief)
    letter = DeadLetterFactory()
    assert (
        history_link("letter", letter.pk) in client.get(f"{OVERVIEW}{letter.pk}/").content.decode()
    )
    selection = services.freeze_selection(operator=chief, action="replay", ids=[letter.pk])
    run = services.start_run(operator=chief, selection=selection, reason="r")
    run_page = client.get(reverse("deadletters:run", args=[run.pk])).content.decode()
    assert history_link("run", run.pk) in run_page
    assert history_link("selection", selection.pk) in run_page
    job = JobFactory(run_after=timezone.now() + timedelta(hours=1), queue_name="mail")
    job_page = client.get(reverse("deadletters:job", args=[job.pk])).content.decode()
    assert history_link("job", job.pk) in job_page
    health = client.get(reverse("deadletters:health")).content.decode()
    assert history_link("queue", "mail") in health
    make_schedule("nightly run")
    listing = client.get(reverse("deadletters:schedules")).content.decode()
    assert history_link("schedule", "nightly%20run") in listing
    from tests.deadletters.test_workflows_page import workflow

    flow = workflow()
    flow_page = client.get(reverse("deadletters:workflow", args=[flow.pk])).content.decode()
    assert history_link("workflow", flow.pk) in flow_page
    # And each leads to that target's entries only.
    services.act_on_jobs("cancel", [job.pk], operator=chief, reason="stale", channel="console")
    listed = rows(client.get(AUDIT, {"target_kind": "job", "target": job.pk}))
    assert [(r["action"], r["reason"]) for r in listed] == [
        ('Cancel <code class="ident muted">job.cancel</code>', "stale")
    ]
    assert Job.objects.get(pk=job.pk).state == "cancelled"


@pytest.mark.django_db(databases=["default", SECOND_DATABASE])
def test_several_backends_the_page_says_whose_log_it_reads(chief, settings):
    viewer = logged_in(user_with_role("viewer"))
    assert "several-logs" not in viewer.get(AUDIT).content.decode()
    settings.TASKS = TWO_BACKENDS
    page = viewer.get(AUDIT).content.decode()
    assert (
        '<p class="notice several-logs">This is the audit log of the <code>default</code>' in page
    )
    # A reveal of a letter of the other database is in default's log, naming its database,
    # and links to that letter (ids repeat across databases).
    there = LetterB()
    letter = DeadLetter.objects.using(SECOND_DATABASE).get(pk=there.pk)
    redaction.record_reveal(chief, letter, via="console")
    [row] = rows(viewer.get(AUDIT))
    assert row["targets"] == f'letter <a href="{OVERVIEW}{there.pk}/?backend=b">#{there.pk}</a>'
    assert f"<code>database={SECOND_DATABASE}</code>" in row["params"]
    assert not redaction.has_seen(chief, DeadLetterFactory(pk=there.pk + 1000))
    assert redaction.has_seen(chief, letter)
