"""System checks of the console's settings: `manage.py` commands (runserver, runworker,
migrate, check) refuse to start on a value the replay runner could not work with."""

from django.core import checks

from . import conf

# Each setting with its validator and check id (the validators hold the ranges).
REPLAY_SETTINGS = (
    ("REPLAY_RATE", conf.validate_replay_rate, "redrive.E011"),
    ("REPLAY_BATCH_SIZE", conf.validate_replay_batch_size, "redrive.E012"),
)


def replay_settings(app_configs=None, **kwargs):
    errors = []
    for name, validate, check_id in REPLAY_SETTINGS:
        try:
            validate(conf.get(name))
        except ValueError as exc:
            errors.append(
                checks.Error(
                    f"DEADLETTERS_{name}: {exc}.",
                    hint=f"Set DEADLETTERS_{name} (settings or environment) within that range.",
                    id=check_id,
                )
            )
    return errors
