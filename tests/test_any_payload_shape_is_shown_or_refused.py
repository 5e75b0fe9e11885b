"""Any payload shape is shown or refused (issue 30, payloads and values).

Whatever the doors take (enqueue from Python or `manage.py enqueue`, a workflow signal, the
outbox, an edit before replay) is shown, masked, on every page and by every command that shows
it, without a 5xx or a traceback; whatever they refuse is refused by name and nothing is
written. A row nested past MAX_JSON_DEPTH can still exist (written by hand, or by a version
before the limit): it is shown too, cut, by walks that use no recursion.

The property test drives generated payloads (deep up to and past the limit, wide, long strings,
every JSON type, unicode edge cases, keys that look like secrets) through enqueue, a real
worker, a dead letter and every page and command. It runs a few examples (more under CI, where
they are derandomized so a failure reproduces): the whole file stays under a minute.
"""

import json
import os
import re
from decimal import Decimal

import pytest
from django.db import connection
from django.tasks import task_backends
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deadletters import redaction
from deadletters.models import PayloadEdit
from jobqueue import outbox, store, workflows
from jobqueue.errors import InvalidArguments
from jobqueue.models import DeadLetter, Job, JobState, Workflow, WorkflowSignal, WorkflowStep
from jobqueue.store import MAX_JSON_DEPTH
from jobqueue.worker import Worker
from tests import tasks
from tests.cli import row_counts, run
from tests.deadletters.conftest import logged_in, user_with_role
from tests.factories import DeadLetterFactory, JobFactory
from tests.properties import examples

MARKER = "zq-hidden-zq"  # what sits under every sensitive name: never in a masked output
TOO_DEEP = f"deeper than {MAX_JSON_DEPTH} levels"


def nested(depth: int, leaf):
    """`leaf` inside `depth` levels of objects and arrays, alternating."""
    value = leaf
    for n in range(depth):
        value = [value] if n % 2 else {"k": value}
    return value


@pytest.fixture
def people(db):
    viewer = user_with_role("viewer")
    chief = user_with_role("admin", "chief")  # reveal, edit, export, the Django admin
    return logged_in(viewer), logged_in(chief)


AUDITED = ["--reason", "hostile payload", "--operator", "ops"]


def workflow_of(job) -> Workflow:
    now = timezone.now()
    return Workflow.objects.create(
        pk=job.pk, task_path=job.task_path, job=job, started_at=now, updated_at=now
    )


def body(response) -> str:
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return content.decode("utf-8", "replace")


def shows(people, letter, jobs, workflow, *, search="x") -> dict[str, str]:
    """Every page that shows these rows' values, by name: (status, text). `jobs`: the job
    pages to read. Masked pages are read by a viewer, the rest by the admin."""
    viewer, chief = people
    detail = reverse("deadletters:detail", args=[letter.pk])
    edit = reverse("deadletters:edit", args=[letter.pk])
    requests = {
        "letter": lambda: viewer.get(detail),
        "reveal": lambda: chief.post(reverse("deadletters:reveal", args=[letter.pk])),
        "edit": lambda: chief.get(edit),
        "edit-as-shown": lambda: chief.post(edit, _as_shown(letter)),
        "workflow": lambda: viewer.get(reverse("deadletters:workflow", args=[workflow.pk])),
        "list": lambda: chief.get(reverse("deadletters:list"), {"q": search}),
        "jobs": lambda: chief.get(reverse("deadletters:jobs"), {"q": search}),
        "audit": lambda: viewer.get(reverse("deadletters:audit")),
        "csv": lambda: chief.post(reverse("deadletters:export"), {"format": "csv"}),
        "jsonl": lambda: chief.post(reverse("deadletters:export"), {"format": "jsonl"}),
        "admin": lambda: chief.get(reverse("admin:jobqueue_deadletter_change", args=[letter.pk])),
        "admin-list": lambda: chief.get(reverse("admin:jobqueue_deadletter_changelist")),
        **{
            f"job {job.pk}": lambda job=job: viewer.get(reverse("deadletters:job", args=[job.pk]))
            for job in jobs
        },
    }
    out = {}
    for name, request in requests.items():
        response = request()
        out[name] = (response.status_code, body(response))
    return out


