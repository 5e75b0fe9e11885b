"""Issue 47, item 4: every engine command that carries out an operator action is an alias of
`manage.py act` (the one registry, deadletters.actions). For each, the same input through the
alias and through `act` writes the same audit entries (action, actor, channel, targets, reason,
parameters), prints the same outcome (as text and as `--json`), and refuses a user without the
permission with the same message, writing nothing.

The walk below finds every sub-command of the engine's commands that takes `--operator` (an
operator's action): a new one fails here until it is an alias listed in ALIASES, or listed in
NOT_ALIASES with the reason.
"""

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.core import management
from django.db import transaction
from django.utils import timezone

from deadletters.models import ReplayRun, Selection
from jobqueue import store
from jobqueue.models import AuditEntry, Job, Workflow, WorkflowState
from tests.cli import command, row_counts, run
from tests.deadletters.conftest import user_with_role
from tests.factories import DeadLetterFactory, JobFactory, UserFactory

pytestmark = pytest.mark.django_db

REASON = ("--reason", "provider outage")


@dataclass
class Alias:
    setup: Callable[[], str]  # makes the target; returns it as the alias names it
    alias: Callable[[str], list[str]]  # the alias's argv, without --reason/--operator
    action: str  # the registry's action it carries out
    act: Callable[[str], list[str]]  # that action's own options for the same target


def _queue(paused: bool):
    def setup():
        JobFactory(queue_name="emails")
        if paused:
            store.queues.pause("emails", actor="setup", reason="set up", channel="code")
        return "emails"

    return setup


def _schedule(paused: bool):
    def setup():
        now = timezone.now()
        store.schedules.upsert(
            "nightly",
            {"task_path": "tests.tasks.noop", "cron": "0 3 * * *", "timezone": "UTC"},
            first_tick=now + timedelta(hours=1),
            now=now,
        )
        if paused:
            store.schedules.pause("nightly", actor="setup", reason="set up", channel="code")
        return "nightly"

    return setup


def _job():
    return str(JobFactory(run_after=timezone.now() + timedelta(hours=1)).pk)


def _workflow():
    job = JobFactory(run_after=timezone.now() + timedelta(hours=1))
    now = timezone.now()
    Workflow.objects.create(
        id=job.pk,
        task_path="tests.workflow_tasks.waiter",
        job=job,
        state=WorkflowState.WAITING,
        waiting_for="go",
        started_at=now,
        updated_at=now,
    )
    return str(job.pk)


# A payload with a value the console masks: the entry keeps it masked, whichever door it came in.
SIGNAL_PAYLOAD = ("--payload", '{"password": "hunter2", "plan": "pro"}')


ALIASES = {
    ("queues", "pause"): Alias(
        _queue(False), lambda q: ["queues", "pause", q], "queue.pause", lambda q: ["--queue", q]
    ),
    ("queues", "resume"): Alias(
        _queue(True), lambda q: ["queues", "resume", q], "queue.resume", lambda q: ["--queue", q]
    ),
    **{
        ("schedules", verb): Alias(
            _schedule(verb == "resume"),
            lambda s, verb=verb: ["schedules", verb, s],
            f"schedule.{verb}",
            lambda s: ["--schedule", s],
        )
        for verb in ("pause", "resume", "run")
    },
    **{
        ("jobs", verb): Alias(
            _job,
            lambda pk, verb=verb: ["jobs", verb, pk],
            f"jobs.{verb.replace('-', '_')}",
            lambda pk: ["--ids", pk],
        )
        for verb in ("run-now", "cancel")
    },
    ("workflows", "signal"): Alias(
        _workflow,
        lambda pk: ["workflows", "signal", pk, "go", *SIGNAL_PAYLOAD],
        "workflow.signal",
        lambda pk: ["--workflow", pk, "--event", "go", *SIGNAL_PAYLOAD],
    ),
}
# The console's commands that are aliases of `act` and then carry out the run `act` started,
# in the command, printing its progress (tests at the end): the registry's action of each.
DRIVEN = {
    ("deadletters", "replay"): "letters.replay",
    ("deadletters", "discard"): "letters.discard",
    ("deadletters", "approve"): "run.approve",
}
# Sub-commands that take --operator and are not aliases of `act`.
NOT_ALIASES = {
    ("deadletters", "show"): "a read; --reveal records the reveal as letter.reveal does "
    "(redaction.record_reveal) but prints the whole letter, and checks the user with "
    "cli.operator, not the registry's messages: not an alias yet",
    ("deadletters", "export"): "writes the file itself (--output, never over an existing one) "
    "from exports.export, the service letters.export calls, and checks the user with "
    "cli.operator, not the registry's messages: not an alias yet",
    ("apitoken", "revoke"): "revokes through deadletters.tokens, the service token.revoke calls, "
    "with its own messages and without the console's view permission act requires: not an "
    "alias yet",
    ("prune", ""): "housekeeping, no action of the registry (also the leader's Prune chore): one "
    "entry of its own a run, chore.prune, written by chores.record_prune for the command and the "
    "chore alike (tests/jobqueue/test_prune_audit.py, test_chores.py)",
}


