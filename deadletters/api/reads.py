"""Every read the console offers, as JSON: the same selectors, the same forms validating the same
parameters (a bad one is a 400 with the form's message, where a page would name and ignore it),
payloads masked as the pages mask them.

Lists page by keyset (deadletters.paging): each answer's `next` is the `after` of the page
that follows (null on the last one), `prev` the `before` of the one that leads to it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django import forms
from django.utils import timezone
from ninja import Router, Schema

from jobqueue.health import snapshot
from jobqueue.models import DeadLetter, Job, Workflow

from .. import databases, jobs, redaction, search, selectors, workflows
from ..dashboard import _snapshots
from ..forms import (
    AuditFilterForm,
    FilterForm,
    JobFilterForm,
    ListPageForm,
    RunPageForm,
    parse_id,
    refusal,
)
from ..models import ReplayRun
from ..views.base import filter_for
from .core import REFUSALS, Error, Refused
from .door import Door, route

router = Router(tags=["reads"])
WITH_404 = {**REFUSALS, 404: Error}


# --- the kit ------------------------------------------------------------------------------


def valid(form: forms.Form) -> forms.Form:
    """The form, valid, or a 400 with its messages."""
    if not form.is_valid():
        raise Refused(400, f"Invalid filter: {refusal(form)}")
    return form


class BackendForm(forms.Form):
    backend = forms.ChoiceField(required=False, choices=lambda: databases.choices())


def fields(form: type[forms.Form], *names: str) -> dict[str, forms.Field]:
    """The fields of `form` (those named; none named: all) a read takes as its parameters."""
    found = form.base_fields
    return {name: found[name] for name in names or found}


BY_BACKEND = Door(query=fields(BackendForm))


def backend_of(request) -> databases.QueueBackend:
    """The queue backend the `backend` parameter names (none: the default one), else 400."""
    form = valid(BackendForm(request.GET))
    return databases.named(form.cleaned_data.get("backend"))


def row_id(text: str, what: str) -> int:
    """A path's id, or the 404 a page gives for a URL that names no row."""
    try:
        return parse_id(text)
    except forms.ValidationError:
        raise Refused(404, f"No {what} {str(text)[:40]!r}: ids are whole numbers.") from None


def masked_json(text: str):
    """A page's pretty JSON back as a value: the API shows exactly what the page shows."""
    return json.loads(text)


class Page(Schema):
    next: str | None = None
    prev: str | None = None


# --- letters --------------------------------------------------------------------------------


class TypeOut(Schema):
    backend: str
    task_path: str
    source: str
    count: int
    oldest: datetime | None
    newest: datetime | None
    died_again: int
    top_errors: list[tuple[str, int]]
    hourly: list[int]


class TypesOut(Schema):
    types: list[TypeOut]


@route(
    router.get, "/letters/types", response={200: TypesOut, **REFUSALS}, summary="Letters by type"
)
def letter_types(request):
    """Pending dead letters per job type, every backend's, most first (the overview)."""
    found = []
    for backend in databases.backends():
        for s in selectors.overview(using=backend.database):
            found.append(
                {
                    "backend": backend.name,
                    "task_path": s.task_path,
                    "source": s.source,
                    "count": s.count,
                    "oldest": s.oldest,
                    "newest": s.newest,
                    "died_again": s.died_again,
                    "top_errors": s.top_errors,
                    "hourly": s.hourly,
                }
            )
    found.sort(key=lambda s: (-s["count"], s["task_path"]))
    return {"types": found}


class CauseOut(Schema):
    fingerprint: str
    error_class: str
    pending: int
    first_seen: datetime | None
    last_seen: datetime | None
    sample: str
    hourly: list[int]


class CausesOut(Schema):
    job_type: str
    causes: list[CauseOut]


