"""The SQL module of a connection's database: `postgresql` or `sqlite`, one named statement per
constant, the same function names in both."""

from django.db import connections

from . import postgresql, sqlite


def of(using: str):
    vendor = connections[using].vendor
    if vendor == "postgresql":
        return postgresql
    if vendor == "sqlite":
        return sqlite
    raise NotImplementedError(f"jobqueue supports PostgreSQL and SQLite, not {vendor}")
