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

from jobqueue.databases import MAX_BACKEND_NAME as MAX_NAME
from jobqueue.databases import QueueDatabase as QueueBackend
from jobqueue.databases import queue_database
from jobqueue.databases import queue_databases as backends

__all__ = ["MAX_NAME", "QueueBackend", "backends", "choices", "default", "multiple", "named"]


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
    return queue_database(name)


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