def operator_actions():
    """(command, sub-command) of the engine's and the console's commands (but `act` itself)
    that take --operator."""
    for name, app in sorted(management.get_commands().items()):
        if app not in ("jobqueue", "deadletters") or name == "act":
            continue
        parser = command(name).create_parser("manage.py", name)
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for subname, subparser in subs[0].choices.items() if subs else [("", parser)]:
            taken = {o for a in subparser._actions for o in a.option_strings}
            if "--operator" in taken:
                yield name, subname


def test_every_command_that_acts_is_an_alias_or_says_why_not():
    assert set(operator_actions()) == set(ALIASES) | set(DRIVEN) | set(NOT_ALIASES)


def via_act(alias: Alias, target: str, user: str, *extra: str):
    """The action through `act` itself: a bulk one frozen, then confirmed."""
    if alias.action.startswith("jobs."):
        frozen = run("act", alias.action, *alias.act(target), "--operator", user, "--json")
        if frozen.code:
            return frozen
        selection = json.loads(frozen.out)["selection"]
        return run("act", "confirm", str(selection), *REASON, "--operator", user, *extra)
    return run("act", alias.action, *alias.act(target), *REASON, "--operator", user, *extra)


def via_alias(alias: Alias, target: str, user: str, *extra: str):
    return run(*alias.alias(target), *REASON, "--operator", user, *extra)


class Rollback(Exception):
    pass


# Rows an action makes anew (a frozen selection, the job a schedule's run enqueues, a replay
# run) have a new id each time: named, not numbered, where an outcome or an entry gives them.
NEW_ROWS = {"selection": Selection, "job": Job, "run": ReplayRun}


def newest() -> dict[str, int]:
    return {
        kind: model.objects.order_by("-id").values_list("id", flat=True).first() or 0
        for kind, model in NEW_ROWS.items()
    }


def made_since(before: dict[str, int]) -> dict[str, set[int]]:
    return {
        kind: set(model.objects.filter(id__gt=before[kind]).values_list("id", flat=True))
        for kind, model in NEW_ROWS.items()
    }


def named(data: dict, new: dict[str, set[int]]) -> dict:
    return {
        k: f"<new {k}>"
        if k in NEW_ROWS and data[k] in new[k]
        else named_in(v, new)
        if isinstance(v, str)
        else v
        for k, v in data.items()
    }


def named_in(text: str, new: dict[str, set[int]]) -> str:
    def name(m):
        kind = m[1].lower()
        return f"{m[1]} <new>" if int(m[3]) in new[kind] else m[0]

    return re.sub(r"\b(job|Selection|Run|run) (#?)(\d+)", name, text)


def entries_after(since: int, new: dict[str, set[int]]) -> list[dict]:
    """The entries written since `since`, as what they say (not where they are in the chain)."""
    rows = AuditEntry.objects.filter(id__gt=since).order_by("id")
    return [
        {
            "action": e.action,
            "actor": e.actor,
            "channel": e.channel,
            "token": e.token,
            "target_kind": e.target_kind,
            "targets": [
                f"<new {e.target_kind}>"
                if t.isdigit() and int(t) in new.get(e.target_kind, ())
                else t
                for t in e.targets
            ],
            "reason": e.reason,
            "params": named(e.params, new),
            "outcome": e.outcome,
        }
        for e in rows
    ]


def outcome(text: str, as_json: bool, new: dict[str, set[int]]):
    return named(json.loads(text), new) if as_json else named_in(text, new)


