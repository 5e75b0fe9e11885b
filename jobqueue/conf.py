"""The queue's policy settings: settings.JOBQUEUE overrides these defaults key by key."""

from django.conf import settings

DEFAULTS = {
    "MAX_ATTEMPTS": 5,
    "BACKOFF_BASE": 1.0,  # seconds; the first retry waits 0.5-1 x this
    "BACKOFF_CAP": 3600.0,
    "LEASE_SECONDS": 30.0,
    "POLL_INTERVAL": 1.0,
    "MAX_PAYLOAD_BYTES": 1_000_000,
    # PostgreSQL: how long a worker's claim waits on a lock before giving up and retrying.
    "LOCK_TIMEOUT": 5.0,
    # Health: a worker whose record is not refreshed for this long shows as lost; `prune`
    # removes records of workers lost for longer than its --workers-lost-for.
    "WORKER_LOST_AFTER": 60.0,
}


def policy(name: str):
    return getattr(settings, "JOBQUEUE", {}).get(name, DEFAULTS[name])
