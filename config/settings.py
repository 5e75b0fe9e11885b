"""Settings read from the environment.

DATABASE_URL picks the database (PostgreSQL in production); without it a fresh checkout runs on an
SQLite file under var/ in WAL mode with IMMEDIATE transactions, so concurrent workers queue on the
write lock instead of failing with "database is locked" halfway through a transaction.
"""

import json
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("REDRIVE_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = os.environ.get("DEBUG", "0") == "1"
# Never a key from the repository (config/secret_key.py says why). With DEBUG off a missing key
# stays empty and every entry point refuses to start; with DEBUG on, a random key kept in var/.
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY and DEBUG:
    from config.secret_key import load_or_create

    SECRET_KEY = load_or_create(VAR_DIR / "secret_key")
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "axes",
    "config.apps.ProjectConfig",
    "jobqueue",
    "deadletters",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: it turns a locked-out login into its 429 response.
    "axes.middleware.AxesMiddleware",
]

# Every page, the console and the admin alike: scripts and styles only from our own static
# files; no inline script, no eval (htmx runs with allowEval off: templates/base.html).
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}

# Served over HTTPS (REDRIVE_HTTPS=1, the production setting the README documents): cookies only
# over TLS, plain HTTP redirected, HSTS. Behind a proxy that terminates TLS, REDRIVE_PROXY_SSL=1
# trusts its X-Forwarded-Proto (only safe when the proxy overwrites that header).
HTTPS = os.environ.get("REDRIVE_HTTPS", "0") == "1"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS and os.environ.get("REDRIVE_SSL_REDIRECT", "1") == "1"
SECURE_HSTS_SECONDS = int(os.environ.get("REDRIVE_HSTS_SECONDS", 31_536_000)) if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS and os.environ.get("REDRIVE_HSTS_SUBDOMAINS", "1") == "1"
SECURE_HSTS_PRELOAD = HTTPS and os.environ.get("REDRIVE_HSTS_PRELOAD", "1") == "1"
if os.environ.get("REDRIVE_PROXY_SSL", "0") == "1":
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = [
    origin.strip()
    for origin in os.environ.get("REDRIVE_CSRF_TRUSTED_ORIGINS", "").split(",")
    if origin.strip()
]
SESSION_COOKIE_HTTPONLY = True

# Failed logins (django-axes): 5 wrong passwords for one username from one address lock that
# pair out for 15 minutes, even with the right password; a success resets the count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("REDRIVE_LOGIN_FAILURE_LIMIT", 5))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("REDRIVE_LOGIN_LOCKOUT_MINUTES", 15)))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# What an attempt records, made storable first (config/attempts.py says why).
AXES_USERNAME_CALLABLE = "config.attempts.username"
AXES_HANDLER = "config.attempts.Handler"
# Behind N reverse proxies the client address is the Nth from the right of X-Forwarded-For.
if os.environ.get("REDRIVE_PROXY_COUNT"):
    AXES_IPWARE_PROXY_COUNT = int(os.environ["REDRIVE_PROXY_COUNT"])
    AXES_IPWARE_PROXY_ORDER = "right-most"
    AXES_IPWARE_META_PRECEDENCE_ORDER = ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR")

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "config.wsgi.application"

SQLITE_PATH = VAR_DIR / "redrive.sqlite3"
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{SQLITE_PATH}", conn_max_age=0, conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Worker subprocesses in the tests must see the test database, so it lives in a file.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
elif os.environ.get("REDRIVE_POOLER") == "transaction":
    # A transaction pooler cannot keep a server-side cursor (Django's .iterator()) across
    # statements.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "deadletters:health"  # signing in at the sign-in page: the brand's page
LOGOUT_URL = "logout"  # the console's "Log out" posts here (no setting: no button)
LOGOUT_REDIRECT_URL = "login"

