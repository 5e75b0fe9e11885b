import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tests.properties  # noqa: F401  (the Hypothesis profile, loaded before any test module)

BASE_DIR = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent

# The suite runs in parallel (pytest-xdist: -n in pyproject.toml's addopts). Each xdist worker
# has its own test databases (pytest-django appends its id, gw0, gw1 ..., to their names), and
# here its own REDRIVE_VAR_DIR, which the processes its tests start inherit; brokers' queue and
# key names and servers' ports are drawn per test (uuid, port 0) where a test makes them.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if XDIST_WORKER:
    import atexit
    import shutil
    import tempfile

    os.environ["REDRIVE_VAR_DIR"] = tempfile.mkdtemp(prefix=f"redrive-{XDIST_WORKER}-")
    atexit.register(shutil.rmtree, os.environ["REDRIVE_VAR_DIR"], ignore_errors=True)

# What the PgBouncer pass of .ci/run runs again (`-m engine`): the tests of the code that talks
# to the database in ways a transaction pooler changes — the store's claims, acks and fails, the
# worker, the relay, the listener, the chores' leader, the faults. A directory's tests are all
# of it; a test elsewhere says so with `pytestmark = pytest.mark.engine`. The console's pages and
# the API's reads go through the same store, and are not run a third time.
ENGINE_DIRS = {"jobqueue", "outbox", "faults"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.path)).resolve().relative_to(TESTS_DIR).parts
        if parts and parts[0] in ENGINE_DIRS:
            item.add_marker(pytest.mark.engine)


# Production refuses to start without a SECRET_KEY (config/secret_key.py) and the tests run with
# DEBUG off, so they bring a key of their own: in the environment for every process they start
# (workers, relays, qcluster), and in the settings pytest-django loaded before this file.
os.environ.setdefault("SECRET_KEY", "redrive-tests-only-" + "k3y" * 16)


# The suite's own connections go through a transaction pooler (.ci/run's PgBouncer pass sets
# REDRIVE_POOLER=transaction): a test that needs a session of its own (one backend to find or
# terminate, a session setting, its own pooler in front of a direct database) skips there.
POOLED = os.environ.get("REDRIVE_POOLER") == "transaction"


def needs_direct_session(reason: str):
    """Skip behind a transaction pooler, saying why the test needs a direct session."""
    return pytest.mark.skipif(POOLED, reason=f"needs a direct session: {reason}")


# A second queue database for the tests of several TASKS backends, each on its own database
# (tests/deadletters/test_multiple_databases.py); only tests that name it use it.
SECOND_DATABASE = "queues_b"


def pytest_configure(config):
    from django.conf import settings

    settings.SECRET_KEY = os.environ["SECRET_KEY"]
    if SECOND_DATABASE not in settings.DATABASES:
        settings.DATABASES[SECOND_DATABASE] = second_database(settings.DATABASES["default"])
        from django.db import connections

        connections.__dict__.pop("settings", None)  # read again, if read already
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        # Every command a test runs checks JSONField support on every database, which SQLite
        # answers with a query: in a test that may not touch queues_b, a connection object made
        # since the session warmed one up (another thread's, another context's) would be refused
        # it. The answer is the same for any file of this SQLite, so it is given once, here.
        import sqlite3

        from django.db.backends.sqlite3.features import DatabaseFeatures

        with sqlite3.connect(":memory:") as probe:
            probe.execute('SELECT JSON(\'{"a": "b"}\')')
        DatabaseFeatures.supports_json_field = True


def second_database(default: dict) -> dict:
    """The default database's settings for a second database beside it: SQLite, another file
    in the same directory; PostgreSQL, the same server, its name with "_b" after it."""
    second = {**default, "OPTIONS": dict(default.get("OPTIONS") or {})}
    test = dict(default.get("TEST") or {})
    if default["ENGINE"] == "django.db.backends.sqlite3":
        name = Path(default["NAME"])
        second["NAME"] = str(name.with_name(f"{name.stem}_b{name.suffix}"))
        if test.get("NAME"):
            test_name = Path(test["NAME"])
            test["NAME"] = str(test_name.with_name(f"{test_name.stem}_b{test_name.suffix}"))
    else:
        second["NAME"] = f"{default['NAME']}_b"
        test.pop("NAME", None)  # Django's own: test_<NAME>
    second["TEST"] = test
    return second


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's, then the second database's features read once: a system check run in a
    test that does not use that database (`run_checks()` looks at every alias) would otherwise
    query it to learn them, which the test's database guard refuses."""
    from django.db import connections

    if SECOND_DATABASE in connections:
        with django_db_blocker.unblock():
            connections[SECOND_DATABASE].features.supports_json_field  # noqa: B018
            connections[SECOND_DATABASE].close()
    listen_on_the_test_database(connections["default"].settings_dict["NAME"])


def listen_on_the_test_database(name: str) -> None:
    """Behind a transaction pooler the wake-up LISTEN goes through REDRIVE["LISTEN_DSN"], a
    direct connection string (.ci/run's PgBouncer pass gives one): it must name this xdist
    worker's test database, whatever database the string names, in this process and in the
    workers its tests start."""
    from django.conf import settings

    dsn = os.environ.get("REDRIVE_LISTEN_DSN", "")
    if not dsn or not isinstance(settings.REDRIVE.get("LISTEN_DSN"), str):
        return
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    dsn = make_conninfo(**{**conninfo_to_dict(dsn), "dbname": name})
    os.environ["REDRIVE_LISTEN_DSN"] = dsn
    settings.REDRIVE = {**settings.REDRIVE, "LISTEN_DSN": dsn}


