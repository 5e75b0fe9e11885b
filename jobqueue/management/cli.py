"""What every management command shares about its arguments.

A refused argument is one line on stderr and exit status 2, before anything is printed or
written: argparse types here check ranges and lengths while parsing, and `usage_error` is the
one way a command refuses later (after looking something up). A reader that goes away
(`manage.py jobs | head -1`) ends the output quietly (status 141, as SIGPIPE), and any other
failed write to stdout or stderr (`> /dev/full`, an I/O error) with one line and status 1,
never a traceback. JSON is printed by `json_text`: non-ASCII as itself, controls escaped,
datetimes in ISO 8601. Under --json a command prints one document and nothing else on stdout:
a listing an array (`Command.write_json_rows`), a show an object; its notes go to stderr.
"""

import argparse
import contextlib
import datetime
import importlib
import json
import logging
import math
import os
import pkgutil
import re
import sys
import time

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from jobqueue.logfmt import Formatter, control_escapes, log_line
from jobqueue.loop import first_line, next_backoff
from jobqueue.models import WorkerRecord
from jobqueue.store.payloads import MAX_JSON_DEPTH, json_depth

# Rows a listing prints at most (beyond it, filter or use --json with a pager of your own).
MAX_LIST_LIMIT = 10_000
# Exit status of a command whose reader closed the pipe: what a shell reports for a tool killed
# by SIGPIPE (`seq 1000000 | head -1`), so `set -o pipefail` scripts see the usual value.
EXIT_PIPE_CLOSED = 128 + 13

# ASCII only: int() and float() also read "١٢" and "1_000", which no one types on purpose.
_INTEGER = re.compile(r"[+-]?[0-9]{1,30}", re.ASCII)
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,4})?", re.ASCII)


def usage_error(message) -> CommandError:
    """A refusal of what the operator typed: exit status 2, one line, no traceback."""
    return CommandError(" ".join(str(message).split()) or "invalid arguments", returncode=2)


def integer(low: int, high, what: str = "a whole number"):
    """An argparse type: an integer from `low` to `high` (a number, or a callable giving one
    when the command runs, for a bound read from settings)."""

    def parse(text: str) -> int:
        top = high() if callable(high) else high
        if not _INTEGER.fullmatch(text):
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
        value = int(text)
        if not low <= value <= top:
            raise argparse.ArgumentTypeError(f"must be between {low} and {top}, not {text}")
        return value

    return parse


def number(low: float, high: float, *, above_low: bool = False, unit: str = ""):
    """An argparse type: a finite decimal number from `low` (excluded with `above_low`) to
    `high`."""
    unit = f" {unit}" if unit else ""

    def parse(text: str) -> float:
        if not _NUMBER.fullmatch(text):
            raise argparse.ArgumentTypeError(
                f"must be a number{' of' + unit if unit else ''}, not {text!r}"
            )
        value = float(text)
        too_low = value <= low if above_low else value < low
        if not math.isfinite(value) or too_low or value > high:
            bounds = (
                f"more than {_plain(low)} and at most {_plain(high)}"
                if above_low
                else f"between {_plain(low)} and {_plain(high)}"
            )
            raise argparse.ArgumentTypeError(f"must be {bounds}{unit}, not {text}")
        return value

    return parse


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def text(max_length: int | None = None, *, empty: bool = False):
    """An argparse type: a string that fits a column of `max_length` characters and, unless
    `empty`, holds more than blanks."""

    def parse(value: str) -> str:
        if not empty and not value.strip():
            raise argparse.ArgumentTypeError("may not be empty")
        if max_length is not None and len(value) > max_length:
            raise argparse.ArgumentTypeError(
                f"must be at most {max_length} characters, not {len(value)}"
            )
        return value

    return parse


def column(model, field: str, *, empty: bool = False):
    """`text` bounded by the model field's max_length: longer values are a DataError on
    PostgreSQL and silently stored whole on SQLite."""
    return text(model._meta.get_field(field).max_length, empty=empty)


