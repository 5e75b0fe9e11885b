"""Dead letters: by type, by cause, listed, one with its history."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema

from jobqueue.models import DeadLetter

from ... import databases, selectors, summaries
from ...forms import (
    FilterForm,
    ListPageForm,
)
from ...views.base import filter_for
from ..core import REFUSALS, Refused
from ..door import Door, route
from .kit import BY_BACKEND, WITH_404, Page, backend_of, fields, masked_json, router, row_id, valid


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
        for s in summaries.by_type(using=backend.database):
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
    causes = summaries.causes(job_type, using=backend.database)
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