@route(
    router.get,
    "/letters/causes",
    door=Door(query=fields(FilterForm, "job_type", "backend")),
    response={200: CausesOut, **REFUSALS},
    summary="Letters by cause",
)
def letter_causes(request):
    """One job type's pending dead letters grouped by cause (error fingerprint), most first."""
    form = valid(FilterForm(request.GET))
    job_type = form.cleaned_data.get("job_type")
    if not job_type:
        raise Refused(400, "Invalid filter: job_type: Name the job type whose causes to list.")
    backend = databases.named(form.cleaned_data.get("backend"))
    causes = selectors.causes(job_type, using=backend.database)
    return {
        "job_type": job_type,
        "causes": [
            {
                "fingerprint": c.fingerprint,
                "error_class": c.error_class,
                "pending": c.pending,
                "first_seen": c.first_seen,
                "last_seen": c.last_seen,
                "sample": c.sample,
                "hourly": c.hourly,
            }
            for c in causes
        ],
    }


class LetterRow(Schema):
    id: int
    source: str
    task_path: str
    queue: str
    state: str
    error_class: str
    last_error: str
    attempts: int
    replays: int
    dead_lettered_at: datetime


class LettersOut(Page):
    backend: str
    letters: list[LetterRow]


def _letter_row(letter: DeadLetter) -> dict:
    return {
        "id": letter.pk,
        "source": letter.source,
        "task_path": letter.task_path,
        "queue": letter.queue_name,
        "state": letter.state,
        "error_class": letter.error_class,
        "last_error": letter.last_error,
        "attempts": letter.attempts,
        "replays": letter.replays,
        "dead_lettered_at": letter.dead_lettered_at,
    }


@route(
    router.get,
    "/letters",
    door=Door(query=fields(ListPageForm)),
    response={200: LettersOut, **REFUSALS},
    summary="Letters (and search)",
)
def letter_list(request):
    """The dead letters the filters match, newest first (`order=oldest`: oldest first); `q`
    searches errors, and payload values for a user who may see them unmasked."""
    form = valid(ListPageForm(request.GET))
    f = filter_for(form, request.auth.user)
    found = selectors.page(
        f, after=form.cleaned_data.get("after"), before=form.cleaned_data.get("before")
    )
    return {
        "backend": databases.named(f.backend).name,
        "letters": [_letter_row(letter) for letter in found.rows],
        "next": found.next_cursor,
        "prev": found.prev_cursor,
    }


class HistoryOut(Schema):
    run: int
    action: str
    outcome: str
    skip_reason: str
    job_id: int | None
    at: datetime


class LetterOut(LetterRow):
    backend: str
    fingerprint: str
    payload: dict[str, Any]
    payload_summarised: bool
    errors: list[Any]
    original_job_id: int | None
    replay_job_ids: list[int]
    history: list[HistoryOut]
    discarded_at: datetime | None


@route(
    router.get,
    "/letters/{pk}",
    door=BY_BACKEND,
    response={200: LetterOut, **WITH_404},
    summary="A letter",
)
def letter_detail(request, pk: str):
    """One dead letter, its payload masked exactly as its page masks it."""
    backend = backend_of(request)
    pk = row_id(pk, "dead letter")
    try:
        d = selectors.detail(pk, redacted=True, using=backend.database)
    except DeadLetter.DoesNotExist:
        raise Refused(404, f"No dead letter #{pk} (in backend {backend.name}).") from None
    letter = d.letter
    return {
        **_letter_row(letter),
        "backend": backend.name,
        "fingerprint": letter.fingerprint or "",
        "payload": masked_json(d.payload_json),
        "payload_summarised": d.payload_summarised,
        "errors": letter.errors if isinstance(letter.errors, list) else [],
        "original_job_id": letter.original_job_id,
        "replay_job_ids": [job.pk for job in d.replay_jobs],
        "history": [
            {
                "run": item.run_id,
                "action": item.run.action,
                "outcome": item.outcome,
                "skip_reason": item.skip_reason,
                "job_id": item.job_id,
                "at": item.at,
            }
            for item in d.history
        ],
        "discarded_at": letter.discarded_at,
    }


# --- replay runs ----------------------------------------------------------------------------


class RunOut(Schema):
    id: int
    action: str
    state: str
    operator: str
    reason: str
    backend: str | None
    requested: int
    processed: int
    done: int
    skipped: int
    batches: int
    percent: int
    rate: float
    allow_poisoned: bool
    to_queue: str | None
    job_types: list[Any]
    filter: dict[str, Any]
    canary_size: int
    canary_state: str
    approved_by: str
    stopped_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    selection: int


