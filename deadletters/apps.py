import logging

from django.apps import AppConfig
from django.core import checks

from jobqueue.logfmt import log_line

logger = logging.getLogger("deadletters")


class DeadlettersConfig(AppConfig):
    name = "deadletters"
    verbose_name = "Dead letters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from jobqueue.checks import TAG

        from . import checks as deadletters_checks

        checks.register(deadletters_checks.replay_settings, TAG)
        checks.register(deadletters_checks.console_setup, TAG)
        checks.register(deadletters_checks.triage_settings, TAG)
        # A URL check, the web process's (as /metrics' is): a worker has no use for the URLconf.
        checks.register(deadletters_checks.api_extra, checks.Tags.urls)
        stand_in_for_the_api_without_its_extra()
        # Queue health counts pending dead letters through our trigger-kept counters (jobqueue,
        # which imports nothing from us, would otherwise count the big table); jobqueue asks
        # them to restore their triggers after each migrate.
        from jobqueue import health

        from . import counters, django_q2_bridge

        health.register_dead_letter_counter(
            health.DeadLetterCounter(
                count=counters.pending_by_queue_and_task, ensure=counters.ensure_if_migrated
            )
        )
        register_sources()
        django_q2_bridge.connect()


def stand_in_for_the_api_without_its_extra():
    """Without django-ninja, `deadletters.api.urls` is deadletters.api_missing (see there):
    a project that mounts the API loads its URLconf, and the check redrive.E037 names the
    extra instead of every command stopping on a ModuleNotFoundError."""
    import sys

    from jobqueue.checks import installed

    from . import api_missing

    if not installed("ninja"):
        sys.modules.setdefault(api_missing.URLCONF, api_missing)


def register_sources():
    """A source named in SOURCES by its dotted path is one of the host's own: a
    jobqueue.store.sources.Source, registered so replays, discards and the console reach it.

    One that cannot be loaded is left out with a warning, not raised here, where it would stop
    every command (`manage.py check` among them) with a traceback: the system check says what
    is wrong with it (redrive.E005), and the commands that run the checks (runworker,
    runserver) stop on that."""
    from jobqueue.conf import setting
    from jobqueue.store import sources

    for name in setting("SOURCES"):
        if "." in name:
            try:
                sources.register(name)
            except Exception as exc:  # noqa: BLE001 - reported by the check, with its reason
                log_line(
                    logger, logging.WARNING, "source_not_loaded", source=name,
                    error=repr(exc)[:300],
                )  # fmt: skip
