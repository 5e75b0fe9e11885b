"""The console's keys of settings.REDRIVE, each with its default; `jobqueue.conf.setting` reads
them (deadletters/__init__.py imports this module, so they are declared before any is read)."""

from datetime import UTC
from zoneinfo import ZoneInfo

from jobqueue import conf as redrive_conf
from jobqueue.conf import setting

DEFAULTS = {
    # Payload values shown as ••••: regular expressions searched case-insensitively in each key,
    # at any depth, and in the names of header pairs, query parameters and header lines inside
    # text (deadletters/redaction.py). "token" masks access_token, refresh_token, X-Token ...;
    # (?<![a-z]) and (?![a-z]) keep a short name from matching inside a word (pw, not pwned).
    "REDACT_PATTERNS": (
        "passw(or)?d",  # password, passwd, DB_PASSWORD
        "pass(phrase|code)",
        "pass(?![a-z])",  # pass, smtp_pass, dbPass; not passenger, passport (compass, too)
        "pwd",
        "(?<![a-z])pw(?![a-z])",
        "secret",  # client_secret, secret_key, AWS_SECRET_ACCESS_KEY
        "token",
        "jwt",
        "bearer",
        "auth(?!or)",  # auth, x-auth, oauth, basic_auth, authenticate; not author, authority
        "authori[sz]ation",
        "credential",
        "cookie",
        "session",
        "api[-_]?key",  # api_key, apikey, X-Api-Key
        "(private|signing|encryption|master|access|account)[-_]?key",
        "signature",
        "(?<![a-z])dsn(?![a-z])",  # a database or Sentry DSN holds its password or key
        "connection[-_]?string",
        "credit[-_]?card",
        "card[-_]?(number|num|no)(?![a-z])",
        "(?<![a-z])(cc[-_]?num(ber)?|pan)(?![a-z])",
        "cvc",
        "cvv",
        "iban",
        "account[-_]?(number|num)",
        "(?<![a-z])ssn(?![a-z])",
        "social[-_]?security",
        "(?<![a-z])(otp|totp|hotp|pin)(?![a-z])",
    ),
    # Items replayed or discarded per transaction; a run no larger runs inside the request.
    "REPLAY_BATCH_SIZE": 100,
    # An item replayed this many times is skipped unless the operator may replay poison.
    "MAX_REPLAYS": 3,
    # Default items per second of a background run; 0 means as fast as the database allows.
    "REPLAY_RATE": 0,
    # The jobqueue queue the background runner's jobs go to.
    "REPLAY_QUEUE": "deadletters",
    "PAGE_SIZE": 50,
    # Largest selection one run may freeze ("select all matching" beyond this is refused).
    "MAX_SELECTION": 100_000,
    "OVERVIEW_POLL_SECONDS": 10,
    # An active run with no batch for this long is offered a "restart runner" button (its
    # worker died and the queue gave up retrying, or no worker serves the queue).
    "STALL_SECONDS": 300,
    # Where dead letters come from: "jobqueue" (ours) and, with the bridge on, "django_q2".
    "SOURCES": ("jobqueue",),
    # The zone the console shows times in (an IANA name such as "Europe/Paris"); every time
    # is written `2026-11-30 14:49:17 UTC` in it, its abbreviation after the clock.
    "TIME_ZONE": "UTC",
    # Triage (issue 18). Two-person rule: a run over this many items waits for a second user's
    # approval (None: off).
    "APPROVAL_THRESHOLD": None,
    # Edit before replay: a job type's own check of an edited payload, {"task.path": "dotted
    # path of a callable(args, kwargs)"} that raises ValueError (or ValidationError) to refuse.
    "PAYLOAD_VALIDATORS": {},
    # A replay run's canary: items replayed first, alone (0: none); the share of them that may
    # die again before the run halts itself; how long to wait for their jobs (seconds).
    "CANARY_SIZE": 5,
    "CANARY_MAX_DEAD_SHARE": 0.2,
    "CANARY_TIMEOUT": 300.0,
    # Most rows one export may stream.
    "EXPORT_MAX_ROWS": 100_000,
}


