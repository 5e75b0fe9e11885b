"""Redrive's one settings namespace: `settings.REDRIVE`, a dict whose keys override defaults.

    REDRIVE = {
        "MAX_ATTEMPTS": 5,          # queue policy (this module)
        "LEASE_SECONDS": 30.0,
        "OUTBOX": {...},            # routes, destinations, subscribers (jobqueue/outbox.py)
        "METRICS_TOKEN": "…",       # bearer token of /metrics
        "REPLAY_BATCH_SIZE": 100,   # the console's keys (deadletters/conf.py)
        "SOURCES": ["jobqueue", "django_q2"],
    }

Each app declares its keys and defaults here (`declare`); `setting(name)` reads one, and
`setting(name, key)` one key of a settings dict (OUTBOX, a broker's dead-letter settings): the
one way any code reads a setting. A key no app declares, or a value of the wrong kind, fails
`manage.py check` (jobqueue/checks.py), which every worker and the web server run at start-up,
so a typo is never silently ignored.
"""

from django.conf import settings

NAME = "REDRIVE"

# The queue's own keys. A task may override MAX_ATTEMPTS, its timeout and the backoff.
DEFAULTS = {
    "MAX_ATTEMPTS": 5,
    "BACKOFF_BASE": 1.0,  # seconds; the first retry waits 0.5-1 x this
    "BACKOFF_CAP": 3600.0,
    "LEASE_SECONDS": 30.0,
    "POLL_INTERVAL": 1.0,
    "MAX_PAYLOAD_BYTES": 1_000_000,
    # PostgreSQL: how long a worker's claim waits on a lock before giving up and retrying.
    "LOCK_TIMEOUT": 5.0,
    # PostgreSQL: run the queue's hot statements (claim, acknowledge, heartbeat, a single
    # enqueue) as prepared statements. Off for a pooler in transaction mode that cannot keep
    # them (PgBouncer before 1.21, or without max_prepared_statements).
    "PREPARED_STATEMENTS": True,
    # PostgreSQL behind a connection pooler: "transaction" (PgBouncer's transaction pooling, or
    # statement pooling) means no session state at all: no prepared statements, no session
    # settings (set lock_timeout on the role instead), and LISTEN only through LISTEN_DSN.
    "POOLER": "",
    # A direct connection string (libpq key=value or postgres:// URL) for the wake-up LISTEN,
    # which needs a session; "" uses the database's own connection, except behind a
    # transaction pooler, where workers and the relay then poll (POLL_INTERVAL).
    "LISTEN_DSN": "",
    # Health: a worker whose record is not refreshed for this long shows as lost; `prune`
    # removes records of workers lost for longer than its --workers-lost-for.
    "WORKER_LOST_AFTER": 60.0,
    # /metrics accepts `Authorization: Bearer <token>`; empty: staff logins only.
    "METRICS_TOKEN": "",
    # Periodic jobs (jobqueue/schedules.py): under catch_up="none" a tick found more than this
    # many seconds late is missed, not run.
    "SCHEDULE_GRACE": 60.0,
    # Jobs per second per queue, shared by every worker on every host: {"emails": 10}.
    "RATE_LIMITS": {},
    # The transactional outbox (jobqueue/outbox.py documents the shape; OUTBOX_DEFAULTS below).
    "OUTBOX": {},
    # Brokers' dead-letter queues mirrored into the console (jobqueue/store/sources/): RabbitMQ
    # {"url": "amqp://…", "queues": [...]} and SQS {"queues": [urls], "endpoint_url": …,
    # "region_name": …}; a source syncs once its "queues" are set (REDRIVE["SOURCES"] names
    # it too, for the console's filter and the checks).
    "RABBITMQ_DEAD_LETTERS": {},
    "SQS_DEAD_LETTERS": {},
    # Seconds between syncs of the configured broker sources by the chores' leader (0: only
    # `manage.py deadletters sync`).
    "SOURCES_SYNC_SECONDS": 60.0,
    # Who runs the background chores (jobqueue/chores.py: the expired-lease sweep, schedule
    # ticks, broker mirrors, pruning): "leader", one worker per queue database, elected by a
    # lease row; "every_worker", each of them, unelected; "off", no worker (`manage.py
    # runchores` then does, elected the same way).
    "CHORES": "leader",
    # Seconds between the chores' prunes (what `manage.py prune` deletes, at its default
    # retentions); 0: only `manage.py prune`.
    "PRUNE_SECONDS": 0.0,
    # jobqueue.redis_once (jobqueue/redis_claims.py): the Redis its claims live in, e.g.
    # "redis://127.0.0.1:6379/0" (needs redrive[redis]); "" means not configured.
    "REDIS_URL": "",
    # Seconds a redis_once claim outlives a holder that died mid-work; keep it above the time
    # the work takes, or a second caller may run it while the first still does.
    "REDIS_CLAIM_SECONDS": 300.0,
    # Seconds a finished redis_once key is kept: repeats within it skip the work.
    "REDIS_DONE_SECONDS": 86400.0,
    # The code version a worker runs (jobqueue.store.deploys.code_version): a worker that starts
    # with a version other than the newest deploy marker's records a marker; "": none.
    "VERSION": "",
}