def unusable(arg: str) -> str | None:
    """Why a string cannot be an argument at all, or None. A real argv never holds NUL, but
    call_command can; undecodable bytes arrive as lone surrogates that no database or terminal
    encodes."""
    if "\x00" in arg:
        return "arguments may not contain NUL characters"
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        return f"argument {arg[:40]!a} is not valid UTF-8"
    return None


class CliParser(CommandParser):
    """Errors in one line with status 2, from the command line and from call_command alike
    (Django prints the whole usage and, in call_command, uses status 1)."""

    def parse_known_args(self, args=None, namespace=None):
        for arg in args or ():
            if isinstance(arg, str) and (problem := unusable(arg)):
                self.error(problem)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        message = " ".join(message.split())
        if self.called_from_command_line:
            self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
        raise usage_error(message)

    def _print_message(self, message, file=None):
        # argparse's own ignores a failed write (--help > /dev/full would say nothing, status 0).
        file = file or sys.stderr
        if message:
            try:
                file.write(message)
            except OSError as exc:
                name = "standard output" if file is sys.stdout else "standard error"
                raise OutputFailed(name, exc) from exc


class OutputFailed(Exception):
    """Writing the command's stdout or stderr failed: its reader went away (EPIPE: a pager
    quit, `| head`), the disk is full (ENOSPC, `> /dev/full`), an I/O error (EIO)."""

    def __init__(self, stream: str, error: OSError):
        super().__init__(f"cannot write to {stream}: {error.strerror or error}")
        self.stream = stream
        self.closed = isinstance(error, BrokenPipeError)


# What a command prints comes partly from tasks and brokers (error messages, class names,
# payloads): its control characters, but for newline and tab, are shown as escapes.
_TERMINAL_SAFE = control_escapes(keep="\n\t")


def terminal_safe(text: str) -> str:
    return text.translate(_TERMINAL_SAFE)


def one_line(text: str) -> str:
    """A listing's row: a newline in a field (a task's name, an error's class) must not start
    what reads as another row."""
    return text.replace("\n", "\\n")


