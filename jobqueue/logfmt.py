"""Event lines in logfmt (event=… key=value …): greppable, parseable, one per event."""

import logging
import re
import time

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


class Formatter(logging.Formatter):
    """logging.Formatter, with the default timestamp rendered once per second instead of once
    per line: a worker writes a line per job, and strftime was a quarter of each line's cost.
    The output is the same as logging.Formatter's for the same format string."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record, datefmt=None):
        if datefmt or not self.default_msec_format:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        cached = self._second  # one read: another thread may replace it meanwhile
        if cached[0] != second:
            cached = (second, time.strftime(self.default_time_format, self.converter(second)))
            self._second = cached
        return self.default_msec_format % (cached[1], record.msecs)
