"""The queue databases: one per distinct `OPTIONS["DATABASE"]` of the TASKS backends that are
Redrive's (jobqueue.backend.DatabaseBackend), the default backend's first. The worker serves
one (`runworker --backend`), `/metrics` and `queuehealth` report each, and the console
(deadletters.databases) shows them together.

    TASKS = {
        "default": {"BACKEND": "jobqueue.backend.DatabaseBackend"},
        "reports": {"BACKEND": "jobqueue.backend.DatabaseBackend",
                    "OPTIONS": {"DATABASE": "reports_db"}},
    }

Read from settings on each call (cheap, and right under override_settings).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.utils.module_loading import import_string

DEFAULT_BACKEND = "default"
# A backend name an operator types or a URL carries: at most this long (TASKS aliases are short).
MAX_BACKEND_NAME = 100


@dataclass(frozen=True)
class QueueDatabase:
    """A queue database: the database of one or more of Redrive's TASKS backends (their
    `OPTIONS["DATABASE"]`), named after the first of them; its other backends' names find it
    too."""

    name: str  # the TASKS alias shown (a metric's `backend` label, queuehealth's --backend)
    database: str  # the DATABASES alias its jobs, dead letters and counters live in
    aliases: tuple[str, ...] = ()  # every TASKS alias on this database, `name` first

    @property
    def is_default(self) -> bool:
        return self == queue_databases()[0]


def _is_redrive(config) -> bool:
    from jobqueue.backend import DatabaseBackend

    try:
        backend = import_string(config.get("BACKEND", ""))
    except ImportError:
        return False  # `manage.py check` and django.tasks say what is wrong with it
    return isinstance(backend, type) and issubclass(backend, DatabaseBackend)


def queue_databases() -> list[QueueDatabase]:
    """Each queue database once, the default backend's first, then in TASKS order; without any
    Redrive backend, the default database alone, named "default". Read from settings on each
    call (cheap, and right under override_settings)."""
    tasks = getattr(settings, "TASKS", {}) or {}
    names = sorted(tasks, key=lambda name: name != DEFAULT_BACKEND)  # stable: TASKS order
    found: dict[str, list[str]] = {}
    for name in names:
        config = tasks[name] or {}
        if not _is_redrive(config):
            continue
        database = (config.get("OPTIONS") or {}).get("DATABASE", DEFAULT_DB_ALIAS)
        found.setdefault(database, []).append(name)
    if not found:
        return [QueueDatabase(DEFAULT_BACKEND, DEFAULT_DB_ALIAS, (DEFAULT_BACKEND,))]
    return [
        QueueDatabase(aliases[0], database, tuple(aliases)) for database, aliases in found.items()
    ]


def queue_database(name: str) -> QueueDatabase | None:
    """The queue database of the backend called `name` (any of its TASKS aliases), None for a
    name that is no Redrive backend."""
    if not isinstance(name, str) or not name or len(name) > MAX_BACKEND_NAME:
        return None
    return next((q for q in queue_databases() if name in q.aliases), None)