TASKS = {
    "default": {
        "BACKEND": "jobqueue.backend.DatabaseBackend",
        "QUEUES": [],  # any queue name
        "OPTIONS": {},
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            # logging.Formatter's output, its timestamp rendered once per second: cheaper at
            # a line per job.
            "()": "jobqueue.logfmt.Formatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "jobqueue": {
            "handlers": ["console"],
            "level": os.environ.get("REDRIVE_LOG_LEVEL", "INFO"),
        },
        "django.tasks": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # Server errors (500s, with their tracebacks) to stderr: Django's default sends them
        # only to the console with DEBUG on, or by mail to ADMINS.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}


# Redrive's one settings dict (README, "Settings"). Here each key comes from an environment
# variable named REDRIVE_ and the key, so a deployment (or a test's worker processes) sets them
# without code; a library user writes the dict directly. A value that does not parse stops
# start-up with its name.
def _env(name, default, kind=str):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ImproperlyConfigured(
            f"environment variable {name}={raw!r} is not a valid {kind.__name__}"
        ) from None


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


_flag.__name__ = "flag (1/0, true/false, yes/no, on/off)"


def _env_list(name, default):
    return [item.strip() for item in _env(name, default).split(",") if item.strip()]


def _env_json(name):
    try:
        return json.loads(os.environ.get(name) or "{}")
    except ValueError as exc:
        raise ImproperlyConfigured(f"environment variable {name} is not JSON: {exc}") from None


REDRIVE = {
    # Retry and lease policy for jobs; each task may override max_attempts, timeout and backoff.
    "MAX_ATTEMPTS": _env("REDRIVE_MAX_ATTEMPTS", 5, int),
    "BACKOFF_BASE": _env("REDRIVE_BACKOFF_BASE", 1.0, float),
    "BACKOFF_CAP": _env("REDRIVE_BACKOFF_CAP", 3600.0, float),
    "LEASE_SECONDS": _env("REDRIVE_LEASE_SECONDS", 30.0, float),
    "POLL_INTERVAL": _env("REDRIVE_POLL_INTERVAL", 1.0, float),
    "LOCK_TIMEOUT": _env("REDRIVE_LOCK_TIMEOUT", 5.0, float),
    # Off behind a pooler in transaction mode that cannot keep prepared statements.
    "PREPARED_STATEMENTS": _env("REDRIVE_PREPARED_STATEMENTS", True, _flag),
    # PgBouncer in transaction pooling mode: "transaction"; the LISTEN then needs a direct DSN.
    "POOLER": _env("REDRIVE_POOLER", ""),
    "LISTEN_DSN": _env("REDRIVE_LISTEN_DSN", ""),
    # Health: seconds without a worker record refresh before the worker shows as lost.
    "WORKER_LOST_AFTER": _env("REDRIVE_WORKER_LOST_AFTER", 60.0, float),
    # /metrics accepts `Authorization: Bearer <token>` (or a staff login); empty: staff only.
    "METRICS_TOKEN": _env("REDRIVE_METRICS_TOKEN", ""),
    # The code version workers run: a worker that starts with a new one records a deploy
    # marker (set it in the deploy: the image tag, the commit); empty, workers record none.
    "VERSION": _env("REDRIVE_VERSION", ""),
    # Jobs per second per queue across every worker, as JSON: {"emails": 10}.
    "RATE_LIMITS": _env_json("REDRIVE_RATE_LIMITS"),
    # Transactional outbox: routes, destinations, subscribers, as JSON (jobqueue/outbox.py).
    "OUTBOX": _env_json("REDRIVE_OUTBOX"),
    # The console's replays.
    "REPLAY_BATCH_SIZE": _env("REDRIVE_REPLAY_BATCH_SIZE", 100, int),
    "MAX_REPLAYS": _env("REDRIVE_MAX_REPLAYS", 3, int),
    "REPLAY_RATE": _env("REDRIVE_REPLAY_RATE", 0.0, float),
    "REPLAY_QUEUE": _env("REDRIVE_REPLAY_QUEUE", "deadletters"),
    # Sources whose terminal failures the console shows: "jobqueue" (ours, outbox included) and
    # "django_q2" (the bridge), both by default so the demo shows the bridge
    # (REDRIVE_SOURCES=jobqueue turns it off).
    "SOURCES": _env_list("REDRIVE_SOURCES", "jobqueue,django_q2"),
    # The zone the console shows times in (IANA name).
    "TIME_ZONE": _env("REDRIVE_TIME_ZONE", "UTC"),
    # Effects outside the database: jobqueue.redis_once's Redis.
    "REDIS_URL": _env("REDRIVE_REDIS_URL", ""),
    # Brokers' dead-letter queues in the console (add "rabbitmq" / "sqs" to REDRIVE_SOURCES),
    # as JSON: {"url": "amqp://…", "queues": ["orders.dead"]} and {"queues": [url], …}.
    "RABBITMQ_DEAD_LETTERS": _env_json("REDRIVE_RABBITMQ_DEAD_LETTERS"),
    "SQS_DEAD_LETTERS": _env_json("REDRIVE_SQS_DEAD_LETTERS"),
    "SOURCES_SYNC_SECONDS": _env("REDRIVE_SOURCES_SYNC_SECONDS", 60.0, float),
    # Who runs the background chores: "leader" (one worker per database), "every_worker", "off".
    "CHORES": _env("REDRIVE_CHORES", "leader"),
    "PRUNE_SECONDS": _env("REDRIVE_PRUNE_SECONDS", 0.0, float),
}
# django-q2's app only while its bridge is a source: loading it imports its settings module,
# which imports croniter and prometheus_client when they are installed, a cost every worker and
# web process would otherwise pay at start-up for nothing.
if "django_q2" in REDRIVE["SOURCES"]:
    INSTALLED_APPS.insert(INSTALLED_APPS.index("axes"), "django_q")

# Payload keys whose values are masked: case-insensitive regular expressions searched in each
# key; a comma list replaces the default (deadletters/conf.py).
if os.environ.get("REDRIVE_REDACT_PATTERNS"):
    REDRIVE["REDACT_PATTERNS"] = _env_list("REDRIVE_REDACT_PATTERNS", "")

# django-q2 on the ORM broker (same database, so a replay's enqueue commits with its audit rows).
# A failed task is retried when its broker lock expires (`retry` seconds) until `max_attempts`;
# the bridge dead-letters it then. Timeout below retry, as django-q2 requires.
Q_CLUSTER = {
    "name": "redrive",
    "orm": "default",
    "workers": int(os.environ.get("REDRIVE_Q_WORKERS", 2)),
    "max_attempts": int(os.environ.get("REDRIVE_Q_MAX_ATTEMPTS", 3)),
    "retry": int(os.environ.get("REDRIVE_Q_RETRY", 60)),
    "timeout": int(os.environ.get("REDRIVE_Q_TIMEOUT", 30)),
    "poll": float(os.environ.get("REDRIVE_Q_POLL", 0.2)),
    "save_limit": int(os.environ.get("REDRIVE_Q_SAVE_LIMIT", 250)),
    "catch_up": False,
    "scheduler": False,
    "label": "django-q2",
}
