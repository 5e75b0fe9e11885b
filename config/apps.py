from django.apps import AppConfig
from django.core import checks


class ProjectConfig(AppConfig):
    """The example project's own start-up checks (config/secret_key.py)."""

    name = "config"
    label = "redrive_project"

    def ready(self):
        from . import secret_key

        checks.register(secret_key.check, checks.Tags.security)
