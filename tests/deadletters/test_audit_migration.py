"""Migration deadletters 0016: every Reveal and Export row, every payload edit and every replay
run's start without an entry, moved into the audit log's chain; Reveal and Export dropped; the
reveal permission kept with who holds it."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.utils import timezone

from deadletters import redaction
from jobqueue import store
from jobqueue.models import AuditEntry, DeadLetter
from tests import development_migrations
from tests.cli import run
from tests.factories import DeadLetterFactory

BEFORE = [("deadletters", "0015_one_selection")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_reveals_exports_edits_and_run_starts_into_the_chain():
    development_migrations.executor().migrate(BEFORE)
    apps = development_migrations.executor().loader.project_state(BEFORE).apps
    t0 = timezone.now().replace(microsecond=0) - timedelta(days=1)
    minute = timedelta(minutes=1)
    # Already in the log before: a queue's pause, and one run whose start has its entry.
    store.audit.record(
        "queue.pause", actor="ana", channel="cli", target_kind="queue", targets=["mail"], at=t0
    )
    User = apps.get_model("auth", "User")
    dee = User.objects.create(username="dee")
    letter = DeadLetterFactory(task_path="tests.tasks.add", args=[1], kwargs={"b": 2})
    apps.get_model("deadletters", "Reveal").objects.create(
        dead_letter_id=letter.pk,
        task_path=letter.task_path,
        operator=dee,
        operator_name="dee",
        via="cli",
        at=t0 + minute,
    )
    apps.get_model("deadletters", "Export").objects.create(
        operator=dee,
        operator_name="dee",
        filter={"job_type": "tests.tasks.add", "order": "newest"},
        format="jsonl",
        rows=7,
        truncated=True,
        at=t0 + 2 * minute,
    )
    edit = apps.get_model("deadletters", "PayloadEdit").objects.create(
        dead_letter_id=letter.pk,
        operator=dee,
        operator_name="dee",
        reason="b was wrong",
        old_args=[1],
        old_kwargs={"b": 2},
        new_args=[1],
        new_kwargs={"b": 3},
        job=None,
        at=t0 + 3 * minute,
    )
    Selection = apps.get_model("deadletters", "Selection")
    ReplayRun = apps.get_model("deadletters", "ReplayRun")

    def run_of(action, filter, at, **fields):
        selection = Selection.objects.create(
            operator=dee, action=action, filter=filter, ids=[letter.pk], created_at=at
        )
        return ReplayRun.objects.create(
            action=action,
            selection=selection,
            operator=dee,
            operator_name="dee",
            reason=f"{action} at {at:%H:%M}",
            filter=filter,
            batch_size=10,
            requested=1,
            created_at=at,
            updated_at=at,
            **fields,
        )

    edit_run = run_of("replay", {"payload_edit": edit.pk}, t0 + 3 * minute)
    discard = run_of("discard", {"job_type": "x"}, t0 + 4 * minute, rate=2.5)
    canary = run_of(
        "replay", {}, t0 + 5 * minute, canary_size=3, state="awaiting", allow_poisoned=True
    )
    started = run_of("replay", {}, t0 + 6 * minute)
    store.audit.record(
        "letters.replay",
        actor="dee",
        channel="console",
        target_kind="selection",
        targets=[started.selection_id],
        params={"run": started.pk},
        at=t0 + 6 * minute,
    )
    # The reveal permission as Reveal held it, granted to a group.
    Permission.objects.filter(codename="view_secrets").delete()
    reveal_type = ContentType.objects.create(app_label="deadletters", model="reveal")
    old = Permission.objects.create(
        content_type=reveal_type, codename="view_secrets", name="Can see payloads unmasked"
    )
    revealers = Group.objects.create(name="revealers")
    revealers.permissions.add(old)
    try:
        call_command("migrate", verbosity=0)
    finally:
        call_command("migrate", verbosity=0)  # whatever happened, leave the schema current

    moved = [
        (e.seq, e.at, e.action, e.target_kind, e.targets, e.actor, e.channel, e.reason, e.params)
        for e in AuditEntry.objects.order_by("seq")
    ]
    assert moved == [
        (1, t0, "queue.pause", "queue", ["mail"], "ana", "cli", "", {}),
        (
            2,
            t0 + 6 * minute,
            "letters.replay",
            "selection",
            [str(started.selection_id)],
            "dee",
            "console",
            "",
            {"run": started.pk},
        ),
        # Then the moved rows, oldest first, appended.
        (
            3,
            t0 + minute,
            "letter.reveal",
            "letter",
            [str(letter.pk)],
            "dee",
            "unrecorded",
            "",
            {"via": "cli", "task_path": "tests.tasks.add"},
        ),
        (
            4,
            t0 + 2 * minute,
            "letters.export",
            "letters",
            [],
            "dee",
            "unrecorded",
            "",
            {
                "filter": {"job_type": "tests.tasks.add", "order": "newest"},
                "format": "jsonl",
                "rows": 7,
                "truncated": True,
            },
        ),
        (
            5,
            t0 + 3 * minute,
            "letter.edit_replay",
            "letter",
            [str(letter.pk)],
            "dee",
            "unrecorded",
            "b was wrong",
            {"edit": edit.pk, "job": None, "changed": ["kwargs['b']"], "run": edit_run.pk},
        ),
        (
            6,
            t0 + 4 * minute,
            "letters.discard",
            "selection",
            [str(discard.selection_id)],
            "dee",
            "unrecorded",
            f"discard at {t0 + 4 * minute:%H:%M}",
            {
                "run": discard.pk,
                "count": 1,
                "allow_poisoned": False,
                "rate": 2.5,
                "filter": {"job_type": "x"},
            },
        ),
        (
            7,
            t0 + 5 * minute,
            "letters.replay",
            "selection",
            [str(canary.selection_id)],
            "dee",
            "unrecorded",
            f"replay at {t0 + 5 * minute:%H:%M}",
            {
                "run": canary.pk,
                "count": 1,
                "allow_poisoned": True,
                "rate": 0.0,
                "filter": {},
                "canary": {"size": 3, "max_dead_share": 0.2, "timeout": 300.0},
                "awaiting_approval": True,
            },
        ),
    ]
    assert list(store.audit.verify()) == []
    verified = run("audit", "verify")
    assert (verified.code, verified.out.strip()) == (
        0,
        "the audit log of 'default' is intact: 7 entries",
    )
    # Each reads back through its target's history, and the reveal still counts as seen.
    assert [e.action for e in store.audit.history("letter", letter.pk)] == [
        "letter.edit_replay",
        "letter.reveal",
    ]
    assert [e.action for e in store.audit.history("selection", discard.selection_id)] == [
        "letters.discard"
    ]
    # The permission moved to ReplayRun with its grant; the dropped models' content types went.
    [secrets] = Permission.objects.filter(codename="view_secrets")
    assert (secrets.content_type.model, secrets.pk) == ("replayrun", old.pk)
    assert list(revealers.permissions.all()) == [secrets]
    assert not ContentType.objects.filter(app_label="deadletters", model="reveal").exists()
    reader = get_user_model().objects.get(username="dee")
    reader.groups.add(revealers)
    reader = get_user_model().objects.get(pk=reader.pk)  # a fresh permission cache
    assert redaction.has_seen(reader, DeadLetter.objects.get(pk=letter.pk))
    # The chain goes on from the moved entries.
    store.audit.record("queue.resume", actor="ana", channel="cli", target_kind="queue")
    assert AuditEntry.objects.order_by("-seq").first().seq == 8
    assert list(store.audit.verify()) == []