def run_json(run: ReplayRun) -> dict:
    backend = databases.of_database(run.selection.database)
    return {
        "id": run.pk,
        "action": run.action,
        "state": run.state,
        "operator": run.operator_name,
        "reason": run.reason,
        "backend": backend.name if backend else None,
        "requested": run.requested,
        "processed": run.processed,
        "done": run.done,
        "skipped": run.skipped,
        "batches": run.batches,
        "percent": run.percent,
        "rate": run.rate,
        "allow_poisoned": run.allow_poisoned,
        # A replay's destination; None: each letter's own queue.
        "to_queue": run.to_queue or None,
        "job_types": run.job_types if isinstance(run.job_types, list) else [],
        "filter": run.filter if isinstance(run.filter, dict) else {},
        "canary_size": run.canary_size,
        "canary_state": run.canary_state,
        "approved_by": run.approved_by,
        "stopped_by": run.stopped_by,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "updated_at": run.updated_at,
        "selection": run.selection_id,
    }


class RunsOut(Schema):
    runs: list[RunOut]
    next: str | None


@route(
    router.get,
    "/runs",
    door=Door(query=fields(AuditFilterForm, "operator", "job_type", "since", "until", "before")),
    response={200: RunsOut, **REFUSALS},
    summary="Replay runs",
)
def run_list(request):
    """Replay and discard runs, newest first, by operator, job type and day (the Audit page's
    runs); `next` is the `before` of the older page."""
    form = valid(AuditFilterForm(request.GET))
    runs, next_before = selectors.audit_runs(
        form.to_filter(), before=form.cleaned_data.get("before")
    )
    runs = ReplayRun.objects.filter(pk__in=[r.pk for r in runs]).select_related("selection")
    return {
        "runs": [run_json(r) for r in sorted(runs, key=lambda r: -r.pk)],
        "next": next_before,
    }


def _run(pk: str) -> ReplayRun:
    pk = row_id(pk, "replay run")
    run = ReplayRun.objects.select_related("selection").filter(pk=pk).first()
    if run is None:
        raise Refused(404, f"No replay run #{pk}.")
    return run


@route(router.get, "/runs/{pk}", response={200: RunOut, **WITH_404}, summary="A replay run")
def run_detail(request, pk: str):
    return run_json(_run(pk))


class ItemOut(Schema):
    id: int
    dead_letter_id: int
    task_path: str
    outcome: str
    skip_reason: str
    job_id: int | None
    job_outcome: str | None
    external_id: str
    batch: int
    at: datetime


class ItemsOut(Schema):
    run: int
    items: list[ItemOut]
    next: str | None


@route(
    router.get,
    "/runs/{pk}/items",
    door=Door(query=fields(RunPageForm)),
    response={200: ItemsOut, **WITH_404},
    summary="A run's items",
)
def run_items(request, pk: str):
    """The run's ledger in order, a row per item it handled, with what became of its replay."""
    run = _run(pk)
    form = valid(RunPageForm(request.GET))
    items, next_after = selectors.run_items(
        run, after=form.cleaned_data["after"], through_batch=run.batches
    )
    return {
        "run": run.pk,
        "items": [
            {
                "id": item.pk,
                "dead_letter_id": item.dead_letter_id,
                "task_path": item.task_path,
                "outcome": item.outcome,
                "skip_reason": item.skip_reason,
                "job_id": item.job_id,
                "job_outcome": item.job_outcome,
                "external_id": item.external_id,
                "batch": item.batch,
                "at": item.at,
            }
            for item in items
        ],
        "next": next_after,
    }


# --- jobs -----------------------------------------------------------------------------------


class JobRow(Schema):
    id: int
    task_path: str
    queue: str
    state: str
    priority: int
    idempotency_key: str | None
    attempts: int
    max_attempts: int
    run_after: datetime | None
    enqueued_at: datetime | None
    last_attempted_at: datetime | None
    finished_at: datetime | None
    last_error: str
    letter_id: int | None


class JobsOut(Page):
    backend: str
    jobs: list[JobRow]
    search_left_out: int | None


