"""System checks (`manage.py check`) for a project that installs the queue.

Each finding names what to change; ids are `redrive.E0xx` (the queue will not work) and
`redrive.W0xx` (it works, but not as a user expects). The console's checks live beside the
console (deadletters/checks.py), since this app never imports it.
"""

from __future__ import annotations

import importlib.util
from importlib import import_module

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import connections
from django.utils.module_loading import import_string

# Every Redrive check carries this tag: the long-running commands run only these at start-up
# (the project's URL, admin and template checks cost a worker's start and concern the web).
TAG = "redrive"

BACKEND_PATH = "jobqueue.backend.DatabaseBackend"

SQLITE_OPTIONS_HINT = (
    'DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30, '
    '"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}'
)

# Optional parts: (what uses it, the module it needs, the extra that installs it).
OPTIONAL = {
    "postgres": ("psycopg", "redrive[postgres]"),
    "rabbitmq": ("pika", "redrive[rabbitmq]"),
    "metrics": ("prometheus_client", "redrive[metrics]"),
    "redis": ("redis", "redrive[redis]"),
}


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def missing_extra(part: str, what: str) -> str | None:
    """A message naming the extra to install when `part`'s package is absent, else None."""
    module, extra = OPTIONAL[part]
    if installed(module):
        return None
    return f"{what} needs the {module!r} package, which is not installed: pip install '{extra}'"


def _our_backends() -> list[str]:
    from jobqueue.backend import DatabaseBackend

    ours = []
    for alias, config in getattr(settings, "TASKS", {}).items():
        try:
            backend = import_string(config.get("BACKEND", ""))
        except ImportError:
            continue  # Django's own check reports a backend that cannot be imported
        if isinstance(backend, type) and issubclass(backend, DatabaseBackend):
            ours.append(alias)
    return ours


@checks.register(checks.Tags.compatibility, TAG)
def check_tasks_backend(app_configs=None, **kwargs):
    if _our_backends():
        return []
    return [
        checks.Error(
            "No TASKS backend is Redrive's, so @task functions never reach the job table and "
            "runworker has nothing to run.",
            hint=f'TASKS = {{"default": {{"BACKEND": "{BACKEND_PATH}"}}}}',
            id="redrive.E001",
        )
    ]


@checks.register(checks.Tags.compatibility, TAG)
def check_backend_databases(app_configs=None, **kwargs):
    """A Redrive backend's OPTIONS["DATABASE"] must be one of DATABASES: otherwise its enqueue,
    its worker and the console's page of its letters fail only when first used."""
    found = []
    for alias in _our_backends():
        options = settings.TASKS[alias].get("OPTIONS") or {}
        database = options.get("DATABASE", "default")
        if not isinstance(database, str) or database not in settings.DATABASES:
            found.append(
                checks.Error(
                    f"TASKS[{alias!r}] keeps its jobs in database {database!r}, which is not in "
                    "DATABASES.",
                    hint=f"Add {database!r} to DATABASES (and migrate it: manage.py migrate "
                    f"--database {database}), or name one of {sorted(settings.DATABASES)}.",
                    id="redrive.E030",
                )
            )
    return found


@checks.register(checks.Tags.compatibility, TAG)
def check_sqlite_locking(app_configs=None, databases=None, **kwargs):
    return sqlite_findings({alias: connections.settings[alias] for alias in connections})


def sqlite_findings(databases: dict) -> list[checks.CheckMessage]:
    """SQLite without IMMEDIATE transactions fails concurrent writers with "database is locked"
    halfway through a transaction; without WAL a reader blocks the worker's claims."""
    found = []
    for alias, config in databases.items():
        if config.get("ENGINE") != "django.db.backends.sqlite3":
            continue
        options = config.get("OPTIONS") or {}
        init = str(options.get("init_command", "")).replace(" ", "").lower()
        if options.get("transaction_mode") != "IMMEDIATE" or "journal_mode=wal" not in init:
            found.append(
                checks.Warning(
                    f"SQLite database {alias!r} runs without IMMEDIATE transactions and WAL: "
                    "workers and the console will fail with 'database is locked'.",
                    hint=SQLITE_OPTIONS_HINT.replace('"default"', f'"{alias}"'),
                    id="redrive.W001",
                )
            )
    return found


@checks.register(checks.Tags.compatibility, TAG)
def check_optional_packages(app_configs=None, **kwargs):
    """An optional part that is configured but whose extra is not installed."""
    from jobqueue.conf import setting

    outbox = setting("OUTBOX")
    routes = outbox.get("ROUTES", {}) if isinstance(outbox, dict) else {}
    wanted = [
        ("postgres", f"PostgreSQL database {alias!r}")
        for alias in connections
        if connections.settings[alias].get("ENGINE") == "django.db.backends.postgresql"
    ]
    if any(str(spec).startswith("rabbitmq:") for spec in routes.values()):
        wanted.append(("rabbitmq", "An outbox route to RabbitMQ"))
    return [
        checks.Error(message, id="redrive.E002")
        for part, what in wanted
        if (message := missing_extra(part, what))
    ]


