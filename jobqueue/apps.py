from django.apps import AppConfig
from django.db.models.signals import post_migrate


class JobqueueConfig(AppConfig):
    name = "jobqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import checks  # noqa: F401 - registers the system checks

        post_migrate.connect(_after_migrate, sender=self)


def _after_migrate(sender, using, **kwargs):
    from django.db import connections

    from .health import ensure_dead_letter_counter

    ensure_dead_letter_counter(connections[using])
