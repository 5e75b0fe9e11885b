"""Property-based: hostile query strings, form bodies and headers for every console URL and
/metrics, as each role. Never a 5xx, and a refused request writes nothing.

The Django test client re-raises a view's exception, so a 500 fails the example with its
traceback. Known parameter names come from the forms that parse them, so a field added to a form
is fuzzed without touching this file; a URL added to deadletters/urls.py fails
test_every_console_url_is_fuzzed until it gets an entry in ENDPOINTS.
"""

import re
from datetime import date, timedelta
from urllib.parse import quote, urlencode

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deadletters import actions, services, tokens, urls
from deadletters.forms import (
    AuditFilterForm,
    ConfirmForm,
    EditForm,
    FilterForm,
    JobConfirmForm,
    JobFilterForm,
    JobSelectionForm,
    ListPageForm,
    RunPageForm,
    SelectionForm,
)
from deadletters.models import ReplayRun, Selection
from deadletters.views.tokens import TokenForm
from deadletters.workflows import WorkflowFilterForm
from jobqueue import store
from jobqueue.models import MAX_ID, Workflow, WorkflowStep
from tests.factories import DeadLetterFactory, JobFactory, UserFactory
from tests.properties import examples

from .conftest import user_with_role

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "nobody", "viewer", "operator", "admin")
WRITERS = ("operator", "admin")
FAST = settings(
    deadline=None,
    database=None,  # no .hypothesis/ directory in the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --- values -----------------------------------------------------------------------------------

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
SPECIAL_TEXT = ["", " ", "\x00", "a\x00b", "%", "_", "'", '"', "<script>", "x" * 300, "\u202e", "é"]
SPECIAL_DAYS = ["9999-12-31", "0001-01-01", "9998-12-31", "1900-01-01", "10000-01-01", "2024-02-30"]
SPECIAL_INTS = [
    *("0", "-0", "²", "٣", "1_000", " 7 ", "1e3", "1.0", "9" * 5000),
    *(str(MAX_ID), str(MAX_ID + 1), str(-(2**63))),
]
SPECIAL_CURSORS = ["1-99999999999999999999", "99999999999999999999-1", "-1-1", "²-1", "1-²", "1-"]
special_text = st.sampled_from(SPECIAL_TEXT)
days = st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)).map(date.isoformat)
special_days = st.sampled_from(SPECIAL_DAYS)
ints = st.integers(min_value=-(2**70), max_value=2**70).map(str)
special_ints = st.sampled_from(SPECIAL_INTS)
cursors = st.sampled_from(SPECIAL_CURSORS) | st.builds(
    lambda a, b: f"{a}-{b}", ints | special_ints, ints | special_ints
)
any_value = st.one_of(text, special_text, days, special_days, ints, special_ints, cursors)

UNKNOWN_NAMES = ["ids", "select_all", "action", "after", "before", "zzz", "", "\x00", "é"]
LETTER = "<an existing dead letter's id>"  # World.resolve puts a real one in its place
# Ordinary values too, so that requests also get past validation and write (a frozen selection,
# a started or paused run) and the next examples meet that state.
PLAUSIBLE = {
    "action": st.sampled_from(["replay", "discard", "pause", "resume", "run_now", "cancel", "run"]),
    "schedule": st.sampled_from(["nightly", "no-such-schedule"]),
    "queue": st.sampled_from(["default", "mail"]),
    "task": st.just("shop.send_receipt"),
    "key": st.just("receipt:1"),
    "select_all": st.just("1"),
    "ids": st.just(LETTER),
    "reason": st.just("receipt API fixed"),
    "allow_poisoned": st.just("on"),
    "rate": st.sampled_from(["", "0", "5"]),
    "job_type": st.just("shop.send_receipt"),
    "state": st.sampled_from(["pending", "dead", "waiting"]),
    "order": st.just("oldest"),
    "source": st.just("jobqueue"),
    "args": st.sampled_from(["[]", "[1]", '["••••"]']),
    "kwargs": st.sampled_from(["{}", '{"n": 1}']),
    "format": st.sampled_from(["csv", "jsonl"]),
    "backend": st.sampled_from(["default", "", "b"]),
}


def value_for(name: str):
    """Values a field of this name is likely to choke on, plus ordinary ones and anything."""
    hostile = any_value
    if name in ("since", "until"):
        hostile = st.one_of(days, special_days, any_value)
    elif name in ("ids", "after", "before", "rate"):
        hostile = st.one_of(ints, special_ints, cursors, any_value)
    return PLAUSIBLE[name] | hostile if name in PLAUSIBLE else hostile


