from django.apps import AppConfig
from django.core import checks


class ProjectConfig(AppConfig):
    """The example project's own start-up checks (config/secret_key.py)."""

    name = "config"
    label = "redrive_project"

    def ready(self):
        from jobqueue.checks import TAG

        from . import secret_key

        # With Redrive's tag, so the worker and the relay (which run only those checks at
        # start-up) refuse to start without a key too: every entry point of this project does.
        checks.register(secret_key.check, checks.Tags.security, TAG)
