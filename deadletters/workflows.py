"""The console's reads of workflows (jobqueue.workflows): recent workflows by state, newest
first, keyset-paged on (updated_at, id); one workflow's timeline: its steps in order, what each
stored (redacted as payloads are), its failures, its batches' progress and dead letters, the
signals sent to it; and the one-query links from a job's and a letter's pages.

The state shown is the workflow row's, except that a workflow whose job is dead is dead: the
row can say running when its job died outside a step (its body raised, its result was not
JSON), and the job's dead letter is then what an operator acts on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django import forms
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import urlencode

from jobqueue.conf import setting
from jobqueue.models import (
    DeadLetter,
    Job,
    JobState,
    Workflow,
    WorkflowSignal,
    WorkflowState,
    WorkflowStep,
)

from . import paging, redaction
from .forms import CursorField
from .paging import Keyset

STATES = dict(WorkflowState.choices)
# A page shows at most this many of a workflow's steps and signals (in order), and of a batch's
# dead letters; each stored result is cut at MAX_RESULT_CHARS of its pretty JSON.
MAX_STEPS = 500
MAX_SIGNALS = 100
MAX_LETTERS = 50
MAX_RESULT_CHARS = 20_000

# The console's colours (console.css) for each state.
TONES = {
    WorkflowState.RUNNING: "job-running",
    WorkflowState.SLEEPING: "job-ready",
    WorkflowState.WAITING: "job-ready",
    WorkflowState.DONE: "job-done",
    WorkflowState.DEAD: "job-dead",
    WorkflowStep.State.PENDING: "job-running",
    WorkflowStep.State.FAILED: "run-paused",
}


def shown_state(state: str, job_state: str | None) -> str:
    """What the console calls a workflow's state: dead when its job is."""
    return WorkflowState.DEAD if job_state == JobState.DEAD else state


def state_q(state: str) -> Q:
    """The workflows whose shown state is `state` (every one for "")."""
    job_dead = Q(job__state=JobState.DEAD)
    if state == WorkflowState.DEAD:
        return Q(state=WorkflowState.DEAD) | job_dead
    if state:
        return Q(state=state) & ~job_dead
    return Q()


# --- list ---------------------------------------------------------------------------------


# Workflows page most recently changed first (jobqueue_workflow_upd_idx).
WORKFLOWS = Keyset("updated_at")


class WorkflowFilterForm(forms.Form):
    """The list's state filter and keyset cursors; an invalid field is ignored and named."""

    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *STATES.items()])
    after = CursorField(required=False, max_length=60, keyset=WORKFLOWS)
    before = CursorField(required=False, max_length=60, keyset=WORKFLOWS)

    def applied_state(self) -> str:
        self.is_valid()
        return self.cleaned_data.get("state") or ""

    def query(self) -> str:
        state = self.applied_state()
        return urlencode({"state": state}) if state else ""


@dataclass
class Row:
    workflow: Workflow
    state: str
    job_state: str | None

    @property
    def tone(self) -> str:
        return TONES.get(self.state, "")


def page(state: str = "", *, after: str | None = None, before: str | None = None, size=None):
    """Recent workflows, most recently changed first. A workflow that changes while one pages
    moves to the top: it may be seen twice or not at all."""
    qs = Workflow.objects.filter(state_q(state)).annotate(job_state=F("job__state"))
    found = paging.page(
        qs, WORKFLOWS, after=after, before=before, size=size or setting("PAGE_SIZE")
    )
    found.rows = [Row(w, shown_state(w.state, w.job_state), w.job_state) for w in found.rows]
    return found


# --- one workflow -------------------------------------------------------------------------


@dataclass
class Failure:
    error_class: str
    message: str
    traceback: str
    at: str | None
    attempt: int | None


@dataclass
class Progress:
    total: int
    next: int
    done: int
    failed: int


@dataclass
class StepView:
    step: WorkflowStep
    result_json: str | None  # redacted; None for a batch (its progress is shown) or no result
    result_cut: bool = False
    last_error: Failure | None = None
    failures: int = 0  # failed attempts the row keeps
    progress: Progress | None = None
    letters: list[tuple[int, str | None]] = field(default_factory=list)  # (id, state or None)
    more_letters: int = 0

    @property
    def tone(self) -> str:
        return TONES.get(self.step.state, "job-done")


