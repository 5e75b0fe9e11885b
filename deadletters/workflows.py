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

from django import forms
from django.db.models import F, Q
from django.utils.http import urlencode

from jobqueue.models import (
    DeadLetter,
    Job,
    JobState,
    Workflow,
    WorkflowSignal,
    WorkflowState,
    WorkflowStep,
)

from . import conf, paging, redaction
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
        qs, WORKFLOWS, after=after, before=before, size=size or conf.get("PAGE_SIZE")
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

    @property
    def tone(self) -> str:
        return TONES.get(self.state, "")


def detail(pk: int) -> WorkflowDetail:
    """Raises Workflow.DoesNotExist."""
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
    return WorkflowDetail(
        workflow=workflow,
        state=shown_state(workflow.state, job.state if job else None),
        job=job,
        letter=letter,
        steps=views,
        more_steps=len(steps) > MAX_STEPS,
        signals=[
            SignalView(s, *_pretty(_redacted(s.name, s.payload))) for s in signals[:MAX_SIGNALS]
        ],
        more_signals=len(signals) > MAX_SIGNALS,
        at_step=at_step,
    )


def _step_view(step: WorkflowStep) -> StepView:
    errors = step.errors if isinstance(step.errors, list) else []
    errors = [e for e in errors if isinstance(e, dict)]
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
