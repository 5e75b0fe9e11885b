"""A workflow's timeline (deadletters.workflows.timeline): each step's start from the
workflow's start, its length (to now while it runs), waits told from work, failed attempts
placed on its bar, the total; on a clock the test sets, from rows it builds in memory."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from deadletters import workflows
from jobqueue.models import JobState, Workflow, WorkflowState, WorkflowStep
from tests.factories import JobFactory

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(seconds) -> datetime:
    return T0 + timedelta(seconds=seconds)


def flow(state=WorkflowState.RUNNING, updated=0) -> Workflow:
    return Workflow(
        pk=1, task_path="shop.onboard", state=state, started_at=T0, updated_at=at(updated)
    )


def step(name, kind="call", start=0, end=None, state="done", errors=(), attempts=1):
    return WorkflowStep(
        name=name,
        kind=kind,
        state=state,
        attempts=attempts,
        errors=list(errors),
        started_at=at(start),
        finished_at=None if end is None else at(end),
    )


def test_a_finished_workflow_s_steps_start_last_and_wait_on_one_scale():
    steps = [
        step("charge", start=0, end=12),
        step("grace", kind="sleep", start=12, end=3612),
        step("signed", kind="wait", start=3612, end=3700),
        step("welcome", start=3700, end=3800),
    ]
    t = workflows.timeline(flow(WorkflowState.DONE, updated=3800), steps, "done", now=at(99_999))
    assert t.total == 3800 and not t.running
    assert [(s.offset, s.length, s.wait) for s in t.spans] == [
        (0, 12, False),
        (12, 3600, True),
        (3612, 88, True),
        (3700, 100, False),
    ]
    assert (t.worked, t.waited) == (112, 3688)
    grace = t.spans[1]
    assert (grace.left, grace.width) == (round(12 / 38, 2), round(3600 / 38, 2))
    assert not any(s.running for s in t.spans)


def test_a_running_workflow_counts_to_the_clock_and_its_open_step_runs():
    steps = [
        step("charge", start=0, end=30),
        step("grace", kind="sleep", start=30, state="pending"),
    ]
    t = workflows.timeline(flow(), steps, "sleeping", now=at(90))
    assert t.running and t.total == 90
    grace = t.spans[1]
    assert grace.running and grace.wait and grace.length == 60
    # A later clock: the same rows, longer.
    later = workflows.timeline(flow(), steps, "sleeping", now=at(150))
    assert later.total == 150 and later.spans[1].length == 120


def test_failed_attempts_are_counted_and_placed_on_the_bar():
    errors = [
        {"attempt": 1, "at": at(10).isoformat(), "message": "x"},
        {"attempt": 2, "at": at(50).isoformat(), "message": "y"},
        {"attempt": 3, "message": "no time kept"},
        "not a dict",
    ]
    steps = [step("charge", start=0, state="failed", errors=errors, attempts=3)]
    t = workflows.timeline(flow(), steps, "running", now=at(100))
    charge = t.spans[0]
    assert charge.failed == 3 and charge.failures == [10.0, 50.0]
    assert charge.running and charge.length == 100


def test_a_dead_workflow_ends_at_its_last_change_and_its_unfinished_step_there():
    # Its job died outside a step: the row still says running, the page says dead.
    steps = [step("charge", start=0, end=5), step("provision", start=5, state="failed")]
    t = workflows.timeline(flow(updated=65), steps, "dead", now=at(10_000))
    assert not t.running and t.total == 65
    assert not t.spans[1].running and t.spans[1].length == 60


def test_odd_rows_never_break_the_scale():
    # A step stamped before its workflow, one after the end, a zero-length one, no steps.
    steps = [step("early", start=-30, end=0), step("blip", start=5, end=5)]
    t = workflows.timeline(flow(WorkflowState.DONE, updated=10), steps, "done", now=at(10))
    assert t.spans[0].offset == 0 and t.spans[0].length == 0
    blip = t.spans[1]
    assert blip.width == workflows.MIN_BAR_PERCENT and blip.left + blip.width <= 100
    empty = workflows.timeline(flow(WorkflowState.DONE), [], "done", now=at(10))
    assert empty.total == 0 and empty.spans == []
    instant = workflows.timeline(flow(WorkflowState.DONE), [step("a", end=0)], "done", now=at(0))
    assert instant.spans[0].left + instant.spans[0].width <= 100


@pytest.mark.django_db
def test_the_page_shows_the_timeline_escaped_with_durations(viewer_client):
    job = JobFactory(task_path="shop.onboard", state=JobState.READY)
    wf = Workflow.objects.create(
        pk=job.pk,
        task_path=job.task_path,
        job=job,
        state=WorkflowState.DONE,
        started_at=T0,
        updated_at=at(3800),
    )
    name = "<script>alert('x')</script>"
    WorkflowStep.objects.create(
        workflow=wf, name=name, kind="call", state="done", started_at=T0, finished_at=at(192)
    )
    WorkflowStep.objects.create(
        workflow=wf,
        name="grace",
        kind="sleep",
        state="done",
        started_at=at(192),
        finished_at=at(3800),
    )
    content = viewer_client.get(reverse("deadletters:workflow", args=[wf.pk])).content.decode()
    assert name not in content and "&lt;script&gt;" in content
    assert "Took <strong>1 h 3 min</strong>" in content
    assert "3 min 12 s in steps that work, 1 h in sleeps and waits" in content
    assert '<td class="num took">waited 1 h</td>' in content
    assert '<td class="num offset">+3 min 12 s</td>' in content
