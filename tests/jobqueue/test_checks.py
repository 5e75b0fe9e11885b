"""Each system check fires on the configuration it is about, and the example project is clean."""

import pytest
from django.core.management import call_command
from django.tasks import task

from jobqueue import checks

pytestmark = pytest.mark.django_db(databases=[])


def ids(messages):
    return [message.id for message in messages]


@pytest.mark.django_db
def test_the_example_project_passes_every_check():
    call_command("check", fail_level="WARNING")


def test_a_tasks_setting_without_our_backend_is_an_error(settings):
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    found = checks.check_tasks_backend()
    assert ids(found) == ["redrive.E001"]
    assert "jobqueue.backend.DatabaseBackend" in found[0].hint


def test_our_backend_under_another_alias_is_enough(settings):
    settings.TASKS = {
        "default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
        "jobs": {"BACKEND": "jobqueue.backend.DatabaseBackend"},
    }
    assert checks.check_tasks_backend() == []


def test_each_backend_checks_that_its_database_is_in_databases(settings):
    """Django's task framework runs each TASKS entry's own check(), in `manage.py check` and,
    tagged Redrive's, at a worker's start: once each, naming the entry."""
    from django.core.checks import run_checks
    from django.tasks import task_backends

    def backends(database):
        return {
            "default": {"BACKEND": "jobqueue.backend.DatabaseBackend"},
            "reports": {
                "BACKEND": "jobqueue.backend.DatabaseBackend",
                "OPTIONS": {"DATABASE": database},
            },
        }

    settings.TASKS = backends("reportz")
    [found] = task_backends["reports"].check()
    assert found.id == "redrive.E030"
    assert "'reportz'" in found.msg and "TASKS['reports']" in found.msg
    assert task_backends["default"].check() == []
    for tags in (None, [checks.TAG]):
        assert [m for m in run_checks(tags=tags) if m.id == "redrive.E030"] == [found]
    settings.TASKS = backends("default")
    assert not [m for m in run_checks(tags=[checks.TAG]) if m.id == "redrive.E030"]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"transaction_mode": "IMMEDIATE"},
        {"init_command": "PRAGMA journal_mode=WAL;"},
        {"transaction_mode": "DEFERRED", "init_command": "PRAGMA journal_mode=WAL;"},
    ],
)
def test_sqlite_without_wal_and_immediate_transactions_is_warned(options):
    found = checks.sqlite_findings(
        {"jobs": {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": options}}
    )
    assert ids(found) == ["redrive.W001"]
    assert 'DATABASES["jobs"]["OPTIONS"]' in found[0].hint
    assert '"transaction_mode": "IMMEDIATE"' in found[0].hint


def test_sqlite_with_wal_and_immediate_transactions_passes():
    options = {
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode = WAL; PRAGMA synchronous=NORMAL;",
    }
    assert (
        checks.sqlite_findings(
            {
                "default": {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": options},
                "other": {"ENGINE": "django.db.backends.postgresql"},
            }
        )
        == []
    )


def test_a_configured_part_whose_extra_is_missing_names_the_extra(settings, monkeypatch):
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": {"ROUTES": {"audit.*": "rabbitmq:events"}}}
    real = checks.installed
    monkeypatch.setattr(checks, "installed", lambda module: module != "pika" and real(module))
    found = checks.check_optional_packages()
    assert ids(found) == ["redrive.E002"]
    assert "redrive[rabbitmq]" in found[0].msg


def test_metrics_routed_without_prometheus_names_the_metrics_extra(monkeypatch):
    real = checks.installed
    monkeypatch.setattr(
        checks, "installed", lambda module: module != "prometheus_client" and real(module)
    )
    found = checks.check_metrics_package()
    assert ids(found) == ["redrive.E002"] and "redrive[metrics]" in found[0].msg
    # A URL check, run with the project's others, not at a worker's start.
    assert "redrive" not in checks.check_metrics_package.tags
    assert checks.check_optional_packages() == []


def test_an_unconfigured_part_is_not_required(settings, monkeypatch):
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": {}}
    monkeypatch.setattr(
        checks, "installed", lambda module: module not in ("pika", "prometheus_client")
    )
    monkeypatch.setattr(checks, "_metrics_routed", lambda: False)
    assert checks.check_optional_packages() == []
    assert checks.check_metrics_package() == []


@task(timeout=45)
def slow_report():
    pass


@task(timeout=10)
def quick_report():
    pass


def test_a_task_timeout_not_below_the_lease_is_warned():
    found = checks.timeout_findings([slow_report, quick_report], lease=30.0)
    assert ids(found) == ["redrive.W002"]
    assert found[0].obj == slow_report.module_path
    assert checks.timeout_findings([quick_report], lease=10.0)[0].id == "redrive.W002"
    assert checks.timeout_findings([quick_report], lease=10.5) == []


def test_tasks_are_found_in_installed_apps_tasks_modules():
    paths = {task.module_path for task in checks._declared_tasks()}
    assert "deadletters.tasks.carry_out_run" in paths


def test_metrics_without_a_token_in_production_is_warned(settings):
    settings.DEBUG = False
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": ""}
    assert ids(checks.check_metrics_token()) == ["redrive.W003"]
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": "s3cret-token-for-prometheus"}
    assert checks.check_metrics_token() == []
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": ""}
    settings.DEBUG = True
    assert checks.check_metrics_token() == []


def test_the_console_without_htmx_middleware_is_an_error(settings):
    from deadletters.checks import HTMX_MIDDLEWARE, console_setup

    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != HTMX_MIDDLEWARE]
    found = console_setup()
    assert ids(found) == ["redrive.E003"]
    assert HTMX_MIDDLEWARE in found[0].hint


def test_a_django_htmx_without_htmx_script_is_an_error(monkeypatch):
    """django-htmx before 1.25 has no {% htmx_script %}, which the console's base template
    uses: check must refuse it rather than every console page being a server error."""
    from django_htmx.templatetags import django_htmx

    from deadletters.checks import console_setup

    assert console_setup() == []
    monkeypatch.delattr(django_htmx, "htmx_script")
    found = console_setup()
    assert ids(found) == ["redrive.E034"]
    assert "django-htmx>=1.25" in found[0].hint


def test_a_configured_source_whose_package_is_missing_names_the_extra(settings, monkeypatch):
    from deadletters import checks as console_checks

    settings.REDRIVE = {**settings.REDRIVE, "SOURCES": ["jobqueue", "django_q2"]}
    real = checks.installed
    monkeypatch.setattr(checks, "installed", lambda module: module != "django_q" and real(module))
    found = console_checks.console_setup()
    assert ids(found) == ["redrive.E002"]
    assert "redrive[django-q2]" in found[0].msg
    settings.REDRIVE = {**settings.REDRIVE, "SOURCES": ["jobqueue", "celery"]}
    assert ids(console_checks.console_setup()) == ["redrive.E005"]


def test_a_configured_source_not_in_installed_apps_is_an_error(settings):
    from deadletters.checks import console_setup

    settings.REDRIVE = {**settings.REDRIVE, "SOURCES": ["jobqueue", "django_q2"]}
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "django_q"]
    assert ids(console_setup()) == ["redrive.E006"]


def test_redrive_must_be_a_dict(settings):
    settings.REDRIVE = [("MAX_ATTEMPTS", 3)]
    assert ids(checks.check_settings()) == ["redrive.E007"]


def test_an_unknown_key_is_named_with_the_closest_one(settings):
    settings.REDRIVE = {"LEASE_SECOND": 10.0, "REPLAY_BATCHSIZE": 5}
    found = checks.check_settings()
    assert ids(found) == ["redrive.E008", "redrive.E008"]
    assert "Did you mean 'LEASE_SECONDS'?" in found[0].hint
    assert "Did you mean 'REPLAY_BATCH_SIZE'?" in found[1].hint


@pytest.mark.parametrize(
    "key, value",
    [
        ("MAX_ATTEMPTS", "5"),
        ("LEASE_SECONDS", True),
        ("OUTBOX", []),
        ("SOURCES", "jobqueue,django_q2"),
        ("METRICS_TOKEN", 12345),
    ],
)
def test_a_value_of_the_wrong_kind_is_an_error(settings, key, value):
    settings.REDRIVE = {key: value}
    found = checks.check_settings()
    assert ids(found) == ["redrive.E009"]
    assert key in found[0].msg


def test_settings_of_earlier_versions_say_where_they_moved(settings):
    settings.JOBQUEUE = {"MAX_ATTEMPTS": 3}
    settings.DEADLETTERS_REPLAY_BATCH_SIZE = 10
    settings.REDRIVE_METRICS_TOKEN = "t"
    found = {message.msg: message.hint for message in checks.check_settings()}
    assert found["settings.JOBQUEUE is no longer read."].startswith("Move it to its keys")
    assert found["settings.DEADLETTERS_REPLAY_BATCH_SIZE is no longer read."] == (
        'Move it to REDRIVE["REPLAY_BATCH_SIZE"].'
    )
    assert found["settings.REDRIVE_METRICS_TOKEN is no longer read."] == (
        'Move it to REDRIVE["METRICS_TOKEN"].'
    )


def test_the_top_level_approval_threshold_of_an_earlier_version_is_not_read(settings):
    from deadletters import conf as console_conf

    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": 100}
    settings.DEADLETTERS_APPROVAL_THRESHOLD = 1
    assert console_conf.approval_threshold() == 100
    found = {message.msg: message for message in checks.check_settings()}
    warning = found["settings.DEADLETTERS_APPROVAL_THRESHOLD is no longer read."]
    assert (warning.id, warning.hint) == (
        "redrive.W004",
        'Move it to REDRIVE["APPROVAL_THRESHOLD"].',
    )


def test_keys_are_read_from_redrive_with_their_defaults(settings):
    from jobqueue import conf

    settings.REDRIVE = {"LEASE_SECONDS": 12.5, "PAGE_SIZE": 7}
    assert conf.setting("LEASE_SECONDS") == 12.5
    assert conf.setting("MAX_ATTEMPTS") == 5
    assert conf.setting("PAGE_SIZE") == 7  # the console's keys, through the same accessor
    assert conf.setting("REPLAY_QUEUE") == "deadletters"
    del settings.REDRIVE
    assert conf.setting("LEASE_SECONDS") == 30.0
    assert checks.check_settings() == []


def test_settings_are_read_through_one_accessor():
    """jobqueue.conf.setting is the one way to read a setting: the accessors it replaced stay
    gone."""
    from deadletters import conf as console_conf
    from jobqueue import conf, outbox
    from jobqueue.store.sources import brokers

    assert not hasattr(conf, "policy") and not hasattr(console_conf, "get")
    assert getattr(outbox, "setting", conf.setting) is conf.setting  # imported, not its own
    assert not hasattr(brokers, "settings_of")


def test_a_settings_dicts_keys_are_read_with_their_defaults(settings):
    """OUTBOX's keys default to OUTBOX_DEFAULTS, its retry policy to REDRIVE's own keys; a
    broker's dead-letter settings have no defaults here (its source supplies them)."""
    from jobqueue import conf

    settings.REDRIVE = {"MAX_ATTEMPTS": 9, "OUTBOX": {"BATCH_SIZE": 50, "BACKOFF_CAP": 60.0}}
    assert conf.setting("OUTBOX", "BATCH_SIZE") == 50
    assert conf.setting("OUTBOX", "POLL_INTERVAL") == 1.0
    assert conf.setting("OUTBOX", "BACKOFF_CAP") == 60.0
    assert conf.setting("OUTBOX", "MAX_ATTEMPTS") == 9
    assert conf.setting("OUTBOX", "BACKOFF_BASE") == 1.0
    assert conf.setting("RABBITMQ_DEAD_LETTERS", "queues") is None
    settings.REDRIVE = {"SQS_DEAD_LETTERS": {"queues": ["https://sqs/dlq"]}, "OUTBOX": []}
    assert conf.setting("SQS_DEAD_LETTERS", "queues") == ["https://sqs/dlq"]
    assert conf.setting("OUTBOX", "ROUTES") == {}  # the wrong kind reads as empty (E009)


# --- nested settings: REDRIVE["OUTBOX"] --------------------------------------------------

HOOK = {"url": "https://billing.example/hooks", "secret": "s3cret"}
BROKER = {"url": "amqp://guest:guest@127.0.0.1:5672/%2F", "exchange": "events"}


def outbox_findings(settings, **outbox):
    settings.REDRIVE = {"OUTBOX": outbox}
    return checks.check_settings() + checks.check_outbox()


def test_the_readmes_outbox_passes_every_check(settings):
    outbox = {
        "ROUTES": {"order.*": "jobs", "billing.*": "webhook:billing", "audit.*": "rabbitmq:events"},
        "DESTINATIONS": {"billing": {**HOOK, "concurrency": 8}, "events": BROKER},
        "SUBSCRIBERS": {"order.created": ["tests.tasks.effect"]},
        "BATCH_SIZE": 100,
        "RELAY_IN_WORKER": True,
        "MAX_ATTEMPTS": 3,
    }
    assert outbox_findings(settings, **outbox) == []


def test_an_unknown_outbox_key_is_named_with_the_closest_one(settings):
    found = outbox_findings(settings, ROUTE={"order.*": "jobs"}, BATCH_SIZE="200")
    assert ids(found) == ["redrive.E008", "redrive.E009"]
    assert found[0].msg == "REDRIVE['OUTBOX']['ROUTE'] is not a Redrive setting."
    assert found[0].hint == "Did you mean 'ROUTES'?"
    assert "REDRIVE['OUTBOX']['BATCH_SIZE'] must be a number" in found[1].msg


@pytest.mark.parametrize(
    "spec, says, hint",
    [
        ("webhook:biling", "no destination 'biling'", "Did you mean 'webhook:billing'?"),
        ("webhok:billing", "'webhok' is not a kind", "Did you mean 'webhook:billing'?"),
        ("rabbitmq:events", "no destination 'events'", "Routes are"),
        ("kafka:billing", "'kafka' is not a kind of destination", "Routes are"),
        ("webhook", "a webhook route names its destination", "Routes are"),
        ("jobs:bulk", "no destination 'bulk'", "Routes are"),
    ],
)
def test_a_route_to_an_unknown_destination_is_an_error(settings, spec, says, hint):
    found = outbox_findings(settings, ROUTES={"billing.*": spec}, DESTINATIONS={"billing": HOOK})
    assert ids(found) == ["redrive.E031"]
    assert found[0].msg.startswith(f"REDRIVE['OUTBOX']['ROUTES']['billing.*'] = {spec!r}: ")
    assert says in found[0].msg
    assert found[0].hint.startswith(hint)


@pytest.mark.parametrize(
    "kind, config, says",
    [
        ("webhook", {"url": "https://billing.example/"}, "has no secret to sign with"),
        ("webhook", {**HOOK, "url": "ftp://billing.example/"}, "url must be http or https"),
        ("webhook", {**HOOK, "concurrency": 0}, "concurrency must be an integer from 1"),
        ("webhook", {**HOOK, "read_timeout": "10"}, "'read_timeout' has the wrong kind"),
        ("webhook", {**HOOK, "timeout": -1}, "'timeout' must be a positive number"),
        ("webhook", {**HOOK, "headers": {"X-Tenant": 7}}, "'headers' must map header names"),
        ("webhook", {**HOOK, "max_attempts": 0}, "'max_attempts' must be at least 1"),
        ("rabbitmq", {"exchange": "events"}, "has no url"),
        ("rabbitmq", {**BROKER, "routing_key": "{nope}"}, "'routing_key' must be a format"),
        ("rabbitmq", {**BROKER, "mandatory": "yes"}, "'mandatory' has the wrong kind"),
        ("webhook", "https://billing.example/", "must be a dict, not str"),
    ],
)
def test_a_destination_the_relay_could_not_send_to_is_an_error(settings, kind, config, says):
    found = outbox_findings(
        settings, ROUTES={"billing.*": f"{kind}:billing"}, DESTINATIONS={"billing": config}
    )
    assert ids(found) == ["redrive.E032"]
    assert found[0].msg.startswith(f"REDRIVE['OUTBOX']['DESTINATIONS']['billing'] ({kind}): ")
    assert says in found[0].msg


def test_a_misspelt_destination_key_is_named_with_the_closest_one(settings):
    found = outbox_findings(
        settings,
        ROUTES={"billing.*": "webhook:billing"},
        DESTINATIONS={"billing": {**HOOK, "read_timout": 3.0}},
    )
    assert ids(found) == ["redrive.E008"]
    assert "['DESTINATIONS']['billing']['read_timout']" in found[0].msg
    assert found[0].hint == "Did you mean 'read_timeout'?"


def test_a_subscriber_that_is_not_a_task_that_imports_is_an_error(settings):
    found = outbox_findings(
        settings,
        ROUTES={"order.*": "jobs"},
        SUBSCRIBERS={
            "order.created": ["tests.tasks.effect", "shop.tasks.send_confirmation"],
            "order.paid": "tests.tasks.no_such_task",
            "order.shipped": "tests.broken_tasks.on_import.anything",
            "order.lost": ["jobqueue.checks.check_outbox"],
        },
    )
    assert ids(found) == ["redrive.E033"] * 4
    named = [message.msg.split(": ")[1] for message in found]
    assert named == [
        "'shop.tasks.send_confirmation' is not a task that imports",
        "'tests.tasks.no_such_task' is not a task that imports",
        "'tests.broken_tasks.on_import.anything' is not a task that imports",
        "'jobqueue.checks.check_outbox' is not a task that imports",
    ]


def test_manage_py_check_refuses_a_broken_outbox(settings):
    from django.core.management.base import SystemCheckError

    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": {"ROUTES": {"audit.*": "rabbitmq:evnts"}}}
    with pytest.raises(SystemCheckError, match=r"redrive\.E031"):
        call_command("check", tags=["redrive"])


def test_a_brokers_dead_letter_settings_are_checked_though_sources_does_not_name_it(settings):
    """A worker syncs the queues of RABBITMQ_DEAD_LETTERS whether or not SOURCES names it."""
    from deadletters.checks import console_setup

    settings.REDRIVE = {
        "SOURCES": ["jobqueue"],
        "RABBITMQ_DEAD_LETTERS": {"url": "amqp://127.0.0.1:5672/%2F", "queue": ["orders.dead"]},
    }
    found = console_setup()
    assert ids(found) == ["redrive.E029", "redrive.E029"]
    assert 'names no "queues" to mirror' in found[0].msg
    assert "unknown key 'queue'" in found[1].msg
    settings.REDRIVE = {"SOURCES": ["jobqueue"]}
    assert console_setup() == []


def test_an_unknown_source_is_named_with_the_closest_one(settings):
    from deadletters.checks import console_setup

    settings.REDRIVE = {"SOURCES": ["jobqueue", "rabbitqm"]}
    found = console_setup()
    assert ids(found) == ["redrive.E005"]
    assert found[0].hint.startswith("Did you mean 'rabbitmq'? Sources are")


def test_every_check_id_is_in_the_readmes_table():
    import re

    from tests.conftest import BASE_DIR

    raised = set()
    for app in ("jobqueue", "deadletters"):
        for path in (BASE_DIR / app).rglob("*.py"):
            raised |= set(re.findall(r'"redrive\.([EW]\d{3})"', path.read_text()))
    readme = (BASE_DIR / "README.md").read_text()
    table = readme[readme.index("### System checks") :].split("\n\n")[1]
    listed = set()
    for row in table.splitlines()[2:]:
        cell = row.split("|")[1]
        for first, last in re.findall(r"([EW]\d{3})(?:`?\u2013`?([EW]\d{3}))?", cell):
            numbers = range(int(first[1:]), int((last or first)[1:]) + 1)
            listed |= {f"{first[0]}{n:03d}" for n in numbers}
    assert raised == listed


@pytest.mark.parametrize(
    "patterns, said",
    [
        (["token", "(unclosed"], "'(unclosed' does not compile"),
        ("password", "must be a list of regular expressions"),
        (["token", ""], "'' is not a regular expression's text"),
        ([3], "3 is not a regular expression's text"),
    ],
)
def test_masking_patterns_that_do_not_compile_are_refused_at_check(settings, patterns, said):
    from deadletters.checks import triage_settings

    settings.REDRIVE = {**settings.REDRIVE, "REDACT_PATTERNS": patterns}
    [error] = [e for e in triage_settings() if e.id == "redrive.E035"]
    assert said in error.msg
    settings.REDRIVE = {**settings.REDRIVE, "REDACT_PATTERNS": ["token", r"pass(word)?"]}
    assert not [e for e in triage_settings() if e.id == "redrive.E035"]
