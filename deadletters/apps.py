from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


class DeadlettersConfig(AppConfig):
    name = "deadletters"
    verbose_name = "Dead letters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        post_migrate.connect(_ensure_counters, sender=self)
        from . import checks as deadletters_checks

        checks.register(deadletters_checks.replay_settings)
        checks.register(deadletters_checks.console_setup)
        # The health figures count pending dead letters through our trigger-kept counters
        # (jobqueue, which imports nothing from us, would otherwise count the big table).
        from jobqueue import health
        from jobqueue.store import sources

        from . import conf, counters, django_q2_bridge

        health.count_dead_letters = counters.pending_by_queue_and_task
        # A source named by its dotted path is a Source of the host's own (jobqueue.store.sources).
        for name in conf.get("SOURCES"):
            if "." in name:
                sources.register(name)
        django_q2_bridge.connect()


def _ensure_counters(sender, using, plan=None, **kwargs):
    from django.db import connections
    from django.db.migrations.recorder import MigrationRecorder

    connection = connections[using]
    applied = MigrationRecorder(connection).applied_migrations()
    if ("deadletters", "0004_pending_count_queue") not in applied:
        return  # migrated backwards (or not yet); the migration installs them
    from . import counters

    counters.ensure(connection)
