"""Schedules."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema

from ... import redaction, selectors
from ..core import REFUSALS
from ..door import route
from .kit import router


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
