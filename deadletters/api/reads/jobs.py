"""Jobs: listed, one with its attempts and the actions taken on it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema

from jobqueue.models import Job

from ... import jobs, search
from ...forms import (
    JobFilterForm,
)
from ...views.base import filter_for
from ..core import REFUSALS, Refused
from ..door import Door, route
from .kit import (
    BY_BACKEND,
    WITH_404,
    BackendForm,
    Page,
    backend_of,
    fields,
    masked_json,
    router,
    row_id,
    valid,
)


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