@dataclass
class SignalView:
    signal: WorkflowSignal
    payload_json: str  # redacted
    payload_cut: bool = False


@dataclass
class WorkflowDetail:
    workflow: Workflow
    state: str
    job: Job | None  # the job carrying it now (None once pruned)
    letter: tuple[int, str] | None  # its own dead letter: (id, state)
    steps: list[StepView]
    more_steps: bool
    signals: list[SignalView]
    more_signals: bool
    at_step: int | None = None  # the row id of the step it is at, for the link
    timeline: Timeline | None = None

    @property
    def tone(self) -> str:
        return TONES.get(self.state, "")


def detail(pk: int, *, now: datetime | None = None) -> WorkflowDetail:
    """Raises Workflow.DoesNotExist. `now`: the clock a running workflow's times count to."""
    workflow = Workflow.objects.select_related("job").get(pk=pk)
    job = workflow.job
    steps = list(workflow.steps.order_by("started_at", "id")[: MAX_STEPS + 1])
    signals = list(workflow.signals.order_by("sent_at", "id")[: MAX_SIGNALS + 1])
    letter = (
        DeadLetter.objects.filter(original_job_id=workflow.pk)
        .order_by("id")
        .values_list("pk", "state")
        .first()
    )
    views = [_step_view(step) for step in steps[:MAX_STEPS]]
    _letter_states(views)
    at_step = next((v.step.pk for v in views if v.step.name == workflow.step), None)
    state = shown_state(workflow.state, job.state if job else None)
    return WorkflowDetail(
        workflow=workflow,
        state=state,
        job=job,
        letter=letter,
        steps=views,
        more_steps=len(steps) > MAX_STEPS,
        signals=[
            SignalView(s, *_pretty(_redacted(s.name, s.payload))) for s in signals[:MAX_SIGNALS]
        ],
        more_signals=len(signals) > MAX_SIGNALS,
        at_step=at_step,
        timeline=timeline(workflow, [v.step for v in views], state, now=now or timezone.now()),
    )


def _errors(step: WorkflowStep) -> list[dict]:
    """The failed attempts the row keeps (each a dict; anything else stored is skipped)."""
    errors = step.errors if isinstance(step.errors, list) else []
    return [e for e in errors if isinstance(e, dict)]


def _step_view(step: WorkflowStep) -> StepView:
    errors = _errors(step)
    view = StepView(step, None, failures=len(errors))
    if errors:
        last = errors[-1]
        attempt = last.get("attempt")
        view.last_error = Failure(
            error_class=str(last.get("exception_class_path", "")),
            message=str(last.get("message", "")),
            traceback=str(last.get("traceback", "")),
            at=last.get("at") if isinstance(last.get("at"), str) else None,
            attempt=attempt if isinstance(attempt, int) else None,
        )
    if step.kind == WorkflowStep.Kind.BATCH and isinstance(step.result, dict):
        result = step.result
        view.progress = Progress(
            *(_count(result.get(name)) for name in ("total", "next", "done", "failed"))
        )
        ids = result.get("dead_letters")
        ids = [i for i in ids if _count(i) > 0] if isinstance(ids, list) else []
        view.letters = [(i, None) for i in ids[:MAX_LETTERS]]
        view.more_letters = max(view.progress.failed, len(ids)) - len(view.letters)
    elif step.result is not None:
        view.result_json, view.result_cut = _pretty(_redacted(step.name, step.result))
    return view


def _letter_states(views: list[StepView]) -> None:
    """One read for the listed letters of every batch: their state, or None once pruned."""
    ids = {pk for v in views for pk, _ in v.letters}
    if not ids:
        return
    states = dict(DeadLetter.objects.filter(pk__in=ids).values_list("pk", "state"))
    for v in views:
        v.letters = [(pk, states.get(pk)) for pk, _ in v.letters]


def _redacted(name: str, value):
    """`value` masked as a payload is; its name (the step's, the signal's) counts as its key,
    so a step named like a secret ("fetch_token") shows nothing of what it returned."""
    return redaction.REDACTED if redaction.is_sensitive(name) else redaction.redact(value)


