"""System checks of the console's settings: `manage.py` commands (runserver, runworker,
migrate, check) refuse to start on a value the replay runner could not work with."""

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core import checks

from jobqueue.conf import setting

from . import conf

# Each setting with its validator and check id (the validators hold the ranges).
REPLAY_SETTINGS = (
    ("REPLAY_RATE", conf.validate_replay_rate, "redrive.E011"),
    ("REPLAY_BATCH_SIZE", conf.validate_replay_batch_size, "redrive.E012"),
    ("CANARY_SIZE", conf.validate_canary_size, "redrive.E016"),
    ("CANARY_MAX_DEAD_SHARE", conf.validate_canary_share, "redrive.E017"),
    ("CANARY_TIMEOUT", conf.validate_canary_timeout, "redrive.E018"),
)


def replay_settings(app_configs=None, **kwargs):
    errors = []
    for name, validate, check_id in REPLAY_SETTINGS:
        try:
            validate(setting(name))
        except ValueError as exc:
            errors.append(
                checks.Error(
                    f'REDRIVE["{name}"]: {exc}.',
                    hint=f'Set REDRIVE["{name}"] within that range.',
                    id=check_id,
                )
            )
    return errors


HTMX_MIDDLEWARE = "django_htmx.middleware.HtmxMiddleware"


def console_setup(app_configs=None, **kwargs):
    """The console's pages tell full loads from htmx swaps by request.htmx, which only
    django-htmx's middleware sets; a source named in settings must be installed."""
    return [*_htmx_problems(), *_source_problems(), *_time_zone_problems()]


def _htmx_problems() -> list:
    from django.apps import apps
    from django.conf import settings

    found = []
    if HTMX_MIDDLEWARE not in settings.MIDDLEWARE:
        found.append(
            checks.Error(
                "The dead-letter console needs django-htmx's middleware.",
                hint=f'MIDDLEWARE += ["{HTMX_MIDDLEWARE}"]',
                id="redrive.E003",
            )
        )
    if not apps.is_installed("django_htmx"):
        found.append(
            checks.Error(
                "The dead-letter console needs django-htmx installed as an app.",
                hint='INSTALLED_APPS += ["django_htmx"]',
                id="redrive.E004",
            )
        )
    elif not _has_htmx_script():
        found.append(
            checks.Error(
                "The dead-letter console's pages load htmx with django-htmx's {% htmx_script %}, "
                "which this django-htmx is too old to have: every page would be a server error.",
                hint="pip install 'django-htmx>=1.25'",
                id="redrive.E034",
            )
        )
    return found


def _source_problems() -> list:
    """Each dead-letter source named in settings (or configured as a broker) exists, and what
    it needs is installed and configured."""
    from django.apps import apps

    from jobqueue.checks import closest, installed
    from jobqueue.store import sources

    found = []
    named = setting("SOURCES")
    named = list(named) if isinstance(named, list | tuple) else []  # else E009
    for source in [*named, *_configured_brokers(set(named))]:
        try:
            found_source = sources.register(source) if "." in source else sources.get(source)
            needs = found_source.requires
        except Exception as exc:  # noqa: BLE001 - a host's source may fail in any way
            close = closest(str(source), sources.names())
            found.append(
                checks.Error(
                    f"Unknown dead-letter source {source!r}: {exc!r}"[:500],
                    hint=(f"Did you mean {close!r}? " if close else "")
                    + f"Sources are {', '.join(sorted(sources.names()))}, or the dotted path "
                    "of a jobqueue.store.sources.Source.",
                    id="redrive.E005",
                )
            )
            continue
        if needs and not installed(needs[0]):
            found.append(
                checks.Error(
                    f"Dead-letter source {source!r} is configured but {needs[0]!r} is not "
                    f"installed: pip install '{needs[1]}'",
                    id="redrive.E002",
                )
            )
        elif (
            needs
            and getattr(found_source, "requires_app", True)
            and not apps.is_installed(needs[0])
        ):
            found.append(
                checks.Error(
                    f"Dead-letter source {source!r} is configured but {needs[0]!r} is not in "
                    "INSTALLED_APPS, so its failures never reach the console.",
                    hint=f'INSTALLED_APPS += ["{needs[0]}"]',
                    id="redrive.E006",
                )
            )
        for problem in getattr(found_source, "problems", lambda: [])():
            found.append(
                checks.Error(
                    f"Dead-letter source {source!r}: {problem}",
                    hint=f"See REDRIVE[{found_source.settings_key!r}] in the README's "
                    "'Brokers' dead letters'.",
                    id="redrive.E029",
                )
            )
    return found