# Characters JSON leaves as they are with ensure_ascii=False that a command escapes anyway, as
# JSON escapes (so a --json line stays JSON): DEL and C1 controls (C0 are JSON's own), the line
# and paragraph separators (where str.splitlines() ends a line), and lone surrogates, which no
# terminal encoding can write.
_JSON_ESCAPED = re.compile(r"[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def json_text(value, *, indent: int | None = None) -> str:
    """`value` as the commands print JSON: non-ASCII text as itself, control characters
    escaped, datetimes in ISO 8601. A value nested deeper than the store's limit (a row written
    by hand) is printed on one line, not indented level by level."""
    if indent is not None and json_depth(value) > MAX_JSON_DEPTH:
        indent = None
    text = json.dumps(value, default=_json_default, ensure_ascii=False, indent=indent)
    return _JSON_ESCAPED.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def _json_default(value):
    # str() of a datetime is "2026-12-02 14:00:00+00:00", which not every ISO 8601 reader takes.
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


# A value's summary names at most this many of its keys, each cut to this many characters.
SUMMARY_KEYS = 10
SUMMARY_KEY_CHARS = 40


def summary(value) -> dict | None:
    """A stored value's shape (type, keys, size), none of its values: what `workflows show`
    prints of a step's result and `jobs show` of a job's arguments, as this app has no
    masking of its own (deadletters.redaction is the console's)."""
    if value is None:
        return None
    size = len(json_text(value).encode())
    if isinstance(value, dict):
        keys = [str(k)[:SUMMARY_KEY_CHARS] for k in list(value)[:SUMMARY_KEYS]]
        return {"type": "object", "keys": keys, "key_count": len(value), "bytes": size}
    if isinstance(value, list):
        return {"type": "array", "items": len(value), "bytes": size}
    kind = {str: "string", bool: "boolean"}.get(type(value), "number")
    return {"type": kind, "bytes": size}


def described(s: dict | None) -> str:
    """A `summary` as a phrase: object {'a', 'b'} (17 bytes)."""
    if s is None:
        return "null"
    if s["type"] == "object":
        more = s["key_count"] - len(s["keys"])
        keys = ", ".join(repr(k) for k in s["keys"]) + (f", … {more} more" if more else "")
        return f"object {{{keys}}} ({s['bytes']} bytes)"
    if s["type"] == "array":
        return f"array of {s['items']} ({s['bytes']} bytes)"
    return f"{s['type']} ({s['bytes']} bytes)"


class PipeAwareOutput(OutputWrapper):
    """A command's stdout or stderr: control characters escaped, text its encoding cannot
    write (a Latin-1 terminal) backslash-escaped, and a failed write OutputFailed."""

    def __init__(self, out, name: str = "standard output", **kwargs):
        super().__init__(out, **kwargs)
        self.name = name

    def write(self, msg="", *args, **kwargs):
        msg = terminal_safe(msg)
        try:
            try:
                super().write(msg, *args, **kwargs)
            except UnicodeEncodeError:
                encoding = getattr(self._out, "encoding", None) or "utf-8"
                safe = msg.encode(encoding, "backslashreplace").decode(encoding)
                super().write(safe, *args, **kwargs)
        except OSError as exc:
            raise OutputFailed(self.name, exc) from exc

    def write_data(self, data: str):
        """A file's bytes sent to stdout (an export to `-`): for a pipe or a file, as they are
        (a CSV's line endings are \r\n; its fields are quoted by the format), in UTF-8 as
        the file would be."""
        try:
            binary = getattr(self._out, "buffer", None)
            if binary is None:
                self._out.write(data)
            else:
                self._out.flush()
                binary.write(data.encode("utf-8"))
        except OSError as exc:
            raise OutputFailed(self.name, exc) from exc

    def flush(self):
        try:
            self._out.flush()
        except OSError as exc:
            raise OutputFailed(self.name, exc) from exc
        except ValueError:  # closed already
            pass


def _silence(stream) -> None:
    """Point a standard stream that failed at /dev/null, so the interpreter's flush at exit
    (of what is still buffered) does not fail again with an "Exception ignored" report."""
    if stream in (sys.__stdout__, sys.__stderr__) and stream is not None:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class Command(BaseCommand):
    """Base of our commands: CliParser for arguments, and a failed write to stdout or stderr
    (a closed pipe, a full disk) ends the command with one line and a non-zero status."""

    def __init__(self, stdout=None, stderr=None, no_color=False, force_color=False):
        super().__init__(stdout, stderr, no_color, force_color)
        self.stdout = PipeAwareOutput(stdout or sys.stdout)
        self._set_stderr(stderr or sys.stderr)

    def _set_stderr(self, out):
        self.stderr = PipeAwareOutput(out, "standard error")
        self.stderr.style_func = self.style.ERROR  # as Django's own stderr

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django builds a CommandParser itself; CliParser adds no state, only how it reports
        # errors, so retyping the parser (and any sub-command parsers) after the fact is safe.
        for each in _with_subparsers(parser):
            each.__class__ = CliParser
        return parser

    def write_json_rows(self, rows):
        """A listing under --json: one JSON array, one row to a line, written as the rows come
        (a reader that goes away, `| head`, stops the command before it reads them all)."""
        first = True
        for row in rows:
            self.stdout.write(("[" if first else ",") + "\n" + json_text(row), ending="")
            first = False
        self.stdout.write("[]" if first else "\n]")

    def execute(self, *args, **options):
        if options.get("stdout"):
            self.stdout = PipeAwareOutput(options.pop("stdout"))
        if options.get("stderr"):
            self._set_stderr(options.pop("stderr"))
        return super().execute(*args, **options)

    def run_from_argv(self, argv):
        try:
            try:
                super().run_from_argv(argv)
            finally:
                # Inside the try: a short output (or --help's) is only written here.
                self.stdout.flush()
                self.stderr.flush()
        except OutputFailed as failed:
            out, err = self.stdout._out, self.stderr._out
            _silence(out if failed.stream == self.stdout.name else err)
            if failed.closed and failed.stream == self.stdout.name:
                # What a shell reports for a tool killed by SIGPIPE (`seq 1000000 | head -1`),
                # quietly, as such a tool ends.
                sys.exit(EXIT_PIPE_CLOSED)
            try:
                prog = " ".join([os.path.basename(argv[0]), *argv[1:2]])
                err.write(f"{prog}: error: {failed}\n")
                err.flush()
            except (OSError, ValueError):
                _silence(err)
            sys.exit(EXIT_PIPE_CLOSED if failed.closed else 1)


def _with_subparsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _with_subparsers(sub)


def operator_name(value: str) -> str:
    """An argparse type: a username as the user model bounds it (--operator)."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    return text(User._meta.get_field(User.USERNAME_FIELD).max_length)(value)


def add_audit_arguments(parser, permission: str | None = None):
    """--reason and --operator, both required: who an audited action is done for, and why."""
    parser.add_argument("--reason", type=text(), required=True, help="Why (kept in the audit log).")
    needs = f"; needs {permission}" if permission else ""
    parser.add_argument(
        "--operator",
        type=operator_name,
        required=True,
        help=f"Username the audit names{needs}.",
    )


def operator(username: str, *permissions: str):
    """The active user an audited command acts for, holding every one of `permissions`; a
    usage error naming the first one missing otherwise."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    try:
        user = User.objects.get(**{User.USERNAME_FIELD: username})
    except User.DoesNotExist:
        raise usage_error(f"No user {username!r}") from None
    if not user.is_active:
        raise usage_error(f"{username} is not an active user.")
    missing = [p for p in permissions if not user.has_perm(p)]
    if missing:
        raise usage_error(f"{username} lacks {missing[0]}.")
    return user


# The command every operator action is carried out by: the console app's `manage.py act`, over
# the one registry of actions (deadletters.actions). Found by name when a command runs, never
# imported: the engine does not import the console (docs/architecture.md, "The engine's commands
# that act are aliases of `act`").
ACT = "act"


def act_option(name: str, value) -> str:
    """An option of `act` with its value in one argument (`--queue=-x` stays a value)."""
    return f"--{name}={value}"


def act(command: BaseCommand, action: str, *argv: str, stdout=None) -> None:
    """Carry out the registry's action `action` exactly as `manage.py act ACTION ARGV...` does:
    the same permission check, validation, messages, audit entry and `--json` outcome, written
    to `command`'s stdout (or `stdout`). Refusals are `act`'s (status 2, one line). Without the
    console app there is no registry: a usage error naming the `act` command it would be."""
    from django.core.management import call_command, get_commands

    if ACT not in get_commands():
        raise usage_error(
            f"this is `manage.py act {action}`, an operator action of the console app's "
            "registry; add 'deadletters' to INSTALLED_APPS to carry it out from the command line"
        )
    call_command(
        ACT,
        action,
        *argv,
        stdout=stdout if stdout is not None else getattr(command.stdout, "_out", command.stdout),
        stderr=getattr(command.stderr, "_out", command.stderr),
    )


def add_act_arguments(parser, action: str, *, json: bool = True):
    """--reason and --operator (as `act` takes them) and --json (the outcome as `act --json`
    prints it) of a command that is an alias of the `act` action `action`."""
    parser.add_argument("--reason", type=text(), required=True, help="Why (kept in the audit log).")
    parser.add_argument(
        "--operator",
        type=operator_name,
        required=True,
        help=f"Username it is done and audited as; their permissions apply (`manage.py {ACT} "
        f"list` names those {action} needs).",
    )
    if json:
        parser.add_argument(
            "--json",
            action="store_true",
            help="The outcome as one JSON object, as `manage.py act --json` prints it.",
        )


def more_rows(count: int) -> str:
    """The line a listing ends with when it stopped at its limit."""
    return f"… {count} more; use --limit"


# --- the long-running commands (runworker, runrelay) ------------------------------------

# The logger of every event line (worker, relay, store).
EVENTS = logging.getLogger("jobqueue")


def show_event_lines(level: str | int | None = None) -> logging.Logger:
    """Make the worker's and relay's event lines visible, as other queues' worker commands do.

    A host that configured logging for `jobqueue` (or the root logger) keeps its configuration,
    except for an explicit `level` (the commands' --log-level). Otherwise, as under Django's
    default LOGGING, lines go to stderr at INFO: a worker whose events vanish is a silent
    failure."""
    if level is not None and not isinstance(level, int):
        level = logging.getLevelNamesMapping()[str(level).upper()]
    logger = EVENTS
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    if level is not None:
        logger.setLevel(level)
    return logger


def add_log_level_argument(parser):
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        default=None,
        help="Level of the event lines (default INFO, or what the project's LOGGING sets).",
    )