@checks.register(checks.Tags.urls)
def check_metrics_package(app_configs=None, **kwargs):
    """The /metrics view routed without prometheus_client. A URL check (the web process's):
    finding the route builds the URLconf, which a worker's start has no use for."""
    message = _metrics_routed() and missing_extra("metrics", "The /metrics view")
    return [checks.Error(message, id="redrive.E002")] if message else []


def _metrics_routed() -> bool:
    from django.urls import get_resolver

    # By module name: importing the view would import prometheus_client, which may be absent.
    try:
        return any(
            getattr(view, "__module__", None) == "jobqueue.metrics"
            for view in get_resolver().reverse_dict
        )
    except Exception:  # noqa: BLE001 - a broken urlconf is reported by Django's own checks
        return False


@checks.register(checks.Tags.security, TAG, deploy=True)
def check_metrics_token(app_configs=None, **kwargs):
    from jobqueue.conf import setting

    if settings.DEBUG or not _metrics_routed() or setting("METRICS_TOKEN"):
        return []
    return [
        checks.Warning(
            "/metrics has no bearer token, so only a logged-in staff session can read it and "
            "Prometheus cannot scrape it.",
            hint="Set a long random token and give it to Prometheus as its bearer token.",
            id="redrive.W003",
        )
    ]


def _declared_tasks():
    """Tasks of our backend defined in the installed apps' `tasks` modules."""
    from jobqueue.backend import Task

    ours = set(_our_backends())
    for app_config in apps.get_app_configs():
        name = f"{app_config.name}.tasks"
        try:
            if importlib.util.find_spec(name) is None:
                continue
            module = import_module(name)
        except Exception:  # noqa: BLE001 - a broken tasks module is reported by its own import
            continue
        for value in vars(module).values():
            if isinstance(value, Task) and value.backend in ours:
                yield value


@checks.register(checks.Tags.compatibility, TAG)
def check_task_timeouts(app_configs=None, **kwargs):
    """A handler that outlives its lease is reclaimed and run twice at once by another worker;
    the worker renews leases, but a timeout at or above the lease means the task is allowed to
    run longer than a worker that stops renewing (a paused process) can hold it."""
    from jobqueue.conf import policy

    return timeout_findings(_declared_tasks(), float(policy("LEASE_SECONDS")))


def timeout_findings(tasks, lease: float) -> list[checks.CheckMessage]:
    found = []
    for task in tasks:
        if task.timeout is not None and task.timeout >= lease:
            found.append(
                checks.Warning(
                    f"Task {task.module_path} has timeout={task.timeout:g}s, not below the "
                    f"lease of {lease:g}s.",
                    hint="Give the task a timeout below the lease, or raise the lease "
                    "(REDRIVE['LEASE_SECONDS']).",
                    obj=task.module_path,
                    id="redrive.W002",
                )
            )
    return found


# Settings of earlier versions, now keys of REDRIVE: ignored, so say where they went.
LEGACY_SETTINGS = {
    "JOBQUEUE": "its keys (MAX_ATTEMPTS, LEASE_SECONDS, ...) directly in REDRIVE",
    "OUTBOX": 'REDRIVE["OUTBOX"]',
    "REDRIVE_METRICS_TOKEN": 'REDRIVE["METRICS_TOKEN"]',
    "DEADLETTERS_SOURCES": 'REDRIVE["SOURCES"]',
    "DEADLETTERS_QUEUE": 'REDRIVE["REPLAY_QUEUE"]',
}
LEGACY_PREFIX = "DEADLETTERS_"


def _kind(value) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a dict"
    return type(value).__name__


# Settings that take more than one kind of value, each judged by a check of its own:
# LISTEN_DSN (a string, or a dict per database alias) by check_pooler.
SEVERAL_KINDS = frozenset({"LISTEN_DSN"})


