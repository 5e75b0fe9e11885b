"""Queues and health."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from ninja import Schema

from jobqueue.health import snapshot

from ... import databases
from ...dashboard import _snapshots
from ..core import REFUSALS
from ..door import route
from .kit import router


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
