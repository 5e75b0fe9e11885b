"""Masking secrets in payloads, everywhere they are shown: the console, the CLI, the admin.

A value is masked when its key matches one of REDRIVE["REDACT_PATTERNS"]: regular expressions
searched case-insensitively in the key, so `token` masks `access_token` and `X-Token`, at any
depth and inside lists. Seeing the values unmasked needs REVEAL_PERMISSION, and each time is
recorded (record_reveal) with who, which letter, when and through what.
"""

from __future__ import annotations

import re
from functools import lru_cache

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from . import conf

REDACTED = "••••"
REVEAL_PERMISSION = "deadletters.view_secrets"


@lru_cache(maxsize=8)
def _compile(patterns: tuple[str, ...]) -> re.Pattern | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def matcher(patterns=None) -> re.Pattern | None:
    """The compiled patterns (the setting's by default), or None when nothing is masked."""
    if patterns is None:
        patterns = conf.get("REDACT_PATTERNS")
    return _compile(tuple(patterns))


def is_sensitive(key, patterns=None) -> bool:
    pattern = matcher(patterns)
    return pattern is not None and pattern.search(str(key)) is not None


def redact(value, patterns=None):
    """A copy of `value` with the value of every sensitive key, at any depth, replaced."""
    pattern = matcher(patterns)
    if pattern is None:
        return value
    return _redact(value, pattern)


def _redact(value, pattern):
    if isinstance(value, dict):
        return {
            k: REDACTED if pattern.search(str(k)) else _redact(v, pattern) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(v, pattern) for v in value]
    return value


def record_reveal(user, letter, *, via: str):
    """Check that `user` may see `letter` unmasked and record that they did (raise
    PermissionDenied, writing nothing, if not). Call it before showing the values."""
    from .models import Reveal

    if not (user.is_active and user.has_perm(REVEAL_PERMISSION)):
        raise PermissionDenied(f"{user} may not see unmasked payloads ({REVEAL_PERMISSION})")
    return Reveal.objects.create(
        dead_letter_id=letter.pk,
        task_path=letter.task_path,
        operator=user,
        operator_name=user.get_username(),
        via=via,
        at=timezone.now(),
    )