def hostile_pairs(names, max_size=4):
    """Fields of these and unknown names, repeats included, with hostile values."""
    name = st.sampled_from([*names, *UNKNOWN_NAMES])
    return st.lists(name.flatmap(lambda n: st.tuples(st.just(n), value_for(n))), max_size=max_size)


def pairs(names):
    """An ordinary form of these fields (some left out) followed by hostile fields: a list of
    (name, value) in submission order."""
    ordinary = st.tuples(
        *(st.none() | st.tuples(st.just(n), PLAUSIBLE[n]) for n in names if n in PLAUSIBLE)
    ).map(lambda fields: [f for f in fields if f])
    return st.builds(lambda a, b: a + b, ordinary, hostile_pairs(names))


# --- every URL --------------------------------------------------------------------------------


def path_ids(kind: str):
    """An existing row of `kind` (filled in per test from `world`) or a hostile path segment."""
    hostile = st.one_of(
        st.integers(min_value=0, max_value=10**30).map(str),
        st.sampled_from(["²", "٣", "-1", "1.0", "9" * 5000]),
    )
    return st.one_of(st.just(kind), hostile)


ENDPOINTS = {
    # name: (methods, parameter names, path under /deadletters/ with a row of World.rows or
    # a hostile segment in place of {letter}, {selection}, {run}; {command} from the URL's)
    "overview": (["GET"], [], ""),
    "list": (["GET"], list(ListPageForm.base_fields), "list/"),
    "count": (["GET"], list(FilterForm.base_fields), "list/count/"),
    "detail": (["GET"], ["backend"], "{letter}/"),
    "preview": (["POST"], [*SelectionForm.base_fields, "back"], "preview/"),
    "confirm": (["GET", "POST"], list(ConfirmForm.base_fields), "selections/{selection}/"),
    "run": (["GET"], list(RunPageForm.base_fields), "runs/{run}/"),
    "run-control": (["POST"], [], "runs/{run}/{command}/"),
    "audit": (["GET"], list(AuditFilterForm.base_fields), "audit/"),
    "reveal": (["POST"], ["backend"], "{letter}/reveal/"),
    "edit": (["GET", "POST"], [*EditForm.base_fields, "reveal", "backend"], "{letter}/edit/"),
    "run-approve": (["POST"], [], "runs/{run}/approve/"),
    "health": (["GET"], ["window"], "health/"),
    "task-timing": (["GET"], ["window"], "health/tasks/shop.send_receipt/"),
    "queue-control": (["POST"], ["action", *actions.QueuePauseForm.base_fields], "health/queues/"),
    "worker-control": (
        ["POST"],
        ["action", *actions.WorkerForm.base_fields],
        "health/workers/",
    ),
    "jobs": (["GET"], list(JobFilterForm.base_fields), "jobs/"),
    "job-counts": (["GET"], ["backend", *JobFilterForm.base_fields], "jobs/counts/"),
    "job": (["GET"], [], "jobs/{job}/"),
    "job-act": (["POST"], ["action", *actions.JobForm.base_fields], "jobs/{job}/act/"),
    "job-preview": (["POST"], list(JobSelectionForm.base_fields), "jobs/preview/"),
    "job-confirm": (["GET", "POST"], list(JobConfirmForm.base_fields), "jobs/selections/{jobs}/"),
    "schedules": (["GET"], [], "schedules/"),
    "schedule-act": (["POST"], ["action", *actions.ScheduleForm.base_fields], "schedules/act/"),
    "workflows": (["GET"], list(WorkflowFilterForm.base_fields), "workflows/"),
    "workflow": (["GET"], [], "workflows/{workflow}/"),
    "workflow-signal": (
        ["POST"],
        list(actions.SignalForm.base_fields),
        "workflows/{workflow}/signal/",
    ),
    "export": (["POST"], [*FilterForm.base_fields, "format"], "export/"),
    "audit-export": (["POST"], [*AuditFilterForm.base_fields, "format"], "audit/export/"),
    "tokens": (["GET", "POST"], list(TokenForm.base_fields), "tokens/"),
    "token-revoke": (["POST"], [], "tokens/{token}/revoke/"),
}
OUTSIDE = {"dashboard": (["GET"], [], "/"), "metrics": (["GET"], [], "/metrics")}


def test_every_console_url_is_fuzzed():
    names = {p.name for p in urls.urlpatterns}
    assert names == set(ENDPOINTS)
    assert reverse("dashboard") == OUTSIDE["dashboard"][2]
    assert reverse("metrics") == OUTSIDE["metrics"][2]


