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
from django.tasks import checks as task_checks
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


def _test_backends() -> list[str]:
    """TASKS entries of jobqueue.testing's backends (Django's, with Redrive's task class): test
    settings that run tasks without the queue, on purpose."""
    from jobqueue.testing import RedriveTestBackend

    found = []
    for alias, config in getattr(settings, "TASKS", {}).items():
        try:
            backend = import_string(config.get("BACKEND", ""))
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, RedriveTestBackend):
            found.append(alias)
    return found


@checks.register(checks.Tags.compatibility, TAG)
def check_tasks_backend(app_configs=None, **kwargs):
    if _our_backends() or _test_backends():
        return []
    return [
        checks.Error(
            "No TASKS backend is Redrive's, so @task functions never reach the job table and "
            "runworker has nothing to run.",
            hint=f'TASKS = {{"default": {{"BACKEND": "{BACKEND_PATH}"}}}} (in test settings, '
            "jobqueue.testing.ImmediateBackend or DummyBackend)",
            id="redrive.E001",
        )
    ]


# Each TASKS entry's own configuration is checked by its backend (DatabaseBackend.check), which
# Django's task framework runs for every alias in an untagged check; tagged ours too, so a
# worker's start (requires_system_checks = [TAG]) runs it as `manage.py check` does.
checks.register(task_checks.check_tasks, *task_checks.check_tasks.tags, TAG)


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
    from jobqueue.conf import setting

    return timeout_findings(_declared_tasks(), float(setting("LEASE_SECONDS")))


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
    """REDRIVE holds only keys some app declared, each of the kind of its default, and so do
    its nested settings dicts (conf.nested()); settings of earlier versions are named with
    where they moved."""
    from jobqueue import conf

    raw = getattr(settings, conf.NAME, {})
    if not isinstance(raw, dict):
        return [
            checks.Error(
                f"settings.{conf.NAME} must be a dict, not {type(raw).__name__}.",
                id="redrive.E007",
            )
        ]
    declared = {key: default for key, (default, _app) in conf.declared().items()}
    found = key_findings("REDRIVE", raw, declared)
    for key, keys in conf.nested().items():
        if isinstance(raw.get(key), dict):  # else the wrong kind, reported above
            found += key_findings(f"REDRIVE[{key!r}]", raw[key], keys)
    for name in dir(settings):
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


def key_findings(where: str, values: dict, defaults: dict) -> list[checks.CheckMessage]:
    """`values` (a settings dict) holds only keys of `defaults`, each of its default's kind. A
    default of None (off) takes a value of any kind, its app checks it; so do the keys that
    take more than one kind (SEVERAL_KINDS), each checked by a check of its own."""
    found = unknown_keys(where, values, defaults)
    for key, value in values.items():
        if key not in defaults or key in SEVERAL_KINDS:
            continue
        default = defaults[key]
        if default is not None and _kind(value) != _kind(default):
            found.append(
                checks.Error(
                    f"{where}[{key!r}] must be {_kind(default)}, not {value!r}.",
                    hint=f"The default is {default!r}.",
                    id="redrive.E009",
                )
            )
    return found


def unknown_keys(where: str, values: dict, known) -> list[checks.CheckMessage]:
    """An error per key of `values` not among `known`, naming the closest known one."""
    found = []
    for key in values:
        if key in known:
            continue
        close = closest(str(key), known)
        found.append(
            checks.Error(
                f"{where}[{key!r}] is not a Redrive setting.",
                hint=f"Did you mean {close!r}?"
                if close
                else f"Known: {', '.join(map(repr, known)) or 'none'} (README, 'Settings').",
                id="redrive.E008",
            )
        )
    return found