def _job_row(job: Job, state: str, last_error: str, letter_id) -> dict:
    return {
        "id": job.pk,
        "task_path": job.task_path,
        "queue": job.queue_name,
        "state": state,
        "priority": job.priority,
        "idempotency_key": job.idempotency_key,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_after": job.run_after,
        "enqueued_at": job.enqueued_at,
        "last_attempted_at": job.last_attempted_at,
        "finished_at": job.finished_at,
        "last_error": last_error,
        "letter_id": letter_id,
    }


@route(
    router.get,
    "/jobs",
    door=Door(query=fields(BackendForm) | fields(JobFilterForm)),
    response={200: JobsOut, **REFUSALS},
    summary="Jobs",
)
def job_list(request):
    """Every job, not only dead ones, newest first, by state, task, queue, key and text."""
    backend = backend_of(request)
    form = valid(JobFilterForm(request.GET))
    f = filter_for(form, request.auth.user)
    try:
        found = jobs.page(
            f,
            after=form.cleaned_data.get("after"),
            before=form.cleaned_data.get("before"),
            using=backend.database,
        )
    except search.SearchTimedOut:
        raise Refused(
            400, "The search stopped at its time limit: narrow it by state, task or queue."
        ) from None
    return {
        "backend": backend.name,
        "jobs": [_job_row(r.job, r.state, r.last_error, r.letter_id) for r in found.rows],
        "next": found.next_cursor,
        "prev": found.prev_cursor,
        "search_left_out": found.search_left_out,
    }


class AttemptOut(Schema):
    number: Any
    worker: Any
    at: Any
    duration_ms: float | None
    error_class: Any
    message: Any
    traceback: Any


class ActionOut(Schema):
    id: int
    at: datetime
    actor: str
    channel: str
    action: str
    reason: str
    outcome: str


class JobOut(JobRow):
    backend: str
    payload: dict[str, Any]
    return_value: str | None
    attempts_made: list[AttemptOut]
    replayed_from: int | None
    replays: list[int]
    actions: list[ActionOut]


def _action(entry) -> dict:
    return {
        "id": entry.pk,
        "at": entry.at,
        "actor": entry.actor,
        "channel": entry.channel,
        "action": entry.action,
        "reason": entry.reason,
        "outcome": entry.outcome,
    }


@route(
    router.get, "/jobs/{pk}", door=BY_BACKEND, response={200: JobOut, **WITH_404}, summary="A job"
)
def job_detail(request, pk: str):
    """One job: its payload masked as its page masks it, attempts, letter, replays, actions."""
    backend = backend_of(request)
    pk = row_id(pk, "job")
    try:
        d = jobs.detail(pk, using=backend.database)
    except Job.DoesNotExist:
        raise Refused(404, f"No job #{pk} (in backend {backend.name}).") from None
    return {
        **_job_row(
            d.job, d.state, jobs._last_message(d.job.errors), d.letter.pk if d.letter else None
        ),
        "backend": backend.name,
        "payload": masked_json(d.payload_json),
        "return_value": d.return_json,
        "attempts_made": [vars(a) for a in d.attempts],
        "replayed_from": d.replayed_from.pk if d.replayed_from else None,
        "replays": [job.pk for job in d.replays],
        "actions": [_action(e) for e in d.actions],
    }


# --- queues, health -------------------------------------------------------------------------


class QueueRow(Schema):
    backend: str
    queue: str
    task: str
    ready: int
    scheduled: int
    running: int
    expired: int
    retrying: int
    dead_letters: int
    oldest_ready_age: float
    succeeded_5m: int
    failed_5m: int
    succeeded_60m: int
    failed_60m: int
    paused: bool
    rate_limit: float | None


class PauseOut(Schema):
    backend: str
    queue: str
    paused_by: str
    paused_at: datetime
    reason: str


class QueuesOut(Schema):
    queues: list[QueueRow]
    paused: list[PauseOut]


def _queue_rows(health, backend_name) -> list[dict]:
    fields = QueueRow.model_fields.keys() - {"backend"}
    return [
        {"backend": (getattr(r, "backend", None) and r.backend.name) or backend_name}
        | {name: getattr(r, name) for name in fields}
        for r in health.rows
    ]