def _time_zone_problems() -> list:
    found = []
    zone = setting("TIME_ZONE")
    try:
        ZoneInfo(zone)
    except (ValueError, TypeError, ZoneInfoNotFoundError):
        found.append(
            checks.Error(
                f'REDRIVE["TIME_ZONE"] {zone!r} is not a time zone this machine knows.',
                hint='An IANA name such as "UTC" or "Europe/Paris".',
                id="redrive.E021",
            )
        )
    return found


def _has_htmx_script() -> bool:
    from django_htmx.templatetags import django_htmx

    return callable(getattr(django_htmx, "htmx_script", None))


def _configured_brokers(named: set[str]) -> list[str]:
    """The brokers' sources that SOURCES does not name but whose settings are set: a worker
    syncs their queues all the same, so they are checked all the same, and so is a dict that
    says anything but "queues" (a misspelt "queues" would otherwise turn the source off
    unseen). An explicit empty "queues" is off."""
    from jobqueue.store import sources

    found = []
    for name in sources.BUILTIN:
        try:
            source = sources.get(name)
        except Exception:  # noqa: BLE001 - a source that will not load is E005's, if named
            continue
        key = getattr(source, "settings_key", "")
        value = setting(key) if key else None
        if name in named or not isinstance(value, dict) or not value:  # a wrong kind: E009
            continue
        if source.configured() or "queues" not in value:
            found.append(name)
    return found


def triage_settings(app_configs=None, **kwargs):
    """The two-person rule's threshold (a whole number of items, or None) and the payload
    validators of edit-before-replay (a job type's path to an importable callable)."""
    from django.utils.module_loading import import_string

    found = []
    try:
        conf.validate_approval_threshold(setting("APPROVAL_THRESHOLD"))
    except ValueError as exc:
        found.append(
            checks.Error(
                f'REDRIVE["APPROVAL_THRESHOLD"]: {exc}.',
                hint="Runs of more items than this wait for a second user's approval; "
                "None turns the rule off.",
                id="redrive.E024",
            )
        )
    validators = setting("PAYLOAD_VALIDATORS")
    if not isinstance(validators, dict):
        return found  # jobqueue's check_settings names the wrong kind
    for task_path, path in validators.items():
        problem = None
        if not isinstance(task_path, str) or not task_path:
            problem = "the key must be a task's dotted path"
        elif not isinstance(path, str) or not path:
            problem = "the value must be the dotted path of a callable(args, kwargs)"
        else:
            try:
                if not callable(import_string(path)):
                    problem = f"{path} is not callable"
            except ImportError as exc:
                problem = f"{path} does not import: {exc}"
        if problem:
            found.append(
                checks.Error(
                    f'REDRIVE["PAYLOAD_VALIDATORS"][{task_path!r}]: {problem}.',
                    hint='For example {"shop.tasks.send_receipt": "shop.checks.receipt_payload"}.',
                    id="redrive.E025",
                )
            )
    return found + masking_settings()


def masking_settings() -> list:
    """REDRIVE["REDACT_PATTERNS"]: a list of regular expressions that compile. A pattern that
    does not would make every page that masks a payload a server error."""
    import re

    patterns = setting("REDACT_PATTERNS")
    problem = None
    if isinstance(patterns, str) or not isinstance(patterns, list | tuple):
        problem = "must be a list of regular expressions"
    else:
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern:
                problem = f"{pattern!r} is not a regular expression's text"
                break
            try:
                re.compile(pattern, re.IGNORECASE)
            except re.error as exc:
                problem = f"{pattern!r} does not compile: {exc}"
                break
    if problem is None:
        return []
    return [
        checks.Error(
            f'REDRIVE["REDACT_PATTERNS"]: {problem}.',
            hint="Each is searched, case-insensitively, in a payload's keys; a key it finds "
            "has its value masked.",
            id="redrive.E035",
        )
    ]


def api_extra(app_configs=None, **kwargs):
    """The JSON API mounted (`include("deadletters.api.urls")`) without its extra: the URLconf
    then holds deadletters.api_missing in its place (deadletters.apps), found here by walking
    the project's URL resolvers."""
    from jobqueue.checks import installed

    from . import api_missing

    if installed("ninja") or not _mounted(api_missing):
        return []
    return [
        checks.Error(
            "The JSON API is mounted (include('deadletters.api.urls')), but django-ninja, its "
            "extra, is not installed: every request to it answers 503.",
            hint=f"pip install '{api_missing.EXTRA}', or remove the API's path() from your "
            "urls.py.",
            id="redrive.E037",
        )
    ]


def _mounted(module) -> bool:
    from django.urls import URLResolver, get_resolver

    def walk(patterns) -> bool:
        for pattern in patterns:
            if isinstance(pattern, URLResolver) and (
                pattern.urlconf_module is module or walk(pattern.url_patterns)
            ):
                return True
        return False

    try:
        return walk(get_resolver().url_patterns)
    except Exception:  # noqa: BLE001 - a broken urlconf is reported by Django's own checks
        return False
