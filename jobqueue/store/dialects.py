"""The SQL module of a connection's database: `postgresql` or `sqlite`, one named statement per
constant, the same function names in both."""

from importlib import import_module

from django.db import connections

# Imported on first use (then from sys.modules): a process needs its own database's only.
_MODULES = {"postgresql": "jobqueue.store.postgresql", "sqlite": "jobqueue.store.sqlite"}


def of(using: str):
    vendor = connections[using].vendor
    if vendor not in _MODULES:
        raise NotImplementedError(f"jobqueue supports PostgreSQL and SQLite, not {vendor}")
    return import_module(_MODULES[vendor])
