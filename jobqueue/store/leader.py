"""Leader leases: one holder per name and database at a time (jobqueue.chores elects the
process that runs the background duties with one).

A row per name (LeaderLease), not a PostgreSQL advisory lock: a session lock ends with its
session, and behind a transaction pooler (PgBouncer) no session is the process's own. The row
works the same on SQLite, on PostgreSQL and through a pooler: the holder renews it, and once
its `expires_at` passes, the first process to look takes it over. Times are the callers'
clocks, as jobs' leases are: hosts' clocks must agree to well within a lease.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connections

from jobqueue.models import LeaderLease

from .sql_common import LEADER_UPSERT


def acquire_or_renew(
    name: str, holder: str, *, now: datetime, lease: float, using: str = "default"
) -> bool:
    """Hold the lease `name` until now + `lease` seconds; True if `holder` holds it now (taken,
    or renewed), False while another holder's lease runs."""
    current = current_holder(name, now=now, using=using)
    if current is not None and current != holder:
        # A read first: the candidates that are not leading look often (so a dead leader is
        # replaced soon after its lease ends), and the upsert would lock the row each time.
        return False
    connection = connections[using]
    ts = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(
            LEADER_UPSERT,
            [name, holder, ts(now + timedelta(seconds=lease)), ts(now), ts(now)],
        )
        row = cursor.fetchone()
    return row is not None and row[0] == holder


def current_holder(name: str, *, now: datetime, using: str = "default") -> str | None:
    """Who holds the lease `name` at `now`; None when nobody does (never taken, released, or
    expired)."""
    return (
        LeaderLease.objects.using(using)
        .filter(name=name, expires_at__gt=now)
        .values_list("holder", flat=True)
        .first()
    )


def release(name: str, holder: str, *, using: str = "default") -> bool:
    """Give the lease up (a clean exit): the next process to look takes it at once, without
    waiting for it to expire. False if `holder` did not hold it."""
    return LeaderLease.objects.using(using).filter(name=name, holder=holder).delete()[0] > 0
