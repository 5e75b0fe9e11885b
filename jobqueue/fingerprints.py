"""Error fingerprints: one short key per cause of failure, so a console can group a million dead
letters into the handful of errors behind them.

A fingerprint hashes three things:
- the error's class path;
- its message with what varies from one failure to the next replaced by a placeholder: UUIDs,
  timestamps, hex strings and addresses, e-mail addresses, URLs' queries, quoted values and
  numbers (so "order 7 not found" and "order 8 not found" are one error, "order not found" and
  "card declined" two);
- the innermost frame of the traceback that is the project's own code (not the standard library
  or an installed package), as its file's last two path parts and the function: where in our
  code it broke, stable across deploys that move lines or directories.

Written with the dead letter (jobqueue.store.dead_letters.bury), and by a migration for
letters written before there were fingerprints.
"""

from __future__ import annotations

import hashlib
import re
import sysconfig

LENGTH = 16  # hex characters: 64 bits, no collision among any real set of causes

_PLACEHOLDERS = [
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
        ),
        "<time>",
    ),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), "<email>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I), "<hex>"),
    (re.compile(r"\?[^\s'\"]*"), "?<query>"),
    (re.compile(r"'(?:[^'\\]|\\.){0,200}'|\"(?:[^\"\\]|\\.){0,200}\""), "<str>"),
    (re.compile(r"(?<![A-Za-z_<])[-+]?\d+(?:\.\d+)*"), "<n>"),
    # Identifiers with a number in them (job_123, tok_9f8e7d): the number is the instance.
    (re.compile(r"\b([A-Za-z]+_)\w*\d\w*\b"), r"\1<id>"),
]
_SPACE = re.compile(r"\s+")
MAX_MESSAGE = 2_000  # the rest of a very long message adds nothing to which error it is

# Indented by spaces or tabs only: a \s* would run over every following newline from each line
# start, quadratic in a traceback of blank lines.
_FRAME = re.compile(r'^[ \t]*File "(?P<path>[^"]+)", line \d+, in (?P<func>\S+)', re.M)


def normalized_message(message: str) -> str:
    """The message with its volatile parts replaced, whitespace collapsed."""
    text = message[:MAX_MESSAGE]
    for pattern, placeholder in _PLACEHOLDERS:
        text = pattern.sub(placeholder, text)
    return _SPACE.sub(" ", text).strip()


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {
        paths.get("stdlib"),
        paths.get("platstdlib"),
        paths.get("purelib"),
        paths.get("platlib"),
    }
    return tuple(sorted(root for root in roots if root))


_LIBRARY_ROOTS = _library_roots()
_LIBRARY_MARKERS = ("site-packages", "dist-packages", "<frozen ", "<string>")
# Another interpreter's standard library (the traceback may come from another host).
_STDLIB = re.compile(r"/lib/python\d+\.\d+/(?!site-packages|dist-packages)")


def _is_library(path: str) -> bool:
    return (
        path.startswith(_LIBRARY_ROOTS)
        or any(mark in path for mark in _LIBRARY_MARKERS)
        or _STDLIB.search(path) is not None
    )


def project_frame(traceback: str) -> str:
    """`parent/file.py:function` of the innermost frame in the project's own code, or of the
    innermost frame at all when none is (an error raised inside a library called from a
    frame we do not have); "" without a traceback."""
    frames = [(m["path"], m["func"]) for m in _FRAME.finditer(traceback or "")]
    if not frames:
        return ""
    ours = [frame for frame in frames if not _is_library(frame[0])]
    path, func = (ours or frames)[-1]
    parts = path.replace("\\", "/").rsplit("/", 2)
    return f"{'/'.join(parts[-2:])}:{func}"


def fingerprint(error_class: str, message: str, traceback: str = "") -> str:
    """The fingerprint of one failure (16 hex characters)."""
    key = "\x1f".join(
        [error_class or "", normalized_message(message or ""), project_frame(traceback)]
    )
    return hashlib.blake2b(
        key.encode("utf-8", "backslashreplace"), digest_size=LENGTH // 2
    ).hexdigest()


__all__ = ["LENGTH", "fingerprint", "normalized_message", "project_frame"]
