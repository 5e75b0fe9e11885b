"""The queue databases the console reads: one per distinct `OPTIONS["DATABASE"]` of the TASKS
backends that are Redrive's (jobqueue.backend.DatabaseBackend), the default backend's first.

Each is named after the first backend on it (its other backends' names find it too). The
console's own tables (selections, runs, ledger, audit, edits, reveals) stay on `default`; a
queue database holds jobs, dead letters and their trigger-kept counters (every database is
migrated with every app: there is no router).

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
# A backend name in a URL: at most this long (TASKS aliases are short identifiers).
MAX_NAME = 100


@dataclass(frozen=True)
class QueueBackend:
    name: str  # the TASKS alias shown and put in URLs
    database: str  # the DATABASES alias its jobs and dead letters live in
    aliases: tuple[str, ...] = ()  # every TASKS alias on this database, `name` first

    @property
    def is_default(self) -> bool:
        return self == backends()[0]


def _is_redrive(config) -> bool:
    from jobqueue.backend import DatabaseBackend

    try:
        backend = import_string(config.get("BACKEND", ""))
    except ImportError:
        return False  # `manage.py check` and django.tasks say what is wrong with it
    return isinstance(backend, type) and issubclass(backend, DatabaseBackend)


def backends() -> list[QueueBackend]:
    """The queue databases, each once, the default backend's first, then in TASKS order.
    Without any Redrive backend: the default database alone, named "default"."""
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
        return [QueueBackend(DEFAULT_BACKEND, DEFAULT_DB_ALIAS, (DEFAULT_BACKEND,))]
    return [
        QueueBackend(aliases[0], database, tuple(aliases)) for database, aliases in found.items()
    ]


def default() -> QueueBackend:
    return backends()[0]


def multiple() -> bool:
    """More than one queue database: the console shows which backend each figure is of."""
    return len(backends()) > 1


def named(name: str | None) -> QueueBackend | None:
    """The queue database of the backend called `name` (any of its TASKS aliases), the default
    one for an empty name, None for a name that is no Redrive backend."""
    if not name:
        return default()
    if not isinstance(name, str) or len(name) > MAX_NAME:
        return None
    return next((b for b in backends() if name in b.aliases), None)


def of_database(database: str) -> QueueBackend | None:
    """The backend whose database is `database` (a Selection records the database)."""
    return next((b for b in backends() if b.database == database), None)


def choices() -> list[tuple[str, str]]:
    """(name, label) of each queue database, for the list's Backend filter."""
    return [
        (b.name, b.name if len(b.aliases) == 1 else f"{b.name} ({', '.join(b.aliases[1:])})")
        for b in backends()
    ]


def query(backend: QueueBackend | None) -> str:
    """`?backend=NAME` for links to a letter of a backend other than the default one; "" for
    the default one, so single-backend URLs stay as they were."""
    if backend is None or backend == default():
        return ""
    from django.utils.http import urlencode

    return "?" + urlencode({"backend": backend.name})
