"""`manage.py demo` end to end: real workers produce dead letters the console shows; Ctrl-C
stops everything; `--fresh` starts from zero."""

import contextlib
import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

from deadletters.templatetags.console import ident, ident_html
from demo.management.commands.demo import die_with_parent
from tests.conftest import BASE_DIR, wait_until

RECEIPTS = "demo.tasks.send_receipt"

# The demo runs on its own embedded database whatever DATABASE_URL the suite has (a newcomer's
# first command): the same minutes again on PostgreSQL and through PgBouncer would test
# nothing new.
pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="the demo runs on its own SQLite database; the suite's SQLite pass covers it",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Demo:
    """`manage.py demo` in a session of its own (so its whole process tree can be killed), with
    the death signal set: if pytest itself dies (a timeout's os._exit), the demo stops too."""

    def __init__(self, var_dir: Path, *args, sigint_ignored=False, password="demo-pass-1"):
        self.port = free_port()
        self.var_dir = var_dir
        # A fresh machine: no database URL, no SECRET_KEY (the demo makes its own under var/).
        env = self.env = {
            k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECRET_KEY")
        }
        env.update(  # the embedded database, fast backoff
            REDRIVE_VAR_DIR=str(var_dir),
            REDRIVE_BACKOFF_BASE="0.05",
            REDRIVE_BACKOFF_CAP="0.2",
            DEMO_FLAKY_RATE="0",
            PYTHONUNBUFFERED="1",
        )
        die = die_with_parent()

        def preexec():
            if die is not None:
                die()
            if sigint_ignored:  # as a shell's background launch (`manage.py demo &`) does
                signal.signal(signal.SIGINT, signal.SIG_IGN)

        self.out = var_dir / f"demo-{self.port}.out"
        with open(self.out, "w") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "demo",
                    "--port",
                    str(self.port),
                    *((f"--password={password}",) if password is not None else ()),
                    "--payments",
                    "4",
                    *args,
                ],
                cwd=BASE_DIR,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=preexec,
            )

    def wait_started(self):
        wait_until(lambda: "Ctrl-C stops" in self.output(), timeout=60, message="demo start")

    def output(self) -> str:
        return self.out.read_text()

    def workers_log(self) -> str:
        return (self.var_dir / "demo-workers.log").read_text()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=60)

    def left_running(self) -> list[int]:
        return processes_with(self.var_dir)

    def kill_tree(self):
        """Teardown, whatever the test did: SIGKILL to the demo's process group, then to
        anything its children left (found by the var dir in their environment)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        # Its children get SIGTERM from the kernel when it dies; a short drain, then no mercy.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not self.left_running(), timeout=30, message="children exit")
        for pid in self.left_running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def demos(var_dir: Path):
    """Start demos with `start(*args)`; every one started is killed with its whole process
    tree on the way out, passed, failed or timed out (pytest-timeout's signal method fails
    the test in place, so fixture finalizers run)."""
    started = []

    def start(*args, **options):
        demo = Demo(var_dir, *args, **options)
        started.append(demo)  # before waiting: a demo that never starts is killed too
        demo.wait_started()
        return demo

    try:
        yield start
    finally:
        for demo in started:
            demo.kill_tree()


@pytest.fixture
def start_demo(tmp_path):
    with demos(tmp_path) as start:
        yield start


def logged_in_opener(base: str, username: str, password: str):
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    page = opener.open(f"{base}/accounts/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token}
    ).encode()
    opener.open(f"{base}/accounts/login/", data=form)
    return opener


def manage(demo: Demo, *argv) -> str:
    """A command's output against the demo's database (its var dir and key)."""
    return subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=BASE_DIR,
        env={**demo.env, "SECRET_KEY": (demo.var_dir / "secret_key").read_text().strip()},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def delivered(demo: Demo) -> list[str]:
    """The receipt sink's lines, one per delivered receipt."""
    return manage(demo, "fieldnotes", "receipts").splitlines()


def dead_receipts(opener, base: str) -> list[str]:
    """The ids of the receipts' dead letters, as the console lists them."""
    listing = f"{base}/deadletters/list/?" + urllib.parse.urlencode({"job_type": RECEIPTS})
    return re.findall(r'name="ids" value="(\d+)"', opener.open(listing).read().decode())