def database_url(connection) -> str:
    """The URL of the test database, for worker subprocesses."""
    sd = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{sd['NAME']}"
    user = sd.get("USER") or "postgres"
    password = f":{sd['PASSWORD']}" if sd.get("PASSWORD") else ""
    host, port = sd.get("HOST") or "127.0.0.1", sd.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{sd['NAME']}"


def wait_until(predicate, timeout=30.0, interval=0.02, message="condition"):
    """Poll for an event another process signals (a file, a row); fail loudly on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class Processes:
    """Start real `manage.py <command>` processes (runworker, runrelay) against the test
    database, each with its own log file; any left running are killed at the end."""

    def __init__(self, tmp_path, command="runworker", env=None, log_prefix=None):
        from django.db import connection

        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(connection),
            "REDRIVE_TEST_SINK": str(tmp_path / "sink.log"),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.tmp_path = tmp_path
        self.command = command
        self.log_prefix = log_prefix or command
        self.procs: list[subprocess.Popen] = []

    def start(self, *args, command=None, env=None):
        command = command or self.command
        prefix = self.log_prefix if command == self.command else command
        log = open(self.tmp_path / f"{prefix}-{len(self.procs)}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "manage.py", command, *args],
            cwd=BASE_DIR,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        proc.log_path = log.name
        self.procs.append(proc)
        return proc

    def started(self, proc, timeout=120.0):
        """Wait until `proc` logs its start (event=…_started): a process's start-up (Django,
        the migrations check) is not what a fault test times, and on a loaded machine it alone
        can take most of a condition's 30 s."""
        log = Path(proc.log_path)
        wait_until(
            lambda: (
                re.search(r"event=\w+_started ", log.read_text(errors="replace"))
                or proc.poll() is not None
            ),
            timeout=timeout,
            message=f"{proc.args[2]} start",
        )
        assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
        return proc

    def run(self, *args, env=None, timeout=60):
        proc = self.start(*args, env=env)
        proc.wait(timeout=timeout)
        return proc

    def sink_lines(self):
        path = Path(self.env["REDRIVE_TEST_SINK"])
        return path.read_text().splitlines() if path.exists() else []

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                # Still running at the end (a test that failed waiting for it, most likely):
                # where its threads were, from its own stack dump (SIGUSR1), shown with the
                # failure as this teardown's output.
                proc.send_signal(signal.SIGUSR1)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)  # it does not exit on SIGUSR1: time for the dump
                proc.kill()
                proc.wait()
                lines = Path(proc.log_path).read_text(errors="replace").splitlines()
                print(f"--- {proc.log_path}, still running at teardown (last lines) ---")
                print("\n".join(lines[-120:]))


@pytest.fixture
def workers(tmp_path, transactional_db):
    pool = Processes(tmp_path, "runworker", log_prefix="worker")
    yield pool
    pool.stop_all()


class Burials(list):
    """(burial, the letter it wrote) for each death recorded through the one bury
    (jobqueue.store.dead_letters.bury) while a test runs."""

    def returned(self, letter) -> None:
        """The latest death was the replay of `letter`, and the one bury returned that very
        letter to pending (no second letter)."""
        assert self, "no death went through dead_letters.bury"
        burial, written = self[-1]
        replayed = burial.replayed
        assert replayed is not None, "the death was not recorded as a replay's"
        assert (replayed if isinstance(replayed, int) else replayed.pk) == letter.pk
        assert written is not None and written.pk == letter.pk
        assert written.state == "pending"


@pytest.fixture
def burials(monkeypatch) -> Burials:
    """Spy on the one bury: every source calls it as `dead_letters.bury`, so this sees them all."""
    from jobqueue.store import dead_letters

    seen, real = Burials(), dead_letters.bury

    def bury(burial, **options):
        written = real(burial, **options)
        seen.append((burial, written))
        return written

    monkeypatch.setattr(dead_letters, "bury", bury)
    return seen


@pytest.fixture(autouse=True)
def only_the_store_writes_the_queue():
    """tests/writes.py: a queue write from library code outside jobqueue/store fails the test,
    on the test's own connections and on those its threads open (an in-process worker's
    handlers and settler)."""
    from django.db import connections
    from django.db.backends.signals import connection_created

    from tests.writes import Guard

    guard = Guard()

    def watch(sender, connection, **kwargs):
        if guard not in connection.execute_wrappers:
            connection.execute_wrappers.append(guard)

    opened = [connections[alias] for alias in connections]
    for connection in opened:
        connection.execute_wrappers.append(guard)
    connection_created.connect(watch, weak=False)
    try:
        yield
    finally:
        connection_created.disconnect(watch)
        guard.active = False  # a thread's connection may outlive the test: it stops looking
        for connection in opened:
            if guard in connection.execute_wrappers:
                connection.execute_wrappers.remove(guard)
    assert not guard.found, "the queue written outside jobqueue/store:\n" + "\n".join(guard.found)
