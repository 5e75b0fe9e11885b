"""Worker and relay event lines show up without a host LOGGING entry; a host's own wins."""

import logging

import pytest

from jobqueue.management import cli


@pytest.fixture
def bare_logger(monkeypatch):
    """A `jobqueue` logger as a host without LOGGING for it has: no handler, no level (and
    cut off from the root logger, which pytest itself gives a capturing handler)."""
    log = logging.Logger("redrive-test-bare")  # not registered: nothing else configures it
    log.propagate = False
    monkeypatch.setattr(cli, "EVENTS", log)
    return log


def test_event_lines_go_to_stderr_at_info_without_host_logging(bare_logger, capsys):
    cli.show_event_lines()
    bare_logger.info("event=job_done id=1")
    bare_logger.debug("event=claim_batch n=3")
    err = capsys.readouterr().err
    assert "INFO" in err and "event=job_done id=1" in err
    assert "claim_batch" not in err


def test_log_level_option_changes_what_shows(bare_logger, capsys):
    cli.show_event_lines("debug")
    bare_logger.debug("event=claim_batch n=3")
    assert "event=claim_batch n=3" in capsys.readouterr().err
    cli.show_event_lines("WARNING")
    bare_logger.info("event=job_done id=2")
    assert capsys.readouterr().err == ""


def test_a_hosts_own_handler_wins(bare_logger, capsys):
    records = []
    host = logging.Handler()
    host.emit = records.append
    bare_logger.addHandler(host)
    bare_logger.setLevel(logging.WARNING)
    cli.show_event_lines()
    bare_logger.info("event=job_done id=3")
    bare_logger.warning("event=job_failed id=4")
    assert [r.getMessage() for r in records] == ["event=job_failed id=4"]
    assert bare_logger.handlers == [host]
    assert capsys.readouterr().err == ""


def test_an_unknown_level_is_refused():
    with pytest.raises(KeyError):
        cli.show_event_lines("chatty")


@pytest.mark.parametrize("created", [1_700_000_000.0, 1_700_000_000.9995, 1_700_000_059.25])
@pytest.mark.parametrize("fmt", ["%(asctime)s %(levelname)s %(message)s", "%(message)s"])
def test_the_event_formatter_writes_what_logging_formatter_writes(created, fmt):
    from jobqueue.logfmt import Formatter

    ours, theirs = Formatter(fmt), logging.Formatter(fmt)
    for when in (created, created + 0.001, created + 1):  # same second, and the next one
        record = logging.LogRecord("jobqueue.worker", logging.INFO, "f", 1, "event=x", None, None)
        record.created, record.msecs = when, (when - int(when)) * 1000
        assert ours.format(record) == theirs.format(record)
    dated = Formatter("%(asctime)s", datefmt="%Y")
    assert dated.format(record) == logging.Formatter("%(asctime)s", datefmt="%Y").format(record)


def _logger_with(handler, name):
    log = logging.Logger(name)
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    return log


def test_lines_logged_together_write_what_a_record_per_line_writes():
    import io

    from jobqueue.logfmt import Formatter, log_lines

    fmt = "%(levelname)s %(name)s %(message)s [end]"
    together, apart = io.StringIO(), io.StringIO()
    for stream in (together, apart):
        handler = logging.StreamHandler(stream)
        handler.setFormatter(Formatter(fmt))
        stream.log = _logger_with(handler, "jobqueue.worker")
    lines = ["event=succeeded job_id=1 outcome=ok", 'event=succeeded job_id=2 key="a b"']
    log_lines(together.log, logging.INFO, lines)
    for line in lines:
        apart.log.info(line)
    assert together.getvalue() == apart.getvalue()
    assert together.getvalue().count("\n") == 2


def test_other_formatters_or_a_filter_get_a_record_per_line():
    from jobqueue.logfmt import Formatter, log_lines

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, record):
            self.records.append(record)

    plain = Keep()
    plain.setFormatter(Formatter("%(message)s"))  # not a stream handler: cannot be batched
    log_lines(_logger_with(plain, "a"), logging.INFO, ["x=1", "x=2", "x=3"])
    assert [r.getMessage() for r in plain.records] == ["x=1", "x=2", "x=3"]

    import io

    filtered = logging.StreamHandler(io.StringIO())
    filtered.setFormatter(Formatter("%(message)s"))
    filtered.addFilter(lambda record: "2" not in record.getMessage())
    log_lines(_logger_with(filtered, "b"), logging.INFO, ["x=1", "x=2", "x=3"])
    assert filtered.stream.getvalue() == "x=1\nx=3\n"


def test_a_field_with_control_characters_cannot_break_or_fake_a_line():
    """An error message or a class name is a task's text: a newline, a carriage return or an
    escape sequence in it would start a fake event line, or reach a terminal reading the log."""
    from jobqueue.logfmt import line_text, logfmt

    hostile = "line1\nevent=dead_lettered job_id=999\r\x1b[2J\x1b]0;title\x07\x85\x7f\tend"
    text = line_text("retried", error=hostile, task="ok")
    assert "\n" not in text and "\r" not in text
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)
    assert text.startswith("event=retried error=") and text.endswith(" task=ok")
    assert logfmt("a\x1bb") == '"a\\x1bb"' and logfmt("t\tt") == '"t\\tt"'
    assert logfmt("plain") == "plain"