def processes_with(var_dir: Path) -> list[int]:
    """Pids whose environment names `var_dir` as theirs: what a demo left running (zombies,
    whose environment is gone, are not running)."""
    entry = f"REDRIVE_VAR_DIR={var_dir}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if entry in (proc / "environ").read_bytes().split(b"\0"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def test_demo_serves_dead_letters_from_its_workers_and_stops_cleanly(tmp_path, start_demo):
    demo = start_demo("--outage", "600", "--fresh")
    try:
        assert "operator / demo-pass-1" in demo.output()
        base = f"http://127.0.0.1:{demo.port}"
        opener = logged_in_opener(base, "operator", "demo-pass-1")

        def overview():
            return opener.open(f"{base}/deadletters/").read().decode()

        # Four receipts exhaust three attempts each through real backoff in real workers.
        wait_until(
            lambda: "demo.tasks.send_receipt" in overview(),
            timeout=90,
            message="receipt dead letters on the overview",
        )
        assert "demo.tasks.notify_webhook" in overview()  # the malformed endpoints
    finally:
        code = demo.stop()
    assert code == 0, demo.output()
    assert "Stopped." in demo.output()
    workers_log = (tmp_path / "demo-workers.log").read_text()
    # The workers started: they got the demo's key (without one they refuse to start).
    assert workers_log.count("event=worker_stopped") == 2
    # ...as many as the start-up line says (the qcluster beside them is named, not counted).
    assert "workers:   2 x runworker + qcluster" in demo.output()
    assert demo.left_running() == []
    key_file = tmp_path / "secret_key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text()
    assert len(key.strip()) >= 50

    again = start_demo("--outage", "0", "--fresh")
    try:
        assert "payments:  4 seeded now, 4 in all" in again.output()
        wait_until(lambda: len(delivered(again)) == 4, timeout=60, message="four receipts")
    finally:
        assert again.stop() == 0
    # A second run keeps the data and seeds payments of its own, whose receipts meet its outage.
    rerun = start_demo("--outage", "600")
    try:
        assert "payments:  4 seeded now, 8 in all" in rerun.output()
        assert "workflows:" not in rerun.output()  # the onboardings are seeded once
        base = f"http://127.0.0.1:{rerun.port}"
        opener = logged_in_opener(base, "operator", "demo-pass-1")
        wait_until(
            lambda: len(dead_receipts(opener, base)) == 4,
            timeout=90,
            message="the second run's four receipts dead",
        )
        assert len(delivered(rerun)) == 4  # the first run's, delivered once, untouched
    finally:
        assert rerun.stop() == 0
    assert key_file.read_text() == key  # made once, kept (--fresh empties only the database)


