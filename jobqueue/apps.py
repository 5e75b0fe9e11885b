from django.apps import AppConfig


class JobqueueConfig(AppConfig):
    name = "jobqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import checks  # noqa: F401 - registers the system checks
