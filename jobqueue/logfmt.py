"""Event lines in logfmt (event=… key=value …): greppable, parseable, one per event."""

import logging
import re
import time

_NEEDS_QUOTES = re.compile(r'[ "=\x00-\x1f\x7f-\x9f]').search


def control_escapes(keep: str = "") -> dict[int, str]:
    """A str.translate table writing each control character (C0, DEL, C1) but those in `keep`
    as a visible escape: newline, carriage return and tab by name, the rest by code. Text from
    tasks and brokers (an error message, a class's name) then cannot break a line, fake
    another, or reach a terminal as an escape sequence."""
    named = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
    return {
        c: named.get(c, f"\\x{c:02x}")
        for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))
        if chr(c) not in keep
    }


_CONTROL = control_escapes()


def logfmt(value) -> str:
    """A value for a key=value log line, quoted when it holds spaces, quotes, = or control
    characters (escaped).
    (Runs for every field of every job event: a compiled search, not a Python loop.)"""
    text = value if type(value) is str else str(value)
    if text and _NEEDS_QUOTES(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').translate(_CONTROL) + '"'


def line_text(event: str, **fields) -> str:
    """One logfmt line, greppable and parseable: event=… key=value …"""
    return " ".join(f"{k}={logfmt(v)}" for k, v in {"event": event, **fields}.items())


def log_line(log: logging.Logger, level: int, event: str, /, exc_info: bool = False, **fields):
    """Log one event line (line_text) at `level`; with `exc_info`, the exception in hand's
    traceback after it, or ` traceback=unprintable` when it cannot be formatted (a task's
    exception whose __str__ or chain raises: logging's own handler would raise then)."""
    if not log.isEnabledFor(level):
        return
    text = line_text(event, **fields)
    if not exc_info:
        log.log(level, text)
        return
    try:
        log.log(level, text, exc_info=True)
    except BaseException:  # noqa: BLE001 - see above
        log.log(level, text + " traceback=unprintable")


class Formatter(logging.Formatter):
    """logging.Formatter, with the default timestamp rendered once per second instead of once
    per line: a worker writes a line per job, and strftime was a quarter of each line's cost.
    The output is the same as logging.Formatter's for the same format string.

    It also writes a record carrying `event_lines` (log_lines below) as one formatted line per
    event, each with the record's prefix: what one record per line would have written.
    """

    def format(self, record):
        lines = getattr(record, "event_lines", None)
        if lines is None:
            return super().format(record)
        record.msg, record.args = _SLOT, None
        head, _, tail = super().format(record).partition(_SLOT)
        return "\n".join(f"{head}{line}{tail}" for line in lines)

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


_SLOT = "\x00event\x00"  # where each line goes in the prefix a batch record is formatted with
_PLAIN_HANDLERS = (logging.StreamHandler, logging.FileHandler)


def log_lines(log: logging.Logger, level: int, lines: list[str]) -> None:
    """Log each of `lines` (event lines, one per event) at `level`.

    Where every handler the records would reach writes to a stream through Formatter above,
    with no filter anywhere, the lines go out as one record: the same text (each line with its
    own timestamp, level and logger name), one record and one write instead of one per line,
    which at a line per job cost more than the job. Any other set-up gets a record per line.
    """
    if not lines or not log.isEnabledFor(level):
        return
    if not _batchable(log):
        for line in lines:
            log.log(level, line)
        return
    record = log.makeRecord(log.name, level, __file__, 0, lines[0], None, None, "log_lines")
    record.event_lines = lines
    log.handle(record)


def _batchable(log: logging.Logger) -> bool:
    if log.filters or log.disabled:
        return False
    found, current = False, log
    while current is not None:
        for handler in current.handlers:
            if (
                type(handler) not in _PLAIN_HANDLERS
                or handler.filters
                or not isinstance(handler.formatter, Formatter)
            ):
                return False
            found = True
        if not current.propagate:
            break
        current = current.parent
    return found  # none at all: logging's last resort, which is not ours
