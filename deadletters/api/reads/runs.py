"""Replay runs: listed, one, its items."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema

from ... import databases, selectors
from ...forms import (
    AuditFilterForm,
    RunPageForm,
)
from ...models import ReplayRun
from ..core import REFUSALS, Refused
from ..door import Door, route
from .kit import WITH_404, fields, router, row_id, valid


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