def tried(through, alias: Alias, target: str, user: str, as_json: bool, *, keep=False):
    """What `through` printed and wrote; undone after (a savepoint) unless `keep`."""
    since = AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0
    before = newest()
    extra = ("--json",) if as_json else ()
    seen = {}
    try:
        with transaction.atomic():
            result = through(alias, target, user, *extra)
            new = made_since(before)
            seen = {
                "code": result.code,
                "out": outcome(result.out, as_json, new) if result.code == 0 else result.out,
                "err": result.err,
                "entries": entries_after(since, new),
            }
            if not keep:
                raise Rollback
    except Rollback:
        pass
    return seen


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("key", sorted(ALIASES), ids="-".join)
def test_the_alias_writes_and_says_what_act_does(key, as_json):
    alias = ALIASES[key]
    target = alias.setup()
    user_with_role("operator", "ana")
    by_act = tried(via_act, alias, target, "ana", as_json)
    assert by_act["code"] == 0, by_act["err"]
    assert len(by_act["entries"]) == 1
    assert by_act["entries"][0]["channel"] == "cli" and by_act["entries"][0]["actor"] == "ana"
    by_alias = tried(via_alias, alias, target, "ana", as_json, keep=True)
    assert by_alias == by_act
    assert list(store.audit.verify()) == []


@pytest.mark.parametrize("role", ["viewer", None], ids=["viewer", "no-role"])
@pytest.mark.parametrize("key", sorted(ALIASES), ids="-".join)
def test_the_alias_refuses_whom_act_refuses_with_the_same_message(key, role):
    alias = ALIASES[key]
    target = alias.setup()
    if role:
        user_with_role(role, "vera")
    else:
        UserFactory(username="vera")
    before = row_counts()
    by_act = run("act", alias.action, *alias.act(target), "--operator", "vera", "--json")
    by_alias = via_alias(alias, target, "vera")
    assert by_act.refused_cleanly and by_alias.refused_cleanly, (by_act, by_alias)
    assert "Not allowed: this needs the permission" in by_alias.err
    assert by_alias.err == by_act.err
    assert row_counts() == before


@pytest.mark.parametrize("key", sorted(ALIASES), ids="-".join)
def test_without_the_console_app_the_alias_names_the_act_command(key, monkeypatch):
    alias = ALIASES[key]
    target = alias.setup()
    user_with_role("operator", "ana")
    found = management.get_commands()
    monkeypatch.setattr(
        management, "get_commands", lambda: {k: v for k, v in found.items() if k != "act"}
    )
    before = row_counts()
    result = via_alias(alias, target, "ana")
    assert result.refused_cleanly, result
    assert f"manage.py act {alias.action}" in result.err
    assert "INSTALLED_APPS" in result.err
    assert row_counts() == before


# --- the console app's commands that act and then drive the run: `deadletters replay|discard|
# approve`. Aliases of `act` (the same entries, refusals and --json outcome), and then the run
# carried out in the command, its progress printed (on stderr under --json).


def _act_replay(verb):
    def through(alias, target, user, *extra):
        frozen = run("act", f"letters.{verb}", "--ids", target, "--operator", user, "--json")
        selection = json.loads(frozen.out)["selection"]
        return run("act", "confirm", str(selection), *REASON, "--operator", user, *extra)

    return through


def _command_replay(verb):
    def through(alias, target, user, *extra):
        return run("deadletters", verb, target, *REASON, "--operator", user, *extra)

    return through


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("verb", ["replay", "discard"])
def test_deadletters_replay_and_discard_write_and_say_what_act_does(verb, as_json):
    letter = DeadLetterFactory()
    user_with_role("operator", "ana")
    act_did = tried(_act_replay(verb), None, str(letter.pk), "ana", as_json)
    assert act_did["code"] == 0, act_did["err"]
    assert [e["action"] for e in act_did["entries"]] == [f"letters.{verb}"]
    command_did = tried(_command_replay(verb), None, str(letter.pk), "ana", as_json, keep=True)
    assert command_did["code"] == 0, command_did["err"]
    assert command_did["entries"] == act_did["entries"]
    if as_json:
        # One document on stdout, act's; the preview and the run's progress on stderr.
        assert command_did["out"] == act_did["out"]
        assert f"run {ReplayRun.objects.get().pk} finished: 1 {verb}ed" in command_did["err"]
    else:
        (said,) = act_did["out"].splitlines()
        assert said in command_did["out"].splitlines()
        assert f"run <new> finished: 1 {verb}ed" in command_did["out"]
    letter.refresh_from_db()
    assert letter.state == ("replaying" if verb == "replay" else "discarded")
    assert list(store.audit.verify()) == []


