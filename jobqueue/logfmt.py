"""Event lines in logfmt (event=… key=value …): greppable, parseable, one per event."""

import logging
import re

_NEEDS_QUOTES = re.compile(r'[ "=\n]').search


def logfmt(value) -> str:
    """A value for a key=value log line, quoted when it holds spaces, quotes, = or newlines.
    (Runs for every field of every job event: a compiled search, not a Python loop.)"""
    text = value if type(value) is str else str(value)
    if text and _NEEDS_QUOTES(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def log_line(log: logging.Logger, level: int, event: str, **fields):
    """One logfmt line, greppable and parseable: event=… key=value …"""
    if log.isEnabledFor(level):
        log.log(level, " ".join(f"{k}={logfmt(v)}" for k, v in {"event": event, **fields}.items()))
