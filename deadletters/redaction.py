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


# Edits (deadletters/edits.py): a masked value an operator left as it was is put back, never
# sent to a job as the mask; in a diff a changed masked value shows as changed, not as itself.
CHANGED = f"{REDACTED} (changed)"
_NOWHERE = object()


def restore_masked(new, original, path: str, patterns=None):
    """`new`, an edit of the masked `original`, with each mask (REDACTED) put back to the
    original value it hid. A mask is put back only where its place is unambiguous: under a
    sensitive key, with the same keys and lists of the same lengths on the way there as in the
    original. ValueError names any other mask: a job must never receive it."""
    return _restore(new, original, matcher(patterns), path)


def _restore(new, original, pattern, path):
    if isinstance(new, dict):
        restored = {}
        for key, value in new.items():
            here = f"{path}[{key!r}]"
            before = original.get(key, _NOWHERE) if isinstance(original, dict) else _NOWHERE
            if (
                value == REDACTED
                and before is not _NOWHERE
                and pattern is not None
                and pattern.search(str(key))
            ):
                restored[key] = before
            else:
                restored[key] = _restore(value, before, pattern, here)
        return restored
    if isinstance(new, list):
        aligned = isinstance(original, list) and len(original) == len(new)
        return [
            _restore(value, original[n] if aligned else _NOWHERE, pattern, f"{path}[{n}]")
            for n, value in enumerate(new)
        ]
    if new == REDACTED and original != REDACTED:  # the original may hold the text itself
        raise ValueError(
            f"{path} is the mask {REDACTED}, not a value: the value it hides could not be "
            "matched to its place in the original (a masked value is kept only under its own "
            "key, with lists of the same length on the way). Reveal the values to edit it, or "
            "type a new value."
        )
    return new


def masked_values(value, patterns=None) -> list[str]:
    """The text of every scalar `redact` hides in `value` (walked without recursion: a payload
    may be nested deeper than the stack), to `scrub` from a message."""
    pattern = matcher(patterns)
    found, todo = [], [(value, False)] if pattern is not None else []
    while todo:
        item, hidden = todo.pop()
        if isinstance(item, dict):
            todo.extend((v, hidden or pattern.search(str(k)) is not None) for k, v in item.items())
        elif isinstance(item, list | tuple):
            todo.extend((v, hidden) for v in item)
        elif hidden and item is not None and str(item):
            found.append(str(item))
    return found


def scrub(text: str, hidden) -> str:
    """`text` with each of the `hidden` values in it replaced by the mask, longest first."""
    for value in sorted(set(hidden), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def redact_pair(old, new, patterns=None):
    """`old` and `new` masked for a diff of the two: a masked value of `new` that differs from
    the one at the same place in `old` (or is not there) shows as CHANGED."""
    pattern = matcher(patterns)
    if pattern is None:
        return old, new
    return _redact(old, pattern), _redact_against(new, old, pattern)


def _redact_against(value, old, pattern):
    if isinstance(value, dict):
        before = old if isinstance(old, dict) else {}
        return {
            k: (
                (REDACTED if k in before and before[k] == v else CHANGED)
                if pattern.search(str(k))
                else _redact_against(v, before.get(k, _NOWHERE), pattern)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        aligned = isinstance(old, list | tuple) and len(old) == len(value)
        return [
            _redact_against(v, old[n] if aligned else _NOWHERE, pattern)
            for n, v in enumerate(value)
        ]
    return value
