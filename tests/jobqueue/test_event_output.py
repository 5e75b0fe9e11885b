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
