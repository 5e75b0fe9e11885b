"""The one audit log: every operator action appended in its own transaction, from every channel,
append-only through the ORM, and hash-chained so that an edited, removed or inserted row is
found by `audit verify`."""

import json
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from jobqueue import store
from jobqueue.models import AppendOnly, AuditChain, AuditEntry
from tests import development_migrations
from tests.audit import audited
from tests.cli import run
from tests.factories import JobFactory, UserFactory

pytestmark = pytest.mark.django_db


def entry(n: int = 1, **overrides):
    fields = dict(
        actor="ana",
        channel="code",
        target_kind="queue",
        targets=[f"queue-{n}"],
        reason=f"reason {n}",
        params={"n": n},
    )
    return store.audit.record("queue.pause", **(fields | overrides))


def breaks() -> list[str]:
    return list(store.audit.verify())


def raw(sql: str, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def remove(row):
    """What a person with the database's password could do: the row and its lookups, gone."""
    raw("DELETE FROM jobqueue_audittarget WHERE entry_id = %s", [row.pk])
    raw("DELETE FROM jobqueue_auditentry WHERE id = %s", [row.pk])


def test_entries_form_one_intact_chain_in_order():
    made = [entry(n) for n in range(1, 6)]
    assert [e.seq for e in made] == [1, 2, 3, 4, 5]
    assert [e.prev_hash for e in made[1:]] == [e.hash for e in made[:-1]]
    assert AuditChain.objects.get().seq == 5 and AuditChain.objects.get().hash == made[-1].hash
    assert breaks() == []
    result = run("audit", "verify")
    assert (result.code, result.out.strip()) == (
        0,
        "the audit log of 'default' is intact: 5 entries",
    )
    [newest] = json.loads(run("audit", "list", "--limit", "1", "--json").out)
    assert (newest["seq"], newest["hash"], newest["params"]) == (5, made[-1].hash, {"n": 5})


def test_the_orm_neither_changes_nor_deletes_an_entry():
    made = entry()
    made.reason = "rewritten"
    with pytest.raises(AppendOnly):
        made.save()
    with pytest.raises(AppendOnly):
        made.delete()
    with pytest.raises(AppendOnly):
        AuditEntry.objects.filter(pk=made.pk).update(reason="rewritten")
    with pytest.raises(AppendOnly):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.get().reason == "reason 1" and breaks() == []


@pytest.mark.parametrize(
    "column, value",
    [("reason", "nothing to see"), ("actor", "mallory"), ("params", '{"n": 99}'), ("at", None)],
)
def test_an_entry_edited_past_the_orm_is_found(column, value):
    for n in range(1, 4):
        entry(n)
    target = AuditEntry.objects.get(seq=2)
    if column == "at":
        value = target.at - timedelta(hours=1)
    raw(f"UPDATE jobqueue_auditentry SET {column} = %s WHERE id = %s", [value, target.pk])
    assert breaks() == [f"entry {target.pk} (#2): its content does not match its hash"]
    result = run("audit", "verify")
    assert result.code == 1 and "BROKEN entry" in result.err and "not intact" in result.err


def test_a_removed_entry_is_found_in_the_middle_and_at_the_end():
    for n in range(1, 5):
        entry(n)
    middle, newest = AuditEntry.objects.get(seq=2), AuditEntry.objects.get(seq=4)
    remove(middle)
    assert any("sequence 3 where 2 was next" in b for b in breaks())
    assert any("does not follow the entry before it" in b for b in breaks())
    remove(newest)
    assert any("the chain's head names entry #4, the newest entry is #3" in b for b in breaks())


def test_an_entry_inserted_with_a_made_up_hash_is_found():
    first = entry(1)
    forged = AuditEntry(
        seq=2,
        at=timezone.now(),
        actor="mallory",
        channel="console",
        action="queue.resume",
        target_kind="queue",
        targets=["mail"],
        prev_hash=first.hash,
        hash="f" * 64,
    )
    forged.save()
    assert breaks() == [
        f"entry {forged.pk} (#2): its content does not match its hash",
        "the chain's head names entry #1, the newest entry is #2 (the newest entries removed?)",
    ]


def test_an_action_and_its_entry_roll_back_together():
    with pytest.raises(RuntimeError), transaction.atomic():
        store.queues.pause("mail", actor="ana", reason="down", allow_unknown=True)
        raise RuntimeError("the caller's transaction fails after the pause")
    assert not audited("queue") and not store.queues.paused()
    assert breaks() == []


def test_each_channel_is_recorded_as_the_action_came(client):
    from deadletters.roles import assign

    user = UserFactory(username="op")
    assign(user, "operator")
    client.force_login(user)
    job = JobFactory(run_after=timezone.now() + timedelta(hours=1))
    client.post(f"/deadletters/jobs/{job.pk}/act/", {"action": "run_now", "reason": "hurry"})
    result = run("queues", "pause", "default", "--operator", "op", "--reason", "deploy")
    assert result.code == 0, result.err
    store.queues.resume("default", actor="op", reason="deployed")
    assert [(e.action, e.channel) for e in AuditEntry.objects.order_by("seq")] == [
        ("job.run_now", "console"),
        ("queue.pause", "cli"),
        ("queue.resume", "code"),
    ]
    assert breaks() == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_form_one_line():
    """Eight threads, each with its own connection, append at once: the head's lock makes them
    one chain without a gap or a fork (on SQLite the write lock does)."""
    start = threading.Barrier(8)
    failures = []

    def append(n):
        try:
            start.wait()
            for k in range(5):
                entry(n * 10 + k)
        except Exception as exc:  # noqa: BLE001 (reported below: a thread's is otherwise lost)
            failures.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=append, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert list(AuditEntry.objects.order_by("seq").values_list("seq", flat=True)) == list(
        range(1, 41)
    )
    assert breaks() == []


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_every_old_action_into_the_chain():
    before = [("jobqueue", "0020_unique_holds_cover_retrying")]
    executor = development_migrations.executor()
    executor.migrate(before)
    apps = development_migrations.executor().loader.project_state(before).apps
    at = timezone.now().replace(microsecond=0)
    apps.get_model("jobqueue", "QueueAction").objects.create(
        queue_name="mail", action="pause", actor="ana", reason="smtp down", at=at
    )
    apps.get_model("jobqueue", "ScheduleAction").objects.create(
        schedule_name="nightly", action="run", actor="ben", reason="late", job_id=7, at=at
    )
    JobAction = apps.get_model("jobqueue", "JobAction")
    later = at + timedelta(minutes=1)
    for job_id in (11, 12, 13):  # one bulk cancel: one entry naming its three jobs
        JobAction.objects.create(
            job_id=job_id, action="cancel", actor="cy", reason="campaign off", at=later
        )
    JobAction.objects.create(job_id=14, action="run_now", actor="cy", reason="vip", at=later)
    try:
        call_command("migrate", verbosity=0)
    finally:
        call_command("migrate", verbosity=0)  # whatever happened, leave the schema current
    moved = [
        (e.action, e.targets, e.actor, e.reason, e.channel, e.params)
        for e in AuditEntry.objects.order_by("seq")
    ]
    assert moved == [
        ("queue.pause", ["mail"], "ana", "smtp down", "unrecorded", {}),
        ("schedule.run", ["nightly"], "ben", "late", "unrecorded", {"job": 7}),
        ("job.cancel", ["11", "12", "13"], "cy", "campaign off", "unrecorded", {}),
        ("job.run_now", ["14"], "cy", "vip", "unrecorded", {}),
    ]
    assert [e.label for e in store.audit.history("job", 12)] == ["Cancel"]
    assert breaks() == []
    entry(99)  # the chain goes on from the moved entries
    assert AuditEntry.objects.order_by("-seq").first().seq == 5 and breaks() == []


def test_the_audit_page_lists_queue_job_and_schedule_actions_by_operator(client):
    from deadletters.roles import assign

    viewer = UserFactory(username="vera")
    assign(viewer, "viewer")
    client.force_login(viewer)
    store.queues.pause("mail", actor="ana", reason="smtp-provider-outage", allow_unknown=True)
    job = JobFactory(run_after=timezone.now() + timedelta(hours=1))
    store.job_actions.cancel([job.pk], actor="ben", reason="campaign-called-off")
    page = client.get("/deadletters/audit/")
    assert page.status_code == 200
    assert [(e.actor, e.action) for e in page.context["entries"].rows] == [
        ("ben", "job.cancel"),
        ("ana", "queue.pause"),
    ]
    assert b"smtp-provider-outage" in page.content and b"campaign-called-off" in page.content
    only_ana = client.get("/deadletters/audit/", {"operator": "ana"})
    assert [e.actor for e in only_ana.context["entries"].rows] == ["ana"]
    assert b"campaign-called-off" not in only_ana.content


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_replay_runs_control_events_onto_the_chain():
    before = [("deadletters", "0013_job_selection_database"), ("jobqueue", "0021_audit_log")]
    development_migrations.executor().migrate(before)
    apps = development_migrations.executor().loader.project_state(before).apps
    at = timezone.now().replace(microsecond=0)
    user = apps.get_model("auth", "User").objects.create(username="dee")
    selection = apps.get_model("deadletters", "Selection").objects.create(
        operator=user, action="replay", dead_letter_ids=[1], created_at=at
    )
    run_ = apps.get_model("deadletters", "ReplayRun").objects.create(
        selection=selection,
        operator=user,
        operator_name="dee",
        reason="r",
        batch_size=10,
        requested=1,
        created_at=at,
        updated_at=at,
    )
    RunEvent = apps.get_model("deadletters", "RunEvent")
    for n, action in enumerate(["paused", "resumed", "halted"]):
        name = "canary" if action == "halted" else "dee"
        RunEvent.objects.create(
            run=run_, action=action, operator=user, operator_name=name, at=at + timedelta(n)
        )
    try:
        call_command("migrate", verbosity=0)
    finally:
        call_command("migrate", verbosity=0)
    moved = [(e.action, e.actor, e.channel, e.targets) for e in AuditEntry.objects.order_by("seq")]
    assert moved == [
        ("run.paused", "dee", "unrecorded", [str(run_.pk)]),
        ("run.resumed", "dee", "unrecorded", [str(run_.pk)]),
        ("run.halted", "canary", "system", [str(run_.pk)]),
        # The run's start, which it had no entry of: appended by deadletters 0016.
        ("letters.replay", "dee", "unrecorded", [str(selection.pk)]),
    ]
    assert breaks() == []


def test_entries_recorded_while_a_token_acts_name_it_and_only_those():
    with store.audit.acting(token="tok-7"):
        inside = entry(1)
        explicit = entry(2, token="tok-8")  # a caller naming its own token keeps it
    after = entry(3)
    stored = {e.pk: e.token for e in AuditEntry.objects.all()}
    assert stored == {inside.pk: "tok-7", explicit.pk: "tok-8", after.pk: ""}
    assert breaks() == []  # the token is part of what each hash covers
