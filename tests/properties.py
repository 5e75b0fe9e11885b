"""How hard the property tests search: one Hypothesis profile per purpose.

`ci` (the default) keeps each property test to seconds on a 2-core machine, so the suite runs
in CI's time on every change; `deep` searches twenty times as far, for a developer to run by
hand before a release: `REDRIVE_HYPOTHESIS=deep uv run pytest -k "…"`. A test that names its own
example count passes it through `examples()`, so the profile scales it too.
"""

import os

from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("REDRIVE_HYPOTHESIS", "ci")
DEEP_FACTOR = 20

settings.register_profile(
    "ci",
    max_examples=100,  # Hypothesis's own default
    deadline=None,  # a loaded machine is no counterexample
    database=None,  # no .hypothesis/ directory in the checkout
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep",
    max_examples=100 * DEEP_FACTOR,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
if PROFILE not in ("ci", "deep"):
    raise ValueError(f"REDRIVE_HYPOTHESIS={PROFILE!r}: the profiles are 'ci' and 'deep'")
settings.load_profile(PROFILE)


def examples(count: int) -> int:
    """A test's own example count under the profile in force."""
    return count * DEEP_FACTOR if PROFILE == "deep" else count