@pytest.fixture
def awaiting(settings):
    """A replay run of two letters over the approval threshold, asked for by ana."""
    from deadletters import services

    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": 1}
    ana = user_with_role("operator", "ana")
    ids = [letter.pk for letter in DeadLetterFactory.create_batch(2)]
    selection = services.freeze_selection(operator=ana, action="replay", ids=ids)
    run_ = services.start_run(operator=ana, selection=selection, reason="provider back")
    assert run_.state == "awaiting"
    return str(run_.pk)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_deadletters_approve_writes_and_says_what_act_does(awaiting, as_json):
    user_with_role("admin", "chief")

    def by_act(alias, target, user, *extra):
        return run("act", "run.approve", "--run", target, "--operator", user, *extra)

    def by_command(alias, target, user, *extra):
        return run("deadletters", "approve", target, "--operator", user, *extra)

    act_did = tried(by_act, None, awaiting, "chief", as_json)
    assert act_did["code"] == 0, act_did["err"]
    assert [e["action"] for e in act_did["entries"]] == ["run.approved"]
    command_did = tried(by_command, None, awaiting, "chief", as_json, keep=True)
    assert command_did["code"] == 0, command_did["err"]
    assert command_did["entries"] == act_did["entries"]
    if as_json:
        assert command_did["out"] == act_did["out"]
    else:
        (said,) = act_did["out"].splitlines()
        assert command_did["out"].splitlines()[0] == said
        assert f"run {awaiting} finished: 2 replayed" in command_did["out"]
    assert ReplayRun.objects.get(pk=awaiting).approved_by == "chief"


@pytest.mark.parametrize("who", ["ana", "vera", "nobody"])
def test_deadletters_approve_refuses_whom_act_refuses_with_the_same_message(awaiting, who):
    """The requester herself (the two-person rule), a viewer (no replay permission), a user
    with no role (no view permission)."""
    user_with_role("viewer", "vera")
    UserFactory(username="nobody")
    before = row_counts()
    by_act = run("act", "run.approve", "--run", awaiting, "--operator", who)
    by_command = run("deadletters", "approve", awaiting, "--operator", who)
    assert by_act.refused_cleanly and by_command.refused_cleanly, (by_act, by_command)
    assert by_command.err == by_act.err
    assert row_counts() == before


@pytest.mark.parametrize(
    ("verb", "role", "extra"),
    [
        ("replay", "viewer", ()),
        ("discard", "viewer", ()),
        ("replay", None, ()),
        ("replay", "operator", ("--allow-poisoned",)),  # the poison permission: admins only
    ],
)
def test_deadletters_replay_and_discard_refuse_with_the_registrys_message(verb, role, extra):
    letter = str(DeadLetterFactory().pk)
    if role:
        user_with_role(role, "vera")
    else:
        UserFactory(username="vera")
    before = row_counts()
    refused = run("deadletters", verb, letter, *REASON, "--operator", "vera", *extra)
    assert refused.refused_cleanly, refused
    if extra:  # `act` checks it at the confirm step; the selection frozen for it rolled back
        assert "Not allowed: this needs the permission deadletters.replay_poisoned." in refused.err
    else:
        by_act = run("act", f"letters.{verb}", "--ids", letter, "--operator", "vera")
        assert refused.err == by_act.err
    assert row_counts() == before


def test_the_signal_alias_keeps_the_payload_masked_and_says_it_woke_the_workflow():
    """What made `workflows signal` no alias before: its entry kept the payload's shape (no
    masking in the engine) and its outcome said whether the signal woke the workflow. As an
    alias the entry is the registry's, masked, and the registry's outcome says it."""
    pk = _workflow()
    user_with_role("operator", "ana")
    result = run("workflows", "signal", pk, "go", *SIGNAL_PAYLOAD, *REASON, "--operator", "ana")
    assert result.code == 0, result.err
    assert result.out == f"Workflow {pk}: 'go' sent; it was waiting for it and runs again now.\n"
    entry = AuditEntry.objects.get(action="workflow.signal")
    assert entry.params["payload"]["plan"] == "pro"
    assert "hunter2" not in json.dumps(entry.params)
    assert "payload_summary" not in entry.params
