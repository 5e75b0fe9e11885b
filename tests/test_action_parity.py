"""Issue 31: every action of the registry (deadletters.actions) works through every channel
that offers it — the console and `manage.py act` here, the JSON API in tests/api — is refused on
each without its permission with nothing written, and each success writes exactly one audit
entry, of the registry's action, naming the channel it came through.

The scenarios are keyed by action name, and the first test fails when the registry has an action
without one: a new action cannot land without being tried on every channel.
"""

import json
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deadletters import actions, tokens
from deadletters.models import RunState
from jobqueue import store
from jobqueue.models import AuditEntry, WorkerRecord, Workflow
from tests.api.conftest import api_as
from tests.cli import run
from tests.deadletters.conftest import user_with_role
from tests.factories import (
    DeadLetterFactory,
    JobFactory,
    ReplayRunFactory,
    SelectionFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

ADD = "tests.tasks.add"  # add(a, b)


@dataclass
class Scenario:
    """One action tried once: its input, the console's request for it, who may do it."""

    data: dict  # the registry's input (the CLI's options)
    console: str  # the console URL a form posts it to (a bulk action: its preview URL)
    form: dict = field(default_factory=dict)  # what that form posts besides `data`
    role: str = "operator"
    select: dict = field(default_factory=dict)  # a bulk action's selection input


def later():
    return timezone.now() + timedelta(hours=1)


def _queue(paused: bool):
    JobFactory(queue_name="emails")
    if paused:
        store.queues.pause("emails", actor="setup", reason="set up", channel="code")
    return {"queue": "emails", "reason": "provider outage"}


def _schedule(paused: bool = False):
    now = timezone.now()
    store.schedules.upsert(
        "nightly",
        {"task_path": "tests.tasks.noop", "cron": "0 3 * * *", "timezone": "UTC"},
        first_tick=now + timedelta(hours=1),
        now=now,
    )
    if paused:
        store.schedules.pause("nightly", actor="setup", reason="set up", channel="code")
    return {"schedule": "nightly", "reason": "report needed now"}


def _run(state, *, requester=None):
    letter = DeadLetterFactory()
    selection = SelectionFactory(ids=[letter.pk], **({"operator": requester} if requester else {}))
    return ReplayRunFactory(selection=selection, state=state)


def _workflow():
    job = JobFactory()
    return Workflow.objects.create(
        pk=job.pk,
        task_path=job.task_path,
        job_id=job.pk,
        state="waiting",
        waiting_for="approved",
        started_at=timezone.now(),
        updated_at=timezone.now(),
    )


def queue_pause():
    return Scenario(_queue(False), reverse("deadletters:queue-control"), {"action": "pause"})


def queue_resume():
    return Scenario(_queue(True), reverse("deadletters:queue-control"), {"action": "resume"})


def schedule_verb(verb, paused=False):
    def make():
        return Scenario(_schedule(paused), reverse("deadletters:schedule-act"), {"action": verb})

    return make


def job_verb(verb, **job):
    def make():
        pk = JobFactory(**job).pk
        return Scenario(
            {"job": pk, "reason": "customer asked"},
            reverse("deadletters:job-act", args=[pk]),
            {"action": verb},
        )

    return make


def jobs_verb(verb):
    def make():
        pk = JobFactory(run_after=later()).pk
        return Scenario(
            {"reason": "campaign called off"},
            reverse("deadletters:job-preview"),
            {"action": verb},
            select={"ids": pk},
        )

    return make


def letters_verb(verb):
    def make():
        pk = DeadLetterFactory().pk
        return Scenario(
            {"reason": "receipt API fixed"},
            reverse("deadletters:preview"),
            {"action": verb},
            select={"ids": pk},
        )

    return make


def letter_reveal():
    pk = DeadLetterFactory(kwargs={"password": "hunter2"}).pk
    return Scenario({"letter": pk}, reverse("deadletters:reveal", args=[pk]), role="admin")


def letter_edit_replay():
    pk = DeadLetterFactory(task_path=ADD, args=[1, 2], kwargs={}).pk
    return Scenario(
        {"letter": pk, "args": "[1, 3]", "kwargs": "{}", "reason": "amount was wrong"},
        reverse("deadletters:edit", args=[pk]),
        role="admin",
    )


def letters_export():
    DeadLetterFactory()
    return Scenario({"format": "jsonl"}, reverse("deadletters:export"))


def run_verb(verb, state):
    def make():
        pk = _run(state).pk
        command = "resume" if verb == "resume_past_canary" else verb
        return Scenario({"run": pk}, reverse("deadletters:run-control", args=[pk, command]))

    return make


def run_approve():
    requester = user_with_role("operator", "requester")
    pk = _run(RunState.AWAITING, requester=requester).pk
    return Scenario({"run": pk}, reverse("deadletters:run-approve", args=[pk]))


def workflow_signal():
    pk = _workflow().pk
    return Scenario(
        {"workflow": pk, "event": "approved", "payload": '{"by": "ana"}', "reason": "signed"},
        reverse("deadletters:workflow-signal", args=[pk]),
    )


def worker_verb(verb):
    def make():
        now = timezone.now()
        WorkerRecord.objects.create(
            worker_id="web-1:4242", host="web-1", pid=4242, started_at=now, last_heartbeat_at=now
        )
        return Scenario(
            {"worker": "web-1:4242", "reason": "draining the host"},
            reverse("deadletters:worker-control"),
            {"action": verb},
        )

    return make


def token_create():
    return Scenario(
        {"name": "deploy script", "scopes": ["read", "act"], "days": "30"},
        reverse("deadletters:tokens"),
        role="viewer",  # any console user makes their own
    )


def token_revoke():
    owner = user_with_role("operator", "ana")
    pk = tokens.create(owner, name="old laptop", channel="code").token.pk
    return Scenario({"token": pk}, reverse("deadletters:token-revoke", args=[pk]))


SCENARIOS = {
    "queue.pause": queue_pause,
    "queue.resume": queue_resume,
    "schedule.pause": schedule_verb("pause"),
    "schedule.resume": schedule_verb("resume", paused=True),
    "schedule.run": schedule_verb("run"),
    "job.run_now": job_verb("run_now", run_after=later()),
    "job.retry_now": job_verb("retry_now", run_after=later(), attempts=1),
    "job.cancel": job_verb("cancel"),
    "jobs.run_now": jobs_verb("run_now"),
    "jobs.cancel": jobs_verb("cancel"),
    "letters.replay": letters_verb("replay"),
    "letters.discard": letters_verb("discard"),
    "letter.reveal": letter_reveal,
    "letter.edit_replay": letter_edit_replay,
    "letters.export": letters_export,
    "run.pause": run_verb("pause", RunState.RUNNING),
    "run.resume": run_verb("resume", RunState.PAUSED),
    "run.cancel": run_verb("cancel", RunState.RUNNING),
    "run.resume_past_canary": run_verb("resume_past_canary", RunState.HALTED),
    "run.approve": run_approve,
    "workflow.signal": workflow_signal,
    "worker.quiet": worker_verb("quiet"),
    "worker.stop": worker_verb("stop"),
    "token.create": token_create,
    "token.revoke": token_revoke,
}
# Actions whose console is not a form posting the registry's fields (the API's token pages).
CONSOLE_ELSEWHERE: set[str] = set()


def snapshot():
    """Every row of the queue's and the console's tables."""
    return {
        model._meta.label: list(model.objects.order_by("pk").values_list())
        for label in ("jobqueue", "deadletters")
        for model in apps.get_app_config(label).get_models()
    }


def new_entries(since: int) -> list[tuple[str, str]]:
    return list(
        AuditEntry.objects.filter(id__gt=since).order_by("id").values_list("action", "channel")
    )


def last_entry() -> int:
    return AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0


def cli_args(name: str, values: dict) -> list[str]:
    args = []
    for key, value in values.items():
        many = value if isinstance(value, list) else [value]
        args += [f"--{key.replace('_', '-')}", *(str(v) for v in many)]
    return args


def api_body(values: dict) -> dict:
    """The scenario's input as a script sends it: JSON, ids as a list of numbers."""
    return {key: [value] if key == "ids" else value for key, value in values.items()}


def via_api(api, name, scenario: Scenario):
    if actions.get(name).bulk:
        frozen = api.post(f"actions/{name}", api_body(scenario.select))
        if frozen.status_code != 201:
            return frozen
        return api.post(f"selections/{frozen.json()['selection']}/confirm", scenario.data)
    return api.post(f"actions/{name}", api_body(scenario.data))


def via_console(client, name, scenario: Scenario):
    if actions.get(name).bulk:
        frozen = client.post(scenario.console, {**scenario.form, **scenario.select})
        if frozen.status_code != 302 or "/selections/" not in frozen["Location"]:
            return frozen
        return client.post(frozen["Location"], scenario.data)
    return client.post(scenario.console, {**scenario.form, **scenario.data})


def via_cli(username, name, scenario: Scenario):
    if actions.get(name).bulk:
        frozen = run(
            "act", name, *cli_args(name, scenario.select), "--operator", username, "--json"
        )
        if frozen.code:
            return frozen
        selection = json.loads(frozen.out)["selection"]
        return run(
            "act", "confirm", str(selection), *cli_args(name, scenario.data), "--operator", username
        )
    return run("act", name, *cli_args(name, scenario.data), "--operator", username)


def test_every_action_of_the_registry_has_a_scenario():
    assert set(SCENARIOS) == set(actions.REGISTRY)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_action_through_the_console_writes_one_audit_entry(name):
    scenario = SCENARIOS[name]()
    client = Client()
    client.force_login(user_with_role(scenario.role, "ana"))
    since = last_entry()
    response = via_console(client, name, scenario)
    assert response.status_code in (200, 302), response.status_code
    assert new_entries(since) == [(actions.get(name).audit_action, "console")]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_action_through_the_command_line_writes_one_audit_entry(name):
    scenario = SCENARIOS[name]()
    user_with_role(scenario.role, "ana")
    since = last_entry()
    result = via_cli("ana", name, scenario)
    assert result.code == 0, result.err
    assert new_entries(since) == [(actions.get(name).audit_action, "cli")]


ON_THE_API = sorted(name for name in SCENARIOS if actions.get(name).api)


@pytest.mark.parametrize("name", ON_THE_API)
def test_each_action_through_the_api_writes_one_audit_entry_naming_its_token(name):
    scenario = SCENARIOS[name]()
    user = user_with_role(scenario.role, "ana")
    api = api_as(user)  # its token's making is an entry of its own, before `since`
    since = last_entry()
    response = via_api(api, name, scenario)
    assert response.status_code in (200, 201), response.content
    assert new_entries(since) == [(actions.get(name).audit_action, "api")]
    assert AuditEntry.objects.get(id__gt=since).token == api.token.label


def test_making_a_token_is_not_offered_to_a_token():
    api = api_as(user_with_role("operator", "ana"))
    api.get("actions")  # used once: its last use is written once a minute at most
    before = snapshot()
    response = api.post("actions/token.create", {"name": "x", "scopes": ["act"]})
    assert response.status_code == 404
    assert snapshot() == before


def _refused_user(name):
    """One who may look but not do `name`; for an action any console user may do (their own
    tokens), one who may not even look."""
    if actions.get(name).permissions or name == "token.revoke":
        return user_with_role("viewer", "vera")
    return UserFactory(username="vera")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_action_is_refused_without_its_permission_and_writes_nothing(name):
    scenario = SCENARIOS[name]()
    viewer = _refused_user(name)
    client = Client()
    client.force_login(viewer)
    refused_api = api_as(viewer)  # made before the snapshot: its making is no write of the call
    refused_api.get("actions")  # and used: a token's last use is written once a minute at most
    before = snapshot()
    response = via_console(client, name, scenario)
    assert response.status_code == 403
    assert snapshot() == before
    result = via_cli("vera", name, scenario)
    assert result.code == 2 and "Not allowed: this needs the permission" in result.err
    assert snapshot() == before
    if actions.get(name).api:
        assert via_api(refused_api, name, scenario).status_code == 403
        assert snapshot() == before