def _as_shown(letter) -> dict:
    """The edit form sent back as the page shows it (masks in place), with a reason."""
    return {
        "args": json.dumps(redaction.redact(letter.args)),
        "kwargs": json.dumps(redaction.redact(letter.kwargs)),
        "reason": "as shown",
    }


def commands(letter, workflow) -> dict[str, object]:
    pk = str(letter.pk)
    argvs = {
        "show": ["deadletters", "show", pk],
        "show --json": ["deadletters", "show", pk, "--json"],
        "show --reveal": ["deadletters", "show", pk, "--reveal", "--operator", "chief"],
        "list": ["deadletters", "list"],
        "list --json": ["deadletters", "list", "--json"],
        "export": ["deadletters", "export", "--format", "jsonl", "--operator", "chief"],
        "workflows show": ["workflows", "show", str(workflow.pk), "--results"],
        "jobs": ["jobs", "--json"],
    }
    return {name: run(*argv) for name, argv in argvs.items()}


MASKED = ("letter", "workflow", "csv", "jsonl", "admin", "edit", "audit")
# A search may be refused (a NUL in it): 400, said on the page.
STATUSES = {"edit-as-shown": {302, 400}, "list": {200, 400}, "jobs": {200, 400}}
UNMASKED = ("show --reveal", "workflows show")  # an audited reveal; --results prints values


def assert_shown(pages: dict, results: dict) -> None:
    """No server error, no traceback, and no masked value on a masked page or command."""
    for name, (status, text) in pages.items():
        assert status in STATUSES.get(name, {200}), (name, status, text[-2000:])
        if name in MASKED or name.startswith("job "):
            assert MARKER not in text, name
    for name, result in results.items():
        assert result.code == 0 and "Traceback" not in result.err, (name, result)
        if name not in UNMASKED:
            assert MARKER not in result.out, name


# --- rows nested past the limit, written past the doors ------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 990, 5_000])
def test_a_row_nested_past_the_limit_is_shown_cut_on_every_page_and_by_every_command(people, depth):
    if depth > 1_000 and connection.vendor == "sqlite":
        pytest.skip("SQLite's JSON check refuses nesting past 1,000: no such row can exist")
    deep = nested(depth, {"password": MARKER})
    payload = {"api_token": MARKER, "deep": deep}
    job = JobFactory(task_path="tests.tasks.add", args=[deep], kwargs=payload, dead=True)
    done = JobFactory(
        task_path="tests.tasks.add", done=True, args=[1], kwargs={}, return_value=payload
    )
    letter = DeadLetterFactory(task_path="tests.tasks.add", job=job, args=[deep], kwargs=payload)
    workflow = workflow_of(job)
    now = timezone.now()
    WorkflowStep.objects.create(
        workflow=workflow, name="s", kind="call", state="done", started_at=now, result=payload
    )
    WorkflowSignal.objects.create(workflow=workflow, name="go", payload=payload, sent_at=now)
    PayloadEdit.objects.create(
        dead_letter=letter,
        operator=user_with_role("admin", "editor"),
        operator_name="editor",
        reason="an older version's edit",
        old_args=[deep],
        new_args=[deep, 1],
        at=now,
    )
    pages = shows(people, letter, [job, done], workflow)
    results = commands(letter, workflow)
    pages.pop("edit-as-shown")  # refused before any form: the letter cannot be edited
    assert_shown(pages, results)
    for name in ("letter", "reveal", "admin", f"job {job.pk}", f"job {done.pk}", "workflow"):
        assert TOO_DEEP in pages[name][1], name  # cut, and said so
    assert "nests deeper than 64 levels" in pages["edit"][1]
    assert TOO_DEEP in results["show"].out and TOO_DEEP in results["export"].out
    assert len(pages["reveal"][1]) < 200_000  # indentation grew with the square of the depth