@route(router.get, "/queues", response={200: QueuesOut, **REFUSALS}, summary="Queues")
def queue_list(request):
    """Each queue and task's figures (ready, scheduled, running, retrying, dead, the last
    minutes' outcomes), every backend's, and the paused queues."""
    now = timezone.now()
    rows, paused = [], []
    for backend in databases.backends():
        health = snapshot(now=now, using=backend.database)
        rows += _queue_rows(health, backend.name)
        paused += [
            {
                "backend": backend.name,
                "queue": queue,
                "paused_by": p.get("paused_by") or "",
                "paused_at": p["paused_at"],
                "reason": p.get("reason") or "",
            }
            for queue, p in health.paused.items()
        ]
    return {"queues": rows, "paused": paused}


class HealthOut(Schema):
    at: datetime
    totals: dict[str, float | int | None]
    last_success_at: datetime | None
    workers: list[dict[str, Any]]
    queues: list[QueueRow]


@route(router.get, "/health", response={200: HealthOut, **REFUSALS}, summary="Health")
def health(request):
    """The health page's figures: totals over every backend, the workers, each queue's row."""
    now = timezone.now()
    whole, _ = _snapshots(now)
    data = whole.as_json()
    totals = {
        k: (None if isinstance(v, float) and v == float("inf") else v)
        for k, v in data["totals"].items()
    }
    return {
        "at": whole.at,
        "totals": totals,
        "last_success_at": whole.last_success_at,
        "workers": data["workers"],
        "queues": _queue_rows(whole, databases.default().name),
    }


# --- schedules, workflows -------------------------------------------------------------------


class ScheduleOut(Schema):
    name: str
    task_path: str
    cron: str
    timezone: str
    args: Any
    kwargs: Any
    overlap: bool
    declared: bool
    next_run_at: datetime
    last_tick_at: datetime | None
    last_job_id: int | None
    last_state: str | None
    last_outcome: str | None
    last_note: str | None
    paused_at: datetime | None
    paused_by: str
    pause_reason: str


class SchedulesOut(Schema):
    schedules: list[ScheduleOut]


@route(router.get, "/schedules", response={200: SchedulesOut, **REFUSALS}, summary="Schedules")
def schedule_list(request):
    """The periodic jobs with their last tick's outcome; arguments masked as payloads are."""
    return {
        "schedules": [
            {
                "name": s.name,
                "task_path": s.task_path,
                "cron": s.cron,
                "timezone": s.timezone,
                "args": redaction.redact(s.args),
                "kwargs": redaction.redact(s.kwargs),
                "overlap": s.overlap,
                "declared": s.declared,
                "next_run_at": s.next_run_at,
                "last_tick_at": s.last_tick_at,
                "last_job_id": s.last_job_id,
                "last_state": s.last_state,
                "last_outcome": s.last_outcome,
                "last_note": s.last_note,
                "paused_at": s.paused_at,
                "paused_by": s.paused_by,
                "pause_reason": s.pause_reason,
            }
            for s in selectors.schedules()
        ]
    }


class WorkflowRow(Schema):
    id: int
    task_path: str
    state: str
    job_state: str | None
    step: str
    waiting_for: str
    wake_at: datetime | None
    started_at: datetime
    updated_at: datetime


class WorkflowsOut(Page):
    workflows: list[WorkflowRow]


def _workflow_row(w: Workflow, state: str, job_state) -> dict:
    return {
        "id": w.pk,
        "task_path": w.task_path,
        "state": state,
        "job_state": job_state,
        "step": w.step,
        "waiting_for": w.waiting_for,
        "wake_at": w.wake_at,
        "started_at": w.started_at,
        "updated_at": w.updated_at,
    }


@route(
    router.get,
    "/workflows",
    door=Door(query=fields(workflows.WorkflowFilterForm)),
    response={200: WorkflowsOut, **REFUSALS},
    summary="Workflows",
)
def workflow_list(request):
    """Recent workflows, most recently changed first, by state."""
    form = valid(workflows.WorkflowFilterForm(request.GET))
    found = workflows.page(
        form.cleaned_data.get("state") or "",
        after=form.cleaned_data.get("after"),
        before=form.cleaned_data.get("before"),
    )
    return {
        "workflows": [_workflow_row(r.workflow, r.state, r.job_state) for r in found.rows],
        "next": found.next_cursor,
        "prev": found.prev_cursor,
    }


