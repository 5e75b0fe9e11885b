"""Masking secrets in payloads, everywhere they are shown: the console, the CLI, the admin,
exports.

A name is sensitive when one of REDRIVE["REDACT_PATTERNS"] matches it: regular expressions
searched case-insensitively, so `token` masks `access_token` and `X-Token`. Shown as REDACTED:
- the value of a sensitive key, at any depth and inside lists;
- the value of a header given as a pair, ["Authorization", "Bearer x"] in a list (HTTP
  clients take headers as a list of pairs), or as an object {"name": "Authorization",
  "value": "…"} (HAR files, Kubernetes env vars; "key", "header", "field" name it too);
- in any text: a URL's password (scheme://user:••••@host), a sensitive query or form
  parameter (?api_key=••••), a sensitive header line (Authorization: ••••), the value of a
  quoted sensitive key in JSON or repr text ("password": "••••"), a bearer token, a JWT.

Every walk here is a loop, not a recursion, and what it shows is cut below MAX_JSON_DEPTH
(CUT): nothing can be stored deeper now, but a row written by hand or by an older version may
be, and every page, command and export still shows it. Seeing values unmasked needs
REVEAL_PERMISSION, and each time is recorded in the audit log (record_reveal: letter.reveal)
with who, which letter, when and through what.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from jobqueue.conf import setting
from jobqueue.store import MAX_JSON_DEPTH

REDACTED = "••••"
REVEAL_PERMISSION = "deadletters.view_secrets"
# In a diff (deadletters/edits.py), a masked value that changed shows as changed, not as itself.
CHANGED = f"{REDACTED} (changed)"
CUT = f"… (nested deeper than {MAX_JSON_DEPTH} levels: not shown)"

# {"name": "Authorization", "value": "…"}: the keys that name a value, and the value's key.
NAME_KEYS = frozenset({"name", "key", "header", "field"})
VALUE_KEY = "value"

_NOWHERE = object()
_HIDE, _PAIR = 1, 2  # a place masked whole; a [name, value] pair whose value is masked


@lru_cache(maxsize=8)
def _compile(patterns: tuple[str, ...]) -> re.Pattern | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def matcher(patterns=None) -> re.Pattern | None:
    """The compiled patterns (the setting's by default), or None when nothing is masked."""
    if patterns is None:
        patterns = setting("REDACT_PATTERNS")
    return _compile(tuple(patterns))


def is_sensitive(key, patterns=None) -> bool:
    pattern = matcher(patterns)
    return pattern is not None and pattern.search(str(key)) is not None


def redact(value, patterns=None):
    """A copy of `value` as it is shown: masked (see the module's docstring) and cut below
    MAX_JSON_DEPTH."""
    return _shown(value, matcher(patterns))


def unmasked(value):
    """A copy of `value` as a recorded reveal shows it: nothing masked, cut as `redact` cuts."""
    return _shown(value, None)


def pretty(value) -> str:
    """A shown value (`redact`, `unmasked`) as the pages and commands print it."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def preview(value, limit: int) -> tuple[str, bool]:
    """`pretty(value)` cut at `limit` characters, and whether it was cut."""
    text = pretty(value)
    return (text[:limit], True) if len(text) > limit else (text, False)


def redact_pair(old, new, patterns=None):
    """`old` and `new` masked for a diff of the two: a masked value of `new` that differs from
    the one at the same place in `old` (or is not there) shows as CHANGED."""
    pattern = matcher(patterns)
    return _shown(old, pattern), _shown(new, pattern, old)


def _shown(value, pattern, old=_NOWHERE):
    """The one walk behind redact, unmasked and redact_pair. With `old`, each masked value is
    compared with the value at the same place in `old` (same keys, lists of the same length)."""
    compare = old is not _NOWHERE
    top = [None]
    todo = [(value, old, top, 0, 1, None)]
    while todo:
        item, before, parent, slot, depth, mark = todo.pop()
        if mark == _HIDE:
            parent[slot] = CHANGED if compare and not _same(item, before) else REDACTED
        elif isinstance(item, dict | list | tuple) and depth > MAX_JSON_DEPTH:
            parent[slot] = CUT
        elif isinstance(item, dict):
            copy = parent[slot] = {}
            olds = before if isinstance(before, dict) else {}
            labelled = pattern is not None and _labels_a_secret(item, pattern)
            for key, child in item.items():
                copy[key] = None  # its place, so the copy keeps the order of the keys
                hide = pattern is not None and (
                    pattern.search(str(key)) is not None or (labelled and _is_value_key(key))
                )
                todo.append(
                    (child, olds.get(key, _NOWHERE), copy, key, depth + 1, _HIDE if hide else None)
                )
        elif isinstance(item, list | tuple):
            copy = parent[slot] = [None] * len(item)
            aligned = isinstance(before, list | tuple) and len(before) == len(item)
            for n, child in enumerate(item):
                if mark == _PAIR and n == 1:
                    child_mark = _HIDE
                elif pattern is not None and _is_secret_pair(child, pattern):
                    child_mark = _PAIR
                else:
                    child_mark = None
                todo.append(
                    (child, before[n] if aligned else _NOWHERE, copy, n, depth + 1, child_mark)
                )
        elif isinstance(item, str) and pattern is not None:
            text = mask_text(item, pattern)
            if compare and text != item and not _same(item, before):
                text = text.replace(REDACTED, CHANGED)
            parent[slot] = text
        else:
            parent[slot] = item
    return top[0]


def _same(a, b) -> bool:
    try:
        return b is not _NOWHERE and a == b
    except RecursionError:  # two values deeper than the comparison can follow
        return False


def _labels_a_secret(item: dict, pattern) -> bool:
    """{"name": "Authorization", "value": …}: a key naming the value says it is a secret."""
    return any(
        isinstance(key, str)
        and key.lower() in NAME_KEYS
        and isinstance(label, str)
        and pattern.search(label) is not None
        for key, label in item.items()
    )


def _is_value_key(key) -> bool:
    return isinstance(key, str) and key.lower() == VALUE_KEY


def _is_secret_pair(item, pattern) -> bool:
    """["Authorization", "Bearer x"], an item of a list of header pairs."""
    return (
        isinstance(item, list | tuple)
        and len(item) == 2
        and isinstance(item[0], str)
        and pattern.search(item[0]) is not None
    )


# --- secrets inside text --------------------------------------------------------------------

_HEADER_LINE = re.compile(r"^([ \t]*([A-Za-z0-9_.-]+)[ \t]*:[ \t]*)(\S[^\r\n]*)", re.MULTILINE)
# "password": "x" in JSON text, 'token': 'x' in a repr, password="x" in code; the quoted value
# is bounded so that text with many unclosed quotes is not read to its end at each of them.
_QUOTED = re.compile(
    r"""(?P<q>["'])(?P<name>[^"'\\\r\n]{1,200})(?P=q)(?P<sep>[ \t]*[:=][ \t]*)"""
    r"""(?:(?P<vq>["'])(?P<value>(?:(?!(?P=vq))[^\\\r\n]|\\.){0,8192})(?P=vq)"""
    r"""|(?P<bare>[^\s"',;{\[}\])][^\s,;}\])]*))"""
)
_PARAMETER = re.compile(r"(?:(?<=[?&;])|^)([^\s=&?#;]+)=([^\s&#;]+)")
_URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.-]*://[^\s/?#@:]*:)([^\s/?#]+)(?=@)", re.IGNORECASE)
_BEARER = re.compile(r"\b(bearer[ \t]+)[A-Za-z0-9._~+/-]{8,}=*", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")


def mask_text(text: str, pattern) -> str:
    """`text` with the secrets it holds masked: a URL's password, sensitive query or form
    parameters, header lines and quoted keys (sensitive: `pattern` matches their name), bearer
    tokens and JWTs. Each rule runs only on text that could hold what it masks."""
    if ":" in text:
        text = _HEADER_LINE.sub(lambda m: m[1] + REDACTED if pattern.search(m[2]) else m[0], text)
    if ('"' in text or "'" in text) and (":" in text or "=" in text):
        text = _QUOTED.sub(lambda m: _quoted(m, pattern), text)
    if "=" in text:
        text = _PARAMETER.sub(
            lambda m: f"{m[1]}={REDACTED}" if pattern.search(m[1]) else m[0], text
        )
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(lambda m: m[1] + REDACTED, text)
    if len(text) >= 15:
        text = _BEARER.sub(lambda m: m[1] + REDACTED, text)
        if "eyJ" in text:
            text = _JWT.sub(REDACTED, text)
    return text


def _quoted(m: re.Match, pattern) -> str:
    if pattern.search(m["name"]) is None:
        return m[0]
    quote = m["vq"] or ""
    return f"{m['q']}{m['name']}{m['q']}{m['sep']}{quote}{REDACTED}{quote}"


# --- edits: masks put back ------------------------------------------------------------------


def restore_masked(new, original, path: str, patterns=None, *, may_replace: bool = True):
    """`new`, an edit of `original` as `redact` showed it, with each place left as shown put
    back to what the original holds there (a mask to the value it hid; text with a password
    masked in it to that text). Places are matched by the same keys and lists of the same
    lengths on the way; ValueError names a mask found anywhere else, and a value put back that
    would no longer be masked where the edit leaves it (its header renamed): a job must never
    receive a mask, and a hidden value never moves to where it shows.

    `may_replace` False (an editor who has not seen the masked values, `has_seen`): a masked
    value can be kept or removed, not replaced, so no outcome of an edit can depend on what it
    hides (that the payload is unchanged, a validator's verdict on a guess)."""
    pattern = matcher(patterns)
    shown = _shown(original, pattern)
    top = [None]
    restored = []  # the places a hidden value was put back: (steps, path)
    todo = [(new, original, shown, top, 0, path, ())]
    while todo:
        item, before, seen, parent, slot, where, steps = todo.pop()
        if _same(item, seen):
            parent[slot] = before
            if not _same(seen, before):
                restored.append((steps, where))
            continue
        if not may_replace and isinstance(seen, str) and not _same(seen, before):
            raise ValueError(
                f"{where} is masked: leave it as shown ({seen}) to keep its value, or remove "
                "it. Replacing a masked value takes seeing it first: Show masked values (needs "
                f"{REVEAL_PERMISSION}; the reveal is recorded)."
            )
        if isinstance(item, dict):
            copy = parent[slot] = {}
            olds = before if isinstance(before, dict) else {}
            seens = seen if isinstance(seen, dict) else {}
            for key, child in item.items():
                copy[key] = None
                todo.append(
                    (
                        child,
                        olds.get(key, _NOWHERE),
                        seens.get(key, _NOWHERE),
                        copy,
                        key,
                        f"{where}[{key!r}]",
                        (*steps, key),
                    )
                )
        elif isinstance(item, list):
            copy = parent[slot] = [None] * len(item)
            aligned = (
                isinstance(before, list)
                and isinstance(seen, list)
                and len(before) == len(seen) == len(item)
            )
            for n, child in enumerate(item):
                todo.append(
                    (
                        child,
                        before[n] if aligned else _NOWHERE,
                        seen[n] if aligned else _NOWHERE,
                        copy,
                        n,
                        f"{where}[{n}]",
                        (*steps, n),
                    )
                )
        elif isinstance(item, str) and REDACTED in item and not _same(item, before):
            raise ValueError(_misplaced(where, item))
        else:
            parent[slot] = item
    result = top[0]
    if restored:
        again = _shown(result, pattern)
        for steps, where in restored:
            if not _same(_at(again, steps), _at(new, steps)):
                raise ValueError(
                    f"{where} keeps a masked value, but where the edit puts it the value would "
                    "show (the name beside it changed): keep its name, or reveal the values to "
                    "edit it."
                )
    return result


def _misplaced(where: str, item: str) -> str:
    return (
        f"{where} {'is' if item == REDACTED else 'holds'} the mask {REDACTED}, not a value: "
        "the value it hides could not be matched to its place in the original (a masked value "
        "is kept only under its own key, with lists of the same length on the way). Reveal the "
        "values to edit it, or type a new value."
    )


def _at(value, steps):
    """What `value` holds at `steps` (keys and indexes from restore_masked), or _NOWHERE."""
    for step in steps:
        if not isinstance(value, dict | list):
            return _NOWHERE
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return _NOWHERE
    return value


REVEAL = "letter.reveal"  # the audit log's action of a reveal


def has_seen(user, letter) -> bool:
    """Whether `user` may see `letter`'s masked values and has: a reveal of it in the audit log
    (under their name, of the letter in its own database)."""
    from jobqueue.models import AuditEntry, AuditTarget

    if not (user.is_active and user.has_perm(REVEAL_PERMISSION)):
        return False
    database = _database_of(letter)
    entries = AuditTarget.objects.filter(kind="letter", ref=str(letter.pk)).values("entry")
    reveals = AuditEntry.objects.filter(
        pk__in=entries, action=REVEAL, actor=user.get_username()
    ).values_list("params", flat=True)
    return any(
        isinstance(params, dict) and params.get("database", "default") == database
        for params in reveals.iterator()
    )


def record_reveal(user, letter, *, via: str = "", channel: str = "console"):
    """Check that `user` may see `letter` unmasked and record that they did, in the default
    database's audit log (the console's, whichever queue database holds the letter, which the
    entry names): raise PermissionDenied, writing nothing, if not. Call it before showing the
    values. Returns the audit entry."""
    from jobqueue.store import audit

    if not (user.is_active and user.has_perm(REVEAL_PERMISSION)):
        raise PermissionDenied(f"{user} may not see unmasked payloads ({REVEAL_PERMISSION})")
    params = {"via": via or channel, "task_path": letter.task_path}
    database = _database_of(letter)
    if database != "default":
        params["database"] = database
    return audit.record(
        REVEAL,
        actor=user.get_username(),
        channel=channel,
        target_kind="letter",
        targets=[letter.pk],
        params=params,
        at=timezone.now(),
    )


def _database_of(letter) -> str:
    """The database a letter was read from (ids repeat across queue databases)."""
    return getattr(getattr(letter, "_state", None), "db", None) or "default"