# --- the doors: a value nested past the limit is refused by name ---------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 990, 5_000, 30_000])
def test_every_door_refuses_a_value_nested_past_the_limit_by_name_and_writes_nothing(depth):
    deep = nested(depth, "x")
    text = "[" * depth + "]" * depth  # what a shell passes, however deep
    workflow = workflow_of(JobFactory(task_path="tests.tasks.add"))
    user_with_role("operator", "ops")  # the signal command's --operator (it is audited)
    before = row_counts()
    refusals = []
    for call in (
        lambda: tasks.add.enqueue(deep, 1),
        lambda: tasks.add.enqueue(1, b=deep),
        lambda: task_backends["default"].enqueue_many(tasks.add, [((1,), {"b": deep})]),
        lambda: workflows.signal(workflow.pk, "go", deep),
        lambda: outbox.publish("orders.created", {"order": deep}),
    ):
        with pytest.raises((InvalidArguments, TypeError, ValueError)) as refused:
            call()
        refusals.append(str(refused.value))
    for argv in (
        ["enqueue", "tests.tasks.add", "--args", f"[{text}, 1]"],
        ["enqueue", "tests.tasks.add", "--kwargs", f'{{"a": 1, "b": {text}}}'],
        ["workflows", "signal", str(workflow.pk), "go", "--payload", text, *AUDITED],
    ):
        result = run(*argv)
        assert result.refused_cleanly, result
        refusals.append(result.err)
    assert [r for r in refusals if TOO_DEEP not in r] == []
    assert row_counts() == before


# --- return values: bounded when stored, and when shown ------------------------------------


@pytest.mark.django_db
def test_a_job_page_reads_a_huge_stored_return_value_only_for_its_size(people, settings):
    """A row stored before return values were bounded: every view loaded it whole."""
    settings.REDRIVE = {**settings.REDRIVE, "MAX_PAYLOAD_BYTES": 1_000}
    value = {"blob": "x" * 5_000}
    huge = JobFactory(done=True, return_value=value)
    viewer, _ = people
    with CaptureQueriesContext(connection) as queries:
        page = viewer.get(reverse("deadletters:job", args=[huge.pk]))
    assert page.status_code == 200
    assert "x" * 100 not in page.content.decode()
    assert f"not shown: {len(json.dumps(value)):,} characters of JSON" in page.content.decode()
    # The column read as a column (not inside LENGTH(...)) would bring it all to the process.
    column = re.compile(r'"jobqueue_job"\."return_value"(,| FROM)')
    assert [q["sql"] for q in queries if column.search(q["sql"])] == []


@pytest.mark.django_db
def test_a_job_page_shows_a_long_return_value_cut(people):
    job = JobFactory(done=True, return_value=["y" * 30_000, {"token": MARKER}])
    text = people[0].get(reverse("deadletters:job", args=[job.pk])).content.decode()
    assert "cut: too long to show whole" in text and "y" * 30_000 not in text
    assert "y" * 1_000 in text and MARKER not in text


# --- the property: generated payloads through enqueue, a worker and every page ------------

SENSITIVE = ["password", "smtp_pass", "api_key", "Authorization", "access_token", "jwt", "cvv"]
EDGE_TEXT = st.sampled_from(
    [
        "", "\x00", "a\x00b", "\ud800", "x\udfff", "\u202eevil\u202c", "e\u0301\u0308", "😀👍🏽",
        "\u2028\u2029", "\x1b[31mred", "\r\n\t", "\x85\x7f", "<script>alert(1)</script>",
        "'\"\\", "=1+1", "••••", "•••• (changed)", "ﷺ", "\ufeff", " ",
    ]
)  # fmt: skip
TEXT = st.one_of(
    EDGE_TEXT,
    st.text(max_size=12),
    st.text(st.characters(categories=["Cc", "Cs", "Mn", "So", "Zl", "Zp"]), max_size=6),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(),  # NaN and infinities too: refused by name
    TEXT,
)


def objects(children):
    """Objects whose keys may look like secrets: the value under one is MARKER."""
    keys = st.one_of(TEXT, st.sampled_from(SENSITIVE))
    return st.lists(st.tuples(keys, children), max_size=5).map(
        lambda pairs: {k: (MARKER if redaction.is_sensitive(k) else v) for k, v in pairs}
    )


