"""The console's settings, each with its default (override with DEADLETTERS_* in settings)."""

from django.conf import settings

DEFAULTS = {
    # Payload keys shown as •••• on the detail page, matched case-insensitively at any depth.
    "REDACT_KEYS": ("password", "secret", "token", "api_key", "authorization", "card_number"),
    # Items replayed or discarded per transaction; a run no larger runs inside the request.
    "REPLAY_BATCH_SIZE": 100,
    # An item replayed this many times is skipped unless the operator may replay poison.
    "MAX_REPLAYS": 3,
    # Default items per second of a background run; 0 means as fast as the database allows.
    "REPLAY_RATE": 0,
    # The jobqueue queue the background runner's jobs go to.
    "QUEUE": "deadletters",
    "PAGE_SIZE": 50,
    # Largest selection one run may freeze ("select all matching" beyond this is refused).
    "MAX_SELECTION": 100_000,
    "OVERVIEW_POLL_SECONDS": 10,
    # An active run with no batch for this long is offered a "restart runner" button (its
    # worker died and the queue gave up retrying, or no worker serves the queue).
    "STALL_SECONDS": 300,
    # Where dead letters come from: "jobqueue" (ours) and, with the bridge on, "django_q2".
    "SOURCES": ("jobqueue",),
}


def get(name: str):
    return getattr(settings, f"DEADLETTERS_{name}", DEFAULTS[name])
