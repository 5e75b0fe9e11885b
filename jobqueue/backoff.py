"""Retry delays: capped exponential backoff with equal jitter, so a failing dependency sees
retries spread out and bounded, never a retry storm.

Equal jitter keeps half of each step fixed, so a retry never comes back at once after a failure
(full jitter can pick ~0 s and hammer a dependency that just fell over) while the random half
still spreads a burst of failures over time.
"""

import random as _random
from collections.abc import Callable


def retry_delay(
    attempt: int,
    *,
    base: float = 1.0,
    cap: float = 3600.0,
    random: Callable[[], float] = _random.random,
) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based): in [step/2, step)."""
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    if base <= 0 or cap <= 0:
        raise ValueError("base and cap must be positive")
    # min() before the power would overflow for large attempt numbers.
    step = cap if attempt > 64 else min(cap, base * 2 ** (attempt - 1))
    return step / 2 + random() * step / 2