VALUES = st.recursive(SCALARS, lambda c: st.lists(c, max_size=5) | objects(c), max_leaves=12)
LIMIT = 20_000  # MAX_PAYLOAD_BYTES in the property test: long strings stay cheap
SHAPES = st.one_of(
    VALUES,
    st.tuples(st.integers(MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH + 2) | st.just(990), VALUES).map(
        lambda t: nested(*t)
    ),
    st.integers(0, 400).map(lambda n: {f"k{i}": i for i in range(n)}),  # wide
    st.integers(LIMIT - 60, LIMIT + 20).map(lambda n: "w" * n),  # at and past the size limit
    st.sampled_from(
        [
            [["Authorization", f"Bearer {MARKER}"], ["Accept", "*/*"]],
            [{"name": "X-Api-Key", "value": MARKER}],
            f"postgres://app:{MARKER}@db/shop",
            f"https://hooks.example/?token={MARKER}&order=1",
            f'{{"password": "{MARKER}"}}',
        ]
    ),
)
REFUSALS = (
    TOO_DEEP,
    "NUL",
    "lone surrogate",
    f"over the {LIMIT}-byte limit",
    "not JSON compliant",
    "Exceeds the limit",
)
EXAMPLES = settings(
    max_examples=examples(12),  # each shape is shown on every page: ~1.5 s here
    derandomize=bool(os.environ.get("CI")),
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@pytest.mark.django_db(transaction=True)
@EXAMPLES
@given(
    value=SHAPES,
    via=st.sampled_from(["python", "command"]),
    search=TEXT.filter(
        lambda t: t.encode("utf-8", "surrogatepass") == t.encode("utf-8", "replace")
    ),
)
def test_any_payload_is_shown_everywhere_or_refused_by_name(people, settings, value, via, search):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_PAYLOAD_BYTES": LIMIT}
    before = row_counts()
    refusal = _enqueue(via, value)
    event("refused" if refusal is not None else "shown")  # --hypothesis-show-statistics
    if refusal is not None:
        assert any(reason in refusal for reason in REFUSALS), refusal
        assert "recursion" not in refusal
        assert row_counts() == before
        return
    assert store.json_depth([value]) <= MAX_JSON_DEPTH
    Worker(burst=True, concurrency=1, poll_interval=0.05).run()
    dead = Job.objects.filter(task_path="tests.tasks.refuses").latest("id")
    done = Job.objects.filter(task_path="tests.tasks.noop").latest("id")
    assert (dead.state, done.state) == (JobState.DEAD, JobState.DONE)
    assert _numbers_exact(done.return_value) == _numbers_exact(value)  # stored as returned
    letter = DeadLetter.objects.get(job_id=dead.pk)
    workflow = Workflow.objects.filter(pk=dead.pk).first() or workflow_of(dead)
    workflows.signal(workflow.pk, "go", value)
    assert_shown(
        shows(people, letter, [dead, done], workflow, search=search), commands(letter, workflow)
    )


def _numbers_exact(value):
    """`value` with its numbers as decimals: jsonb gives a float written with a large exponent
    back as the int of its digits (the README says so), equal as a number."""
    return json.loads(json.dumps(value), parse_float=Decimal, parse_int=Decimal)


def _enqueue(via: str, value) -> str | None:
    """Enqueue `value` to a task that dead-letters and one that returns it; the refusal's words,
    or None."""
    if via == "python":
        try:
            tasks.refuses.enqueue(value)
            tasks.noop.enqueue(value)
        except InvalidArguments as exc:
            return str(exc)
        return None
    try:
        text = json.dumps([value])
    except (ValueError, RecursionError):  # a value json cannot write: no shell could pass it
        return _enqueue("python", value)
    results = [
        run("enqueue", path, "--args", text) for path in ("tests.tasks.refuses", "tests.tasks.noop")
    ]
    if results[0].code == 2:
        assert results[0].refused_cleanly and results[1].refused_cleanly, results
        return results[0].err
    assert [r.code for r in results] == [0, 0], results
    return None
