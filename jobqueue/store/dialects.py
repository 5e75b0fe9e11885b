"""The SQL module of a connection's database: `postgresql` or `sqlite`, one named statement per
constant, the same function names in both."""

from importlib import import_module

from django.db import connections

# Loaded on first use: a process needs its own database's module only.
_MODULES = {"postgresql": "jobqueue.store.postgresql", "sqlite": "jobqueue.store.sqlite"}
_loaded: dict = {}


def of(using: str):
    vendor = connections[using].vendor
    module = _loaded.get(vendor)
    if module is None:
        if vendor not in _MODULES:
            raise NotImplementedError(f"jobqueue supports PostgreSQL and SQLite, not {vendor}")
        module = _loaded[vendor] = import_module(_MODULES[vendor])
    return module