def test_the_demo_story_outage_then_replay_from_the_console_delivers_each_receipt_once(
    tmp_path, start_demo
):
    """The README's walk-through through the running demo: receipts die during a short outage,
    the operator replays them from the console after it, and each payment gets one receipt."""
    demo = start_demo("--outage", "8", "--fresh")
    base = f"http://127.0.0.1:{demo.port}"
    receipts = RECEIPTS
    try:
        opener = logged_in_opener(base, "operator", "demo-pass-1")
        listing = f"{base}/deadletters/list/?" + urllib.parse.urlencode({"job_type": receipts})
        wait_until(
            lambda: 'name="ids"' in opener.open(listing).read().decode(),
            timeout=60,
            message="receipt dead letters during the outage",
        )
        wait_until(lambda: "receipt service is back" in demo.output(), timeout=30, message="end")
        # The sign-in comes again after the news, last on the screen.
        after = demo.output().split("The receipt service is back", 1)[1]
        assert f"  console:   {base}/deadletters/\n" in after
        assert "  operator:  operator / demo-pass-1\n" in after
        assert "  viewer:    viewer / demo-pass-1\n" in after
        page = opener.open(listing).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = {"csrfmiddlewaretoken": token, "action": "replay", "select_all": "1"}
        confirm = opener.open(
            f"{base}/deadletters/preview/",
            data=urllib.parse.urlencode({**form, "job_type": receipts}).encode(),
        )
        assert "/selections/" in confirm.url
        confirm_page = confirm.read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', confirm_page).group(1)
        run = opener.open(
            confirm.url,
            data=urllib.parse.urlencode(
                {"csrfmiddlewaretoken": token, "reason": "receipt service is back"}
            ).encode(),
        )
        assert "/runs/" in run.url, run.read().decode()[:2000]

        wait_until(lambda: len(delivered(demo)) == 4, timeout=60, message="four receipts")
        assert len(set(delivered(demo))) == 4
        # The demo's schedule ticks in its workers, and the Schedules page shows it.
        assert "  schedule:  demo-receipt-tally tallies the receipts every 30 s" in demo.output()
        tally = wait_until(
            lambda: next(
                (
                    row
                    for row in json.loads(manage(demo, "schedules", "list", "--json"))
                    if row["name"] == "demo-receipt-tally" and row["last_state"] == "done"
                ),
                None,
            ),
            timeout=45,
            message="a tally done",
        )
        assert (tally["task"], tally["cron"], tally["overlap"]) == (
            "demo.tasks.tally_receipts",
            "* * * * * */30",
            False,
        )
        page = opener.open(f"{base}/deadletters/schedules/").read().decode()
        row = re.search(rf'<tr id="schedule-{tally["id"]}">(.*?)</tr>', page, re.S).group(1)
        assert "<td>demo-receipt-tally " in row
        assert f"<td>{ident('demo.tasks.tally_receipts')}</td>" in row
        job = opener.open(f"{base}/deadletters/jobs/{tally['last_job_id']}/").read().decode()
        assert ident_html("demo.tasks.tally_receipts") in job
        audit = opener.open(f"{base}/deadletters/audit/").read().decode()
        # The run's row, by its reason; its Operator cell (every page names who is logged in).
        row = re.search(r"<tr>((?!</tr>).)*>receipt service is back<.*?</tr>", audit, re.S)
        assert row and "<td>operator</td>" in row.group(0), audit
    finally:
        assert demo.stop() == 0


def started_tree(demo: Demo) -> set[int]:
    """The demo's children and theirs, once both workers (their signal handlers installed) and
    the qcluster's own processes are up."""
    wait_until(
        lambda: (
            demo.workers_log().count("event=worker_started") == 2
            and re.search(r"Q Cluster .* running\.", demo.workers_log())
        ),
        timeout=60,
        message="both workers and the qcluster running",
    )
    tree = set(demo.left_running()) - {demo.proc.pid}
    # Two workers, the qcluster, and at least its sentinel and pool.
    assert len(tree) >= 5, tree
    return tree


STOP_SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda signum: signum.name)
def test_a_signal_stops_the_demo_and_all_it_started_even_when_sigint_was_ignored(
    start_demo, signum
):
    # Started as `manage.py demo &` starts it: SIGINT ignored. `kill -INT` did nothing then.
    demo = start_demo("--outage", "0", "--fresh", sigint_ignored=True)
    tree = started_tree(demo)
    demo.proc.send_signal(signum)
    assert demo.proc.wait(timeout=60) == 0, demo.output()
    assert "Stopped." in demo.output()
    assert demo.left_running() == [], tree
    assert demo.workers_log().count("event=worker_stopped") == 2  # drained, not killed


def test_the_demo_killed_by_sigkill_takes_its_workers_and_qcluster_with_it(start_demo):
    demo = start_demo("--outage", "0", "--fresh")
    tree = started_tree(demo)
    os.kill(demo.proc.pid, signal.SIGKILL)  # the demo alone: no handler of its own runs
    assert demo.proc.wait(timeout=10) == -signal.SIGKILL
    wait_until(
        lambda: not demo.left_running(),
        timeout=60,
        message=f"the killed demo's processes {sorted(tree)} to exit",
    )
    assert demo.workers_log().count("event=worker_stopped") == 2  # told to stop: they drained