@st.composite
def requests(draw):
    name = draw(st.sampled_from([*ENDPOINTS, *OUTSIDE]))
    methods, params, template = {**ENDPOINTS, **OUTSIDE}[name]
    segments = {
        key: draw(path_ids(key))
        for key in ("letter", "selection", "run", "job", "jobs", "workflow", "token")
        if f"{{{key}}}" in template
    }
    command = draw(st.sampled_from(["pause", "resume", "cancel", "explode"]))
    return {
        "name": name,
        # Mostly the view's own methods; sometimes another, which must be a 405, not a 500.
        "method": draw(st.sampled_from([*methods * 6, "GET", "POST"])),
        "template": template,
        "segments": segments,
        "command": command,
        "query": draw(pairs(params)),
        "body": draw(pairs(params)),
        "htmx": draw(st.booleans()),
        # Each role, the two that may write more often: their requests reach the services.
        "role": draw(st.sampled_from([*ROLES, *WRITERS, *WRITERS])),
    }


# --- the world the requests land in -----------------------------------------------------------


class World:
    def __init__(self):
        self.clients = {"anonymous": Client(), "nobody": _client(UserFactory(username="nobody"))}
        users = {role: user_with_role(role) for role in ("viewer", "operator", "admin")}
        self.clients.update({role: _client(user) for role, user in users.items()})
        self.users = users
        letters = DeadLetterFactory.create_batch(8, task_path="shop.send_receipt")
        DeadLetterFactory(replayed=True)
        DeadLetterFactory(discarded=True)
        DeadLetterFactory(replays=5)  # past the poison limit
        self.rows = {
            "letter": [dl.pk for dl in letters],
            "selection": [],
            "run": [],
            "job": [dl.job_id for dl in letters],
            "jobs": [],
            "workflow": [],
            # API tokens: the operator's and the admin's.
            "token": [
                tokens.create(users[role], name="fuzz", channel="code").token.pk
                for role in ("operator", "admin")
            ],
        }
        for dl in letters[:2]:  # workflows dead at a step, with a batch's letters
            workflow = Workflow.objects.create(
                pk=dl.job_id,
                task_path=dl.task_path,
                job_id=dl.job_id,
                state="dead",
                step="charge",
                started_at=timezone.now(),
                updated_at=timezone.now(),
            )
            WorkflowStep.objects.create(
                workflow=workflow,
                name="import",
                kind="batch",
                state="done",
                result={"total": 2, "next": 2, "done": 1, "failed": 1, "dead_letters": [dl.pk]},
                started_at=timezone.now(),
            )
            self.rows["workflow"].append(workflow.pk)
        waiting = [JobFactory().pk for _ in range(3)]
        store.schedules.upsert(
            "nightly",
            {"task_path": "tests.tasks.noop", "cron": "0 3 * * *", "overlap": False},
            first_tick=timezone.now() + timedelta(hours=1),
            now=timezone.now(),
        )
        self.rows["job"] += waiting
        for user, chunk in ((users["operator"], letters[:3]), (users["admin"], letters[3:6])):
            # A background run (more than one batch) and an unconfirmed preview per actor.
            ids = [dl.pk for dl in chunk]
            selection = services.freeze_selection(operator=user, action="replay", ids=ids)
            run = services.start_run(operator=user, selection=selection, reason="fuzz")
            preview = services.freeze_selection(operator=user, action="discard", ids=ids[:1])
            self.rows["selection"] += [selection.pk, preview.pk]
            self.rows["run"].append(run.pk)
            jobs = services.freeze_selection(
                operator=user, kind="jobs", action="cancel", ids=waiting
            )
            self.rows["jobs"].append(jobs.pk)

    def resolve(self, pairs, draw_row):
        return [(k, str(draw_row(self.rows["letter"])) if v == LETTER else v) for k, v in pairs]

    def path(self, request, draw_row) -> str:
        segments = {
            key: str(draw_row(self.rows[key])) if value == key else quote(value)
            for key, value in request["segments"].items()
        }
        path = request["template"].format(command=request["command"], **segments)
        return path if path.startswith("/") else reverse("deadletters:overview") + path


