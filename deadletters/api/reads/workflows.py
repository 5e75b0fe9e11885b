"""Workflows: listed, one with its steps and signals."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ninja import Schema

from jobqueue.models import Workflow

from ... import workflows
from ..core import REFUSALS, Refused
from ..door import Door, route
from .kit import WITH_404, Page, fields, router, row_id, valid


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