@checks.register(checks.Tags.compatibility, TAG)
def check_outbox(app_configs=None, **kwargs):
    """REDRIVE["OUTBOX"]: each route names a kind of destination and, for a webhook or RabbitMQ,
    a destination that is configured; each destination has what its kind needs and only its
    keys; each subscriber is a task that imports. At run time each of these dead-letters every
    message it touches."""
    from jobqueue import publishers
    from jobqueue.backend import load_task
    from jobqueue.conf import setting

    outbox = setting("OUTBOX")
    if not isinstance(outbox, dict):
        return []  # check_settings names the wrong kind
    where = "REDRIVE['OUTBOX']"
    routes, destinations, subscribers = (
        value if isinstance(value := outbox.get(key, {}), dict) else {}
        for key in ("ROUTES", "DESTINATIONS", "SUBSCRIBERS")
    )
    found = []
    kinds: dict[str, set[str]] = {}  # destination → the kinds of route sending to it
    for pattern, spec in routes.items():
        kind, _, name = spec.partition(":") if isinstance(spec, str) else ("", "", "")
        meant = None  # the spec the route most likely means
        if not isinstance(pattern, str) or not isinstance(spec, str):
            problem = "a route maps a topic pattern to a destination, both text"
        elif kind not in publishers.OPTIONS:
            problem = f"{kind!r} is not a kind of destination"
            meant = (close := closest(kind, publishers.OPTIONS)) and f"{close}:{name}".rstrip(":")
        elif name and name not in destinations:
            problem = f"no destination {name!r} in {where}['DESTINATIONS']"
            meant = (close := closest(name, destinations)) and f"{kind}:{close}"
        elif not name and kind != "jobs":
            problem = f"a {kind} route names its destination: '{kind}:<name>'"
        else:
            if name:
                kinds.setdefault(name, set()).add(kind)
            continue
        found.append(
            checks.Error(
                f"{where}['ROUTES'][{pattern!r}] = {spec!r}: {problem}.",
                hint=f"Did you mean {meant!r}?"
                if meant
                else "Routes are 'jobs', 'webhook:<destination>' or 'rabbitmq:<destination>'.",
                id="redrive.E031",
            )
        )
    for name, config in destinations.items():
        for kind in sorted(kinds.get(name, ())):
            label = f"{where}['DESTINATIONS'][{name!r}]"
            if isinstance(config, dict):
                found += unknown_keys(label, config, publishers.OPTIONS[kind])
            for problem in publishers.destination_problems(kind, name, config):
                found.append(
                    checks.Error(
                        f"{label} ({kind}): {problem}.",
                        hint="jobqueue/outbox.py documents each kind's keys.",
                        id="redrive.E032",
                    )
                )
    for pattern, paths in subscribers.items():
        for path in paths if isinstance(paths, list | tuple) else [paths]:
            try:
                load_task(path)
            except (ImportError, AttributeError, TypeError, ValueError) as exc:
                found.append(
                    checks.Error(
                        f"{where}['SUBSCRIBERS'][{pattern!r}]: {path!r} is not a task that "
                        f"imports: {exc}"[:500],
                        hint="A subscriber is the dotted path of a @task function.",
                        id="redrive.E033",
                    )
                )
    return found


def closest(word: str, choices) -> str | None:
    """The choice `word` is most likely a misspelling of, if any is close."""
    import difflib

    close = difflib.get_close_matches(word, [c for c in choices if isinstance(c, str)], n=1)
    return close[0] if close else None


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


@checks.register(TAG)
def check_chores(app_configs=None, **kwargs):
    """REDRIVE["CHORES"]: who runs the background chores (jobqueue.chores); PRUNE_SECONDS: not
    negative."""
    import math

    from jobqueue.chores import MODES
    from jobqueue.conf import setting

    found = []
    if setting("CHORES") not in MODES:
        found.append(
            checks.Error(
                f"REDRIVE['CHORES'] must be one of {', '.join(map(repr, MODES))}, "
                f"not {setting('CHORES')!r}.",
                hint="'leader' (the default): one worker per queue database runs them.",
                id="redrive.E036",
            )
        )
    prune = setting("PRUNE_SECONDS")
    if isinstance(prune, int | float) and not (prune >= 0 and math.isfinite(prune)):
        found.append(
            checks.Error(
                f"REDRIVE['PRUNE_SECONDS'] must be 0 (off) or a number of seconds, not {prune!r}.",
                id="redrive.E036",
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