@checks.register(checks.Tags.compatibility, TAG)
def check_settings(app_configs=None, **kwargs):
    """REDRIVE holds only keys some app declared, each of the kind of its default; settings
    of earlier versions are named with where they moved."""
    import difflib

    from jobqueue import conf

    found = []
    raw = getattr(settings, conf.NAME, {})
    if not isinstance(raw, dict):
        return [
            checks.Error(
                f"settings.{conf.NAME} must be a dict, not {type(raw).__name__}.",
                id="redrive.E007",
            )
        ]
    declared = conf.declared()
    for key, value in raw.items():
        if key not in declared:
            close = difflib.get_close_matches(str(key), declared, n=1)
            found.append(
                checks.Error(
                    f"REDRIVE[{key!r}] is not a Redrive setting.",
                    hint=f"Did you mean {close[0]!r}?" if close else "README lists the keys.",
                    id="redrive.E008",
                )
            )
            continue
        default, _app = declared[key]
        # A default of None (off) takes a value of any kind: its app checks it; so do the keys
        # that take more than one kind, each checked by a check of its own.
        if key in SEVERAL_KINDS:
            continue
        if default is not None and _kind(value) != _kind(default):
            found.append(
                checks.Error(
                    f"REDRIVE[{key!r}] must be {_kind(default)}, not {value!r}.",
                    hint=f"The default is {default!r}.",
                    id="redrive.E009",
                )
            )
    for name in dir(settings):
        if name in conf.top_level():
            continue
        moved = LEGACY_SETTINGS.get(name) or (
            f'REDRIVE["{name.removeprefix(LEGACY_PREFIX)}"]'
            if name.startswith(LEGACY_PREFIX)
            else None
        )
        if moved:
            found.append(
                checks.Warning(
                    f"settings.{name} is no longer read.",
                    hint=f"Move it to {moved}.",
                    id="redrive.W004",
                )
            )
    return found


@checks.register(TAG)
def check_rate_limits(app_configs=None, **kwargs):
    """REDRIVE["RATE_LIMITS"]: a queue name to a positive, finite number of jobs per second."""
    import math

    from jobqueue.conf import setting

    limits = setting("RATE_LIMITS")
    if not isinstance(limits, dict):
        return []  # check_settings names the wrong kind
    return [
        checks.Error(
            f"REDRIVE['RATE_LIMITS'][{queue!r}] must be a positive number of jobs per second, "
            f"not {rate!r}.",
            hint='For example {"emails": 10} or {"stripe": 0.5}.',
            id="redrive.E014",
        )
        for queue, rate in limits.items()
        if not isinstance(queue, str)
        or not queue
        or isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not (rate > 0 and math.isfinite(rate))
    ]


@checks.register(TAG)
def check_pooler(app_configs=None, **kwargs):
    """REDRIVE["POOLER"]: "" (direct connections) or "transaction"; LISTEN_DSN: text."""
    from jobqueue.conf import setting

    found = []
    if setting("POOLER") not in ("", "transaction"):
        found.append(
            checks.Error(
                f"REDRIVE['POOLER'] must be '' or 'transaction', not {setting('POOLER')!r}.",
                hint="'transaction' for PgBouncer in transaction (or statement) pooling mode.",
                id="redrive.E026",
            )
        )
    dsn = setting("LISTEN_DSN")
    per_database = isinstance(dsn, dict)
    if not (isinstance(dsn, str) or per_database) or (
        per_database
        and not all(
            isinstance(alias, str) and alias in settings.DATABASES and isinstance(value, str)
            for alias, value in dsn.items()
        )
    ):
        found.append(
            checks.Error(
                "REDRIVE['LISTEN_DSN'] must be a connection string, or a dict of one per "
                "database alias of DATABASES.",
                hint="For example 'host=db.internal port=5432 dbname=app user=redrive', or "
                "{'default': '…dbname=app…', 'queues_b': '…dbname=queues_b…'}.",
                id="redrive.E027",
            )
        )
    elif dsn and not per_database:
        from jobqueue.databases import queue_databases

        if len(queue_databases()) > 1:
            found.append(
                checks.Warning(
                    "REDRIVE['LISTEN_DSN'] is one connection string, but the queues are on "
                    "several databases: every worker would LISTEN on that one database, and "
                    "those of the others would not be woken (they poll).",
                    hint="Give a dict, a direct connection string per database alias.",
                    id="redrive.W005",
                )
            )
    return found


@checks.register(checks.Tags.compatibility, TAG)
def check_redis_package(app_configs=None, **kwargs):
    """REDRIVE["REDIS_URL"] set (jobqueue.redis_once) without redis-py installed: every claim
    would fail with ImproperlyConfigured at run time, so say it at start-up."""
    from jobqueue.conf import setting

    module, extra = OPTIONAL["redis"]
    if not setting("REDIS_URL") or installed(module):
        return []
    return [
        checks.Error(
            f"REDRIVE['REDIS_URL'] is set, but jobqueue.redis_once needs the {module!r} package, "
            "which is not installed.",
            hint=f"pip install '{extra}', or remove REDRIVE['REDIS_URL'].",
            id="redrive.E028",
        )
    ]