redrive_conf.declare("deadletters", DEFAULTS)


def zone():
    """The zone the console shows times and reads filter days in (REDRIVE["TIME_ZONE"])."""
    name = setting("TIME_ZONE")
    return UTC if name == "UTC" else ZoneInfo(name)


def validate_approval_threshold(value) -> int | None:
    """Return `value` as a number of items (None: no approval needed), or raise ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"the approval threshold must be a whole number of items from 1, or None (off), "
            f"not {value!r}"
        )
    return value


def approval_threshold() -> int | None:
    """Runs of more items than this wait for a second user's approval; None: none do."""
    return validate_approval_threshold(setting("APPROVAL_THRESHOLD"))


# Sane ranges for replay pacing, shared by the form, the CLI and the start-up check. A rate is
# items per second (0 = unlimited); below MIN_REPLAY_RATE a run would take days per item and
# float arithmetic on the wait overflows, above MAX_REPLAY_RATE it is unlimited in practice.
MIN_REPLAY_RATE = 0.1
MAX_REPLAY_RATE = 10_000.0
MIN_REPLAY_BATCH_SIZE = 1
MAX_REPLAY_BATCH_SIZE = 1_000


def validate_replay_rate(value) -> float:
    """Return `value` as a rate in items per second, or raise ValueError saying the range."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"replay rate must be a number, not {value!r}") from None
    if rate == 0:
        return 0.0
    if not (MIN_REPLAY_RATE <= rate <= MAX_REPLAY_RATE):  # also refuses NaN and infinity
        raise ValueError(
            f"replay rate must be 0 (unlimited) or between {MIN_REPLAY_RATE:g} and "
            f"{MAX_REPLAY_RATE:g} items per second, not {value!r}"
        )
    return rate


def validate_replay_batch_size(value) -> int:
    """Return `value` as a batch size, or raise ValueError saying the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"replay batch size must be an integer, not {value!r}")
    if not (MIN_REPLAY_BATCH_SIZE <= value <= MAX_REPLAY_BATCH_SIZE):
        raise ValueError(
            f"replay batch size must be between {MIN_REPLAY_BATCH_SIZE} and "
            f"{MAX_REPLAY_BATCH_SIZE}, not {value!r}"
        )
    return value


# A replay run's canary (REDRIVE["CANARY_*"], the confirm form, the CLI): at most this many
# items (its outcome is read again every second while it is watched), a share of deaths from
# 0 (any death halts the run) to 1 (never halts), a wait of at most a day for its jobs.
MAX_CANARY_SIZE = 1_000
MAX_CANARY_TIMEOUT = 86_400.0


def validate_canary_size(value) -> int:
    """Return `value` as a canary size (0: no canary), or raise ValueError saying the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"canary size must be a whole number, not {value!r}")
    if not (0 <= value <= MAX_CANARY_SIZE):
        raise ValueError(
            f"canary size must be between 0 (no canary) and {MAX_CANARY_SIZE}, not {value!r}"
        )
    return value


def validate_canary_share(value) -> float:
    """Return `value` as the share of a canary that may die again (0 to 1), or ValueError."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"canary dead share must be a number, not {value!r}") from None
    if isinstance(value, bool) or not (0.0 <= share <= 1.0):  # also refuses NaN
        raise ValueError(f"canary dead share must be between 0 and 1, not {value!r}")
    return share


def validate_canary_timeout(value) -> float:
    """Return `value` as the seconds a canary's jobs are waited for, or raise ValueError."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"canary timeout must be a number of seconds, not {value!r}") from None
    if isinstance(value, bool) or not (0.0 < seconds <= MAX_CANARY_TIMEOUT):
        raise ValueError(
            f"canary timeout must be more than 0 and at most {MAX_CANARY_TIMEOUT:g} seconds, "
            f"not {value!r}"
        )
    return seconds