def _pretty(value) -> tuple[str, bool]:
    return redaction.preview(value, MAX_RESULT_CHARS)


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


# --- its timeline -------------------------------------------------------------------------

# Kinds whose time is spent waiting (for a clock, for a signal), not working.
WAITS = (WorkflowStep.Kind.SLEEP, WorkflowStep.Kind.WAIT)
# A step shorter than this share of the whole still gets a bar one can see.
MIN_BAR_PERCENT = 0.5


@dataclass
class Span:
    """One step on its workflow's timeline: when it started (seconds from the workflow's
    start), how long it took or has taken so far, where its bar goes (percent of the whole)."""

    step: WorkflowStep
    offset: float
    length: float
    running: bool  # not finished, and the workflow goes on: `length` counts to now
    wait: bool  # a sleep or a wait for a signal: time waited, not worked
    left: float
    width: float
    failed: int = 0  # failed attempts the row keeps
    failures: list[float] = field(default_factory=list)  # where each is on the bar (percent)


@dataclass
class Timeline:
    spans: list[Span]
    total: float  # seconds from its start to its end, or to now while it goes on
    running: bool
    worked: float  # seconds inside steps that work (calls, batches)
    waited: float  # seconds inside sleeps and waits


def timeline(
    workflow: Workflow, steps: list[WorkflowStep], state: str, *, now: datetime
) -> Timeline:
    """Each step's start, length and failed attempts, from the step rows alone (no query).

    A workflow that goes on counts to `now`; one that is done or dead ends at its last change
    (or its last step's end, if later), and a step it died in, or left unfinished, ends there.
    """
    start = workflow.started_at
    running = state in (WorkflowState.RUNNING, WorkflowState.SLEEPING, WorkflowState.WAITING)
    end = now if running else workflow.updated_at
    end = max([end, *(s.finished_at for s in steps if s.finished_at)])
    total = max((end - start).total_seconds(), 0.0)
    scale = 100 / total if total > 0 else 0.0

    def at(instant: datetime) -> float:
        return min(max((instant - start).total_seconds(), 0.0), total)

    spans = []
    for step in steps:
        offset = at(step.started_at)
        length = max(at(step.finished_at or end) - offset, 0.0)
        left = min(offset * scale, 100 - MIN_BAR_PERCENT)
        spans.append(
            Span(
                step=step,
                offset=offset,
                length=length,
                running=step.finished_at is None and running,
                wait=step.kind in WAITS,
                left=round(left, 2),
                width=round(min(max(length * scale, MIN_BAR_PERCENT), 100 - left), 2),
                failed=len(_errors(step)),
                failures=[round(at(t) * scale, 2) for t in _failure_times(step)],
            )
        )
    return Timeline(
        spans=spans,
        total=total,
        running=running,
        worked=sum(s.length for s in spans if not s.wait),
        waited=sum(s.length for s in spans if s.wait),
    )


def _failure_times(step: WorkflowStep) -> list[datetime]:
    """When each failed attempt the row keeps failed (an entry without a readable time is
    left off the bar; it still counts in the attempts)."""
    found = []
    for entry in _errors(step):
        text = entry.get("at")
        try:
            instant = parse_datetime(text) if isinstance(text, str) else None
        except ValueError:
            instant = None
        if instant is not None:
            found.append(instant if instant.tzinfo else instant.replace(tzinfo=UTC))
    return found


# --- links from other pages ---------------------------------------------------------------


def for_job(job: Job) -> int | None:
    """The workflow a job carries or carried: the one it began, or the one it carries now
    (a replay of the workflow's dead letter). One indexed read."""
    return (
        Workflow.objects.filter(Q(pk=job.pk) | Q(job_id=job.pk))
        .values_list("pk", flat=True)
        .first()
    )


def for_letter(letter: DeadLetter) -> int | None:
    """The workflow a dead letter's job carried (it died at a step, or outside one)."""
    if not letter.original_job_id:
        return None
    return Workflow.objects.filter(pk=letter.original_job_id).values_list("pk", flat=True).first()