# REDRIVE["OUTBOX"]'s keys (jobqueue/outbox.py) with their defaults.
OUTBOX_DEFAULTS = {
    "ROUTES": {},
    "DESTINATIONS": {},
    "SUBSCRIBERS": {},
    "BATCH_SIZE": 200,
    "LEASE_SECONDS": 30.0,
    "POLL_INTERVAL": 1.0,
    "RETENTION_DAYS": 7,
    "RELAY_IN_WORKER": False,
}
# The outbox's retry policy: REDRIVE's own keys unless REDRIVE["OUTBOX"] overrides them.
OUTBOX_INHERITS = ("MAX_ATTEMPTS", "BACKOFF_BASE", "BACKOFF_CAP")

# Every declared key with its default and the app that declared it (for the checks' messages).
_declared: dict[str, tuple[object, str]] = {}


def declare(app: str, defaults: dict) -> None:
    """Make `defaults` known keys of REDRIVE (the console declares its own at import)."""
    for key, value in defaults.items():
        _declared[key] = (value, app)


declare("jobqueue", DEFAULTS)


def configured() -> dict:
    value = getattr(settings, NAME, None)
    return value if isinstance(value, dict) else {}


def setting(name: str, key: str | None = None):
    """REDRIVE[name], or its declared default.

    With `key`, one key of the settings dict REDRIVE[name]: its value if set; else its default
    (OUTBOX_DEFAULTS; the outbox's retry policy falls back to REDRIVE's own keys); else None
    (a broker's dead-letter settings, whose source supplies its own defaults). A value that is
    not a dict reads as empty: check_settings names it."""
    values = configured()
    value = values[name] if name in values else _declared[name][0]
    if key is None:
        return value
    if isinstance(value, dict) and key in value:
        return value[key]
    if name == "OUTBOX":
        return setting(key) if key in OUTBOX_INHERITS else OUTBOX_DEFAULTS[key]
    return None


def declared() -> dict[str, tuple[object, str]]:
    return dict(_declared)


def nested() -> dict[str, dict[str, object]]:
    """REDRIVE's keys whose value is a dict of fixed keys of its own, each with its default:
    checked as REDRIVE's own keys are (an unknown key, a value of the wrong kind). Dicts keyed
    by names of the user's (RATE_LIMITS' queues, LISTEN_DSN's aliases, PAYLOAD_VALIDATORS'
    tasks, OUTBOX's routes and destinations) and the brokers' dead-letter settings (their
    sources know their keys) have checks of their own."""
    return {"OUTBOX": {**OUTBOX_DEFAULTS, **{key: DEFAULTS[key] for key in OUTBOX_INHERITS}}}