class StepOut(Schema):
    id: int
    name: str
    kind: str
    state: str
    attempts: int
    result: Any
    result_cut: bool
    failures: int
    last_error: dict[str, Any] | None
    progress: dict[str, int] | None
    started_at: datetime
    finished_at: datetime | None


class SignalOut(Schema):
    name: str
    payload: Any
    sent_at: datetime


class WorkflowOut(WorkflowRow):
    job_id: int | None
    letter_id: int | None
    steps: list[StepOut]
    more_steps: bool
    signals: list[SignalOut]
    more_signals: bool


def _shown(text, cut):
    """A stored value as its page shows it: the masked value, or the page's cut text."""
    if text is None:
        return None
    return text if cut else json.loads(text)


@route(router.get, "/workflows/{pk}", response={200: WorkflowOut, **WITH_404}, summary="A workflow")
def workflow_detail(request, pk: str):
    """One workflow's timeline: its steps, what they stored (masked), failures, signals."""
    pk = row_id(pk, "workflow")
    try:
        d = workflows.detail(pk)
    except Workflow.DoesNotExist:
        raise Refused(404, f"No workflow #{pk}.") from None
    w = d.workflow
    return {
        **_workflow_row(w, d.state, d.job.state if d.job else None),
        "job_id": d.job.pk if d.job else None,
        "letter_id": d.letter[0] if d.letter else None,
        "steps": [
            {
                "id": v.step.pk,
                "name": v.step.name,
                "kind": v.step.kind,
                "state": v.step.state,
                "attempts": v.step.attempts,
                "result": _shown(v.result_json, v.result_cut),
                "result_cut": v.result_cut,
                "failures": v.failures,
                "last_error": vars(v.last_error) if v.last_error else None,
                "progress": vars(v.progress) if v.progress else None,
                "started_at": v.step.started_at,
                "finished_at": v.step.finished_at,
            }
            for v in d.steps
        ],
        "more_steps": d.more_steps,
        "signals": [
            {
                "name": s.signal.name,
                "payload": _shown(s.payload_json, s.payload_cut),
                "sent_at": s.signal.sent_at,
            }
            for s in d.signals
        ],
        "more_signals": d.more_signals,
    }


# --- the audit log --------------------------------------------------------------------------


class EntryOut(Schema):
    id: int
    seq: int
    at: datetime
    actor: str
    channel: str
    token: str
    action: str
    target_kind: str
    targets: list[str]
    reason: str
    params: dict[str, Any]
    outcome: str


class EntriesOut(Schema):
    backend: str
    entries: list[EntryOut]
    next: str | None


@route(
    router.get,
    "/audit",
    door=Door(
        query=fields(BackendForm)
        | fields(AuditFilterForm, *AuditFilterForm.FILTERS[:-1])
        # The Audit page's name for the entries' cursor.
        | {"after": AuditFilterForm.base_fields["entries_after"]}
    ),
    response={200: EntriesOut, **REFUSALS},
    summary="The audit log",
)
def audit(request):
    """The audit log of a backend's database, newest first, by who, action, target, channel
    and day (the Audit page's filters); `next` is the `after` of the older page."""
    backend = backend_of(request)
    data = request.GET.copy()
    if "after" in data:  # the Audit page's name for the entries' cursor
        data.setlist("entries_after", data.getlist("after"))
    form = valid(AuditFilterForm(data))
    found = selectors.audit_entries(
        form.to_filter(), after=form.cleaned_data.get("entries_after"), using=backend.database
    )
    return {
        "backend": backend.name,
        "entries": [
            {
                "id": e.pk,
                "seq": e.seq,
                "at": e.at,
                "actor": e.actor,
                "channel": e.channel,
                "token": e.token,
                "action": e.action,
                "target_kind": e.target_kind,
                "targets": [str(t) for t in e.targets],
                "reason": e.reason,
                "params": e.params if isinstance(e.params, dict) else {},
                "outcome": e.outcome,
            }
            for e in found.rows
        ],
        "next": found.next_cursor,
    }