def test_demo_refuses_to_empty_a_server_database_and_a_bad_rate(tmp_path):
    def demo(*args, **env):
        return subprocess.run(
            [sys.executable, "manage.py", "demo", *args],
            cwd=BASE_DIR,
            env={**os.environ, "REDRIVE_VAR_DIR": str(tmp_path), **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    server = demo("--fresh", DATABASE_URL="postgres://postgres@127.0.0.1:1/precious")
    assert server.returncode == 2 and "will not empty" in server.stderr
    assert "Traceback" not in server.stderr
    rate = demo("--flaky-rate", "2")
    assert rate.returncode == 2 and "--flaky-rate must be between 0 and 1" in rate.stderr
    payments = demo("--payments", "-1")
    assert payments.returncode == 2 and "--payments must be 0 or more" in payments.stderr
    password = demo("--password", " ")
    assert password.returncode == 2 and "--password must not be empty" in password.stderr
    assert "Traceback" not in rate.stderr + payments.stderr + password.stderr
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def signed_in(base: str, username: str, password: str) -> bool:
    """Whether the console's overview opens for `username` with `password` (a refused login
    lands back on the login form)."""
    page = logged_in_opener(base, username, password).open(f"{base}/deadletters/")
    return "/accounts/login/" not in page.url and f"<span>{username}</span>" in page.read().decode()


def banner_password(demo: Demo, username: str) -> str:
    return re.search(rf"^  \w+: +{username} / (\S+)$", demo.output(), re.M).group(1)


def test_the_accounts_keep_their_passwords_across_runs_and_password_sets_both(tmp_path, start_demo):
    first = start_demo("--outage", "0", "--fresh", "--workers", "0", password=None)
    try:
        operator, viewer = banner_password(first, "operator"), banner_password(first, "viewer")
        assert operator != viewer and len(operator) >= 12
    finally:
        assert first.stop() == 0
    kept = tmp_path / "demo-passwords.json"
    assert kept.stat().st_mode & 0o777 == 0o600

    second = start_demo("--outage", "0", "--workers", "0", password=None)
    try:
        assert (banner_password(second, "operator"), banner_password(second, "viewer")) == (
            operator,
            viewer,
        )
        base = f"http://127.0.0.1:{second.port}"
        assert signed_in(base, "operator", operator) and signed_in(base, "viewer", viewer)
        assert not signed_in(base, "viewer", operator)
    finally:
        assert second.stop() == 0

    # One that starts with "-", as a generated one may: it is a password, not an option.
    chosen = start_demo("--outage", "0", "--fresh", "--workers", "0", password="-chosen-pass-7")
    try:
        base = f"http://127.0.0.1:{chosen.port}"
        assert banner_password(chosen, "operator") == banner_password(chosen, "viewer")
        assert banner_password(chosen, "operator") == "-chosen-pass-7"
        assert signed_in(base, "operator", "-chosen-pass-7")
        assert not signed_in(base, "operator", operator)
    finally:
        assert chosen.stop() == 0

    # --fresh empties the database, not the kept passwords: the accounts come back with them.
    later = start_demo("--outage", "0", "--fresh", "--workers", "0", password=None)
    try:
        assert banner_password(later, "viewer") == "-chosen-pass-7"
        assert signed_in(f"http://127.0.0.1:{later.port}", "viewer", "-chosen-pass-7")
    finally:
        assert later.stop() == 0


def test_the_request_log_shows_only_errors_unless_verbose(start_demo):
    quiet = start_demo("--outage", "0", "--fresh", "--workers", "0")
    base = f"http://127.0.0.1:{quiet.port}"
    try:
        assert "  requests:  only errors logged (--verbose: all)\n" in quiet.output()
        opener = logged_in_opener(base, "operator", "demo-pass-1")
        assert opener.open(f"{base}/deadletters/").status == 200
        with pytest.raises(urllib.error.HTTPError) as missing:
            opener.open(f"{base}/deadletters/no-such-page/")
        assert missing.value.code == 404
        wait_until(
            lambda: '"GET /deadletters/no-such-page/ HTTP/1.1" 404' in quiet.output(),
            message="the 404 logged",
        )
    finally:
        assert quiet.stop() == 0
    # Logged or not by the time the 404 was: the requests before it went unlogged.
    assert '"GET /deadletters/ HTTP/1.1"' not in quiet.output()
    assert '"POST /accounts/login/ HTTP/1.1"' not in quiet.output()

    verbose = start_demo("--outage", "0", "--workers", "0", "--verbose")
    base = f"http://127.0.0.1:{verbose.port}"
    try:
        assert "  requests:  every one logged\n" in verbose.output()
        logged_in_opener(base, "operator", "demo-pass-1").open(f"{base}/deadletters/")
        wait_until(
            lambda: '"GET /deadletters/ HTTP/1.1" 200' in verbose.output(),
            message="the overview's request logged",
        )
        assert '"POST /accounts/login/ HTTP/1.1" 302' in verbose.output()
    finally:
        assert verbose.stop() == 0