def _client(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def world(settings):
    settings.REDRIVE = {
        **settings.REDRIVE,
        "REPLAY_BATCH_SIZE": 2,
    }  # so a confirmed run of 3 goes to the runner
    settings.REDRIVE = {**settings.REDRIVE, "MAX_REPLAYS": 3}
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": "s3cret-token"}
    return World()


def snapshot():
    """Every row of the queue's and the console's tables, to compare before and after."""
    return {
        model._meta.label: list(model.objects.order_by("pk").values_list())
        for label in ("jobqueue", "deadletters")
        for model in apps.get_app_config(label).get_models()
    }


# Where an accepted write sends the operator; anything else after a POST is a refusal.
ACCEPTED = re.compile(
    r"^/deadletters/((selections|runs|jobs/selections)/[0-9]+/"
    r"|jobs/[0-9]+/#history|health/#queue-control|health/#workers|schedules/#schedule-[0-9]+|workflows/[0-9]+/#signals|tokens/#token-[0-9]+"
    r"|[0-9]+/#edit-[0-9]+)$"
)


def send(client, method, path, query, body, headers):
    url = f"{path}?{urlencode(query)}" if query else path
    if method == "GET":
        return client.get(url, headers=headers)
    response = client.post(
        url, urlencode(body), content_type="application/x-www-form-urlencoded", headers=headers
    )
    if response.streaming:  # an export: read to the end, where a failure would show
        b"".join(response.streaming_content)
    return response


def refused(method, response) -> bool:
    if method == "POST" and response.status_code == 200 and response.get("Content-Disposition"):
        return False  # an export: a download that writes its audit entry
    if method == "GET" or response.status_code >= 400:
        return True
    if response.status_code == 302:
        return not ACCEPTED.match(response["Location"])
    return response.status_code != 200  # run-control's HTMX partial is a 200 after a write


@settings(FAST, max_examples=examples(200))
@given(request=requests(), data=st.data())
def test_no_console_request_is_a_server_error_or_writes_when_refused(world, request, data):
    def draw_row(rows):
        return data.draw(st.sampled_from(rows))

    method = request["method"]
    path = world.path(request, draw_row)
    query, body = (
        world.resolve(request["query"], draw_row),
        world.resolve(request["body"], draw_row),
    )
    headers = {"HX-Request": "true"} if request["htmx"] else {}
    before = snapshot()
    response = send(world.clients[request["role"]], method, path, query, body, headers)
    assert response.status_code < 500
    was_refused = refused(method, response)
    # --hypothesis-show-statistics shows what was reached (a 200, a refusal, a write ...).
    outcome = "refused" if was_refused and method == "POST" else ""
    event(f"{request['name']} {method} {response.status_code} {outcome}")
    if was_refused:
        assert snapshot() == before, (method, path, query, body, response.status_code)


# Some 1,800 requests over all the URLs, each POST between two reads of every table.
# One case per URL, so that no one test holds a worker for minutes.
@pytest.mark.parametrize("url", sorted({**ENDPOINTS, **OUTSIDE}))
def test_every_special_value_in_every_parameter_of_every_url(world, url):
    """The grid the random tests may miss: each known edge value in every parameter at once,
    followed by an ordinary form's required fields (which win where a field is read once), as
    the admin, who may do everything a URL offers. (GETs are checked for writes above.)"""
    specials = [*SPECIAL_TEXT, *SPECIAL_DAYS, *SPECIAL_INTS, *SPECIAL_CURSORS]
    ordinary = {"action": "replay", "ids": str(world.rows["letter"][0]), "reason": "fixed"}
    methods, params, template = {**ENDPOINTS, **OUTSIDE}[url]
    rows = {key: world.rows[key][0] for key in world.rows}
    path = template.format(command="pause", **rows)
    path = path if path.startswith("/") else reverse("deadletters:overview") + path
    for value, method in ((v, m) for v in specials for m in methods):
        fields = [(p, value) for p in params] + [(p, v) for p, v in ordinary.items() if p in params]
        before = snapshot() if method == "POST" else None
        try:
            response = send(world.clients["admin"], method, path, fields, fields, {})
        except Exception as exc:
            raise AssertionError(f"{method} {path} with {value[:40]!r}") from exc
        assert response.status_code < 500
        if before is not None and refused(method, response):
            assert snapshot() == before, (method, path, value[:40], response.status_code)


def test_every_url_answers_a_method_it_does_not_take_with_405_and_writes_nothing(world):
    """As the admin, who may do everything a URL offers: any other method is refused before
    the view does anything (a confirmation page answered PUT with its preview)."""
    rows = {key: world.rows[key][0] for key in world.rows}
    for name, (methods, _, template) in {**ENDPOINTS, **OUTSIDE}.items():
        path = template.format(command="pause", **rows)
        path = path if path.startswith("/") else reverse("deadletters:overview") + path
        for method in {"GET", "POST", "PUT", "PATCH", "DELETE"} - set(methods):
            before = snapshot()
            response = world.clients["admin"].generic(method, path)
            assert response.status_code == 405, (name, method, response.status_code)
            assert snapshot() == before, (name, method)


@settings(FAST, max_examples=examples(60))
@given(
    scheme=st.sampled_from(["Bearer ", "bearer ", "Basic ", "", "Bearer  "]),
    token=st.one_of(
        st.text(st.characters(max_codepoint=0xFF, exclude_characters="\r\n"), max_size=40),
        st.sampled_from(["é", "s3cret-token\x00", "s3cret-tokén", "s3cret-token" * 100]),
    ),
    role=st.sampled_from(ROLES),
)
def test_metrics_never_fails_on_a_header(world, scheme, token, role):
    header = scheme + token
    response = world.clients[role].get("/metrics", headers={"Authorization": header})
    # "Bearer <token>", surrounding blanks aside, or a staff login (the admin role).
    let_in = role == "admin" or header.removeprefix("Bearer ").strip() == "s3cret-token"
    assert response.status_code == (200 if let_in else 401)


@settings(FAST, max_examples=examples(8))
@given(
    count=st.integers(min_value=900, max_value=3000),
    value=st.one_of(ints, special_ints),
    role=st.sampled_from(ROLES),
)
def test_thousands_of_ids_are_refused_or_frozen_never_a_server_error(world, count, value, role):
    letters = world.rows["letter"]
    body = [("action", "replay"), *(("ids", letters[i % len(letters)]) for i in range(count))]
    body.append(("ids", value))
    before = snapshot()
    response = send(world.clients[role], "POST", reverse("deadletters:preview"), [], body, {})
    assert response.status_code < 500
    if refused("POST", response):
        assert snapshot() == before
    else:
        assert Selection.objects.latest("pk").ids[0] == letters[0]
    assert ReplayRun.objects.count() == 2


@st.composite
def hostile_writes(draw):
    """An ordinary write with a few hostile fields mixed in, as an operator or an admin."""
    name = draw(st.sampled_from(["preview", "confirm", "run-control"]))
    params = ENDPOINTS[name][1]
    required = {"preview": ["action", "ids"], "confirm": ["reason"], "run-control": []}[name]
    ordinary = [(n, draw(PLAUSIBLE[n])) for n in required]
    if name == "preview":
        ordinary += [("ids", LETTER)] * draw(st.integers(0, 3))
    hostile = draw(hostile_pairs(params, max_size=2))
    at = draw(st.integers(0, len(ordinary)))
    return {
        "name": name,
        "role": draw(st.sampled_from(WRITERS)),
        "command": draw(st.sampled_from(["pause", "resume", "cancel"])),
        "body": ordinary[:at] + hostile + ordinary[at:],
    }


@settings(FAST, max_examples=examples(80))
@given(write=hostile_writes(), data=st.data())
def test_a_write_with_hostile_fields_writes_exactly_what_was_ticked_or_nothing(world, write, data):
    user = world.users[write["role"]]
    letters = world.rows["letter"]
    body = world.resolve(write["body"], lambda rows: data.draw(st.sampled_from(rows)))
    if write["name"] == "preview":
        path = reverse("deadletters:preview")
    elif write["name"] == "confirm":
        selection = services.freeze_selection(operator=user, action="replay", ids=letters[6:])
        path = reverse("deadletters:confirm", args=[selection.pk])
    else:
        selection = services.freeze_selection(operator=user, action="replay", ids=letters[:3])
        run = services.start_run(operator=user, selection=selection, reason="to steer")
        path = reverse("deadletters:run-control", args=[run.pk, write["command"]])
    latest = Selection.objects.order_by("pk").last()
    before = snapshot()
    response = send(world.clients[write["role"]], "POST", path, [], body, {})
    assert response.status_code < 500
    was_refused = refused("POST", response)
    event(f"{write['name']} {response.status_code} {'refused' if was_refused else 'accepted'}")
    if was_refused:
        assert snapshot() == before, (path, body, response.status_code)
    elif write["name"] == "preview":
        frozen = Selection.objects.order_by("pk").last()
        assert frozen != latest
        fields = dict(body)
        if fields.get("select_all") != "1":
            # Hand-picked: exactly the ids submitted, nothing carried in from elsewhere.
            ticked = [int(v) for k, v in body if k == "ids"]
            assert frozen.ids == list(dict.fromkeys(ticked))
            assert frozen.filter == {}