# Bounds of the worker's and the relay's options: beyond them a value is a typo (a week-long
# lease, a thousand handler threads each holding a database connection) or overflows.
RELAY_SUFFIX = ":relay"
LEASE = number(0, 7 * 86400, above_low=True, unit="seconds")
POLL = number(0.01, 3600, unit="seconds")
PROCESS_ID = text(WorkerRecord._meta.get_field("worker_id").max_length - len(RELAY_SUFFIX))


def wait_for_database(using: str = DEFAULT_DB_ALIAS):
    """A worker started while the database is down or restarting waits for it (saying so)
    instead of dying with a traceback: process managers start workers and databases in any
    order."""
    delay = 0.0
    while True:
        try:
            ensure_migrated(using=using)
            return
        except OperationalError as exc:
            delay = next_backoff(delay)
            log_line(
                logging.getLogger("jobqueue.worker"), logging.WARNING, "database_unavailable",
                error=first_line(exc), retry_in=f"{delay:.1f}s",
            )  # fmt: skip
            connections[using].close()
            time.sleep(delay)


def ensure_migrated(app_labels=("jobqueue",), *, using: str = DEFAULT_DB_ALIAS):
    """Refuse to start on a database missing the queue's migrations rather than retry a missing
    table forever. The queue's migration files are compared by name with django_migrations:
    building every installed app's migration graph cost a worker's start more than its claims."""
    applied = MigrationRecorder(connections[using]).applied_migrations()
    missing = []
    for label in app_labels:
        module_name, _ = MigrationLoader.migrations_module(label)
        if module_name is None:  # MIGRATION_MODULES turned them off
            continue
        path = importlib.import_module(module_name).__path__
        on_disk = sorted(
            name for _, name, is_package in pkgutil.iter_modules(path) if not is_package
        )
        missing += [f"{label}.{name}" for name in on_disk if (label, name) not in applied]
    if missing:
        option = "" if using == DEFAULT_DB_ALIAS else f" --database {using}"
        raise CommandError(
            f"the database has unapplied migrations ({', '.join(missing[:3])}...): "
            f"run `manage.py migrate{option}` first"
        )


def add_loop_arguments(parser, *, defaults: str, id_dest: str, id_help: str):
    """The options every long-running command shares: --log-level, --lease, --poll and --id
    (`defaults` says where the unset ones come from)."""
    add_log_level_argument(parser)
    parser.add_argument(
        "--lease",
        type=LEASE,
        default=None,
        metavar="SECONDS",
        help=f"Lease length of each claim (default {defaults}).",
    )
    parser.add_argument(
        "--poll",
        type=POLL,
        default=None,
        metavar="SECONDS",
        help=f"Polling interval when idle (default {defaults}).",
    )
    parser.add_argument("--id", dest=id_dest, type=PROCESS_ID, default=None, help=id_help)
