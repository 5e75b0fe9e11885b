"""`manage.py demo`: the Field Notes scenario with real workers, the console and an outage."""

import contextlib
import ctypes
import io
import json
import os
import secrets
import signal
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.core.servers.basehttp import WSGIRequestHandler, WSGIServer
from django.core.wsgi import get_wsgi_application
from django.db import connections

from config import secret_key
from deadletters import django_q2_bridge as q2_bridge
from demo import onboarding, periodic, services
from demo.models import Payment
from jobqueue import schedules
from jobqueue.models import Workflow

ACCOUNTS = (("operator", "operator"), ("viewer", "viewer"))
PASSWORDS_FILE = "demo-passwords.json"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_GRACE = 20.0  # seconds the children get to drain before they are killed


def stop_on_signals():
    """Ctrl-C, a process manager's SIGTERM and a closed terminal's SIGHUP each stop the demo
    (KeyboardInterrupt in the main thread), installed explicitly: a shell's background launch
    (`manage.py demo &`) starts us with SIGINT ignored, and Python leaves an ignored SIGINT
    ignored, so `kill -INT` did nothing. A SIGHUP ignored at start (nohup) stays ignored: that
    is what nohup asks for."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        signal.signal(signum, signal.default_int_handler)


def die_with_parent():
    """A child's preexec_fn: on Linux, the child gets SIGTERM when its parent (the demo) dies,
    however it dies. SIGKILL runs none of the demo's code, and a child in a session of its own
    (so that a terminal's Ctrl-C reaches only the demo) would otherwise work on alone. SIGTERM
    rather than SIGKILL: a worker drains and gives back its leases, and the qcluster stops the
    processes it forked itself (its sentinel, pusher, monitor and pool: the death signal is not
    inherited, and they do not watch their parent). The kernel sends it when the *thread* that
    started the child ends: the demo starts its children from its main thread, which lives as
    long as it does. None where prctl is missing (not Linux): there the demo's own stop is all.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return None
    parent = os.getpid()

    def preexec():
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the death signal was set
            os._exit(1)

    return preexec


class Command(BaseCommand):
    help = "Run the Field Notes demo: real workers, the console, and a receipt outage."
    # The checks refuse to start without a SECRET_KEY; handle() makes the demo's own first.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--password",
            default=None,
            help="Password for both demo accounts, kept for later runs (default: one generated "
            "per account on the first run and kept in var/demo-passwords.json).",
        )
        parser.add_argument(
            "--outage",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="How long the receipt service is down from the start (default 60).",
        )
        parser.add_argument(
            "--payments",
            type=int,
            default=24,
            help="Payments seeded by this run, whose receipts meet its outage (default 24).",
        )
        parser.add_argument("--workers", type=int, default=2, help="Worker processes (default 2).")
        parser.add_argument(
            "--flaky-rate",
            type=float,
            default=None,
            metavar="P",
            help="Share of search-index refreshes that fail transiently and retry (default 0.3).",
        )
        parser.add_argument(
            "--fresh", action="store_true", help="Start from an empty (SQLite) database."
        )
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="Log every request (by default only errors: the console polls every second).",
        )

    def handle(self, *args, **opts):
        rate = opts["flaky_rate"]
        if rate is not None and not 0 <= rate <= 1:
            raise CommandError("--flaky-rate must be between 0 and 1", returncode=2)
        if opts["payments"] < 0:
            raise CommandError("--payments must be 0 or more", returncode=2)
        if opts["password"] is not None and not opts["password"].strip():
            raise CommandError("--password must not be empty", returncode=2)
        self.use_own_secret_key()
        self.check()
        if rate is not None:
            os.environ["DEMO_FLAKY_RATE"] = str(rate)  # read by the task in the worker processes
        if opts["fresh"]:
            self.wipe()
        call_command("migrate", verbosity=0)
        passwords = self.accounts(opts["password"])
        # The onboardings once per database; payments on every run, for this run's outage.
        first = not (Payment.objects.exists() or Workflow.objects.exists())
        workflows = onboarding.seed() if first else []
        seeded = len(services.seed(payments=opts["payments"]))
        periodic.declare()
        schedules.sync()
        connections.close_all()

        # Bind first: a port in use is a clear error before anything else starts.
        try:
            server = DemoServer((opts["host"], opts["port"]), DemoRequestHandler)
        except OSError as exc:
            raise CommandError(f"cannot listen on {opts['host']}:{opts['port']}: {exc}") from exc
        server.log_requests = opts["verbose"]
        server.set_app(StaticFilesHandler(get_wsgi_application()))
        log_path = Path(settings.VAR_DIR) / "demo-workers.log"
        workers: list[subprocess.Popen] = []
        try:
            stop_on_signals()
            # The outage is on record before any worker can take a receipt.
            outage = services.start_outage("receipts", opts["outage"]) if opts["outage"] else None
            self.start_workers(workers, opts["workers"], log_path)
            runworkers = len(workers)  # the qcluster joins the list (to be stopped), not the count
            if q2_bridge.enabled():
                self.start_qcluster(workers, log_path)
            self.announce(opts, passwords, seeded, workflows, runworkers, log_path, outage)
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            try:
                server.server_close()
            finally:
                self.stop_workers(workers)

    def use_own_secret_key(self):
        """Without SECRET_KEY in the environment, the demo's own: random, made once, kept in
        var/secret_key (mode 0600), used by this process (its web server) and handed to the
        workers and the qcluster it starts through their environment."""
        if os.environ.get("SECRET_KEY"):
            return
        key = secret_key.load_or_create(Path(settings.VAR_DIR) / "secret_key")
        os.environ["SECRET_KEY"] = key
        settings.SECRET_KEY = key  # nothing has signed anything yet in this process

    def announce(self, opts, passwords, seeded, workflows, runworkers, log_path, outage):
        url = f"http://{opts['host']}:{opts['port']}/deadletters/"
        database = connections["default"].settings_dict["NAME"]
        self.reminder = self.credentials(url, passwords)
        lines = [
            f"Redrive demo on {connections['default'].vendor} ({database})",
            *self.reminder,
            f"  payments:  {seeded} seeded now, {Payment.objects.count()} in all",
            f"  schedule:  {periodic.RECEIPT_TALLY} tallies the receipts every {periodic.EVERY} s "
            f"(demo.tasks.tally_receipts): {url}schedules/",
        ]
        if workflows:
            lines.append(
                f"  workflows: {len(workflows) - 1} customer onboardings (seed 000; the last card "
                "is refused: dead at step charge_card, each other sleeps a week after its "
                f"welcome e-mail) and a contacts import with bad rows: {url}workflows/"
            )
        if outage is not None:
            lines.append(
                f"  outage:    receipt service down until {outage.until:%H:%M:%S} UTC; "
                "receipts exhaust their attempts and become dead letters"
            )
            if q2_bridge.enabled():
                lines.append(self.ledger_outage(opts["outage"]))
            timer = threading.Timer(opts["outage"], self.outage_over)
            timer.daemon = True
            timer.start()
        connections.close_all()
        lines += [
            f"  workers:   {runworkers} x runworker"
            f"{' + qcluster (django-q2 bridge on)' if q2_bridge.enabled() else ''}"
            f" (log: {log_path})",
            "  requests:  "
            + ("every one logged" if opts["verbose"] else "only errors logged (--verbose: all)"),
            "Ctrl-C stops the server and drains the workers.",
        ]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()

    @staticmethod
    def credentials(url, passwords):
        """The banner's lines that sign a newcomer in: the address and each account."""
        return [
            f"  console:   {url}",
            *(f"  {role + ':':<10} {name} / {passwords[name]}" for name, role in ACCOUNTS),
        ]

    def wipe(self):
        """Delete the embedded database's file. Never empties a server database: DATABASE_URL
        may point at real data (and at an audit log that must not be erased)."""
        connection = connections["default"]
        if connection.vendor != "sqlite":
            raise CommandError(
                f"--fresh deletes the demo's SQLite file; DATABASE_URL points at "
                f"{connection.vendor} ({connection.settings_dict['NAME']}), which it will not "
                "empty. Unset DATABASE_URL, or run without --fresh.",
                returncode=2,
            )
        connection.close()
        name = Path(connection.settings_dict["NAME"])
        for path in (name, Path(f"{name}-wal"), Path(f"{name}-shm")):
            path.unlink(missing_ok=True)

    def accounts(self, password):
        """Each account with its password set: `password` for both when given, else the one
        kept from an earlier run, else a new one; what is used is kept for the next run (in
        var/, mode 0600, as the secret key), so a browser's saved login keeps working."""
        kept = self.kept_passwords()
        passwords = {
            name: password or kept.get(name) or secrets.token_urlsafe(9) for name, _ in ACCOUNTS
        }
        if passwords != kept:
            self.keep_passwords(passwords)
        for name, role in ACCOUNTS:
            if get_user_model().objects.filter(username=name).exists():
                user = get_user_model().objects.get(username=name)
                user.set_password(passwords[name])
                user.save(update_fields=["password"])
            else:
                call_command(
                    "createoperator",
                    name,
                    "--role",
                    role,
                    # One argument: a password that starts with "-" (a generated one does, one
                    # time in 64) is not taken for an option.
                    f"--password={passwords[name]}",
                    stdout=io.StringIO(),
                )
        return passwords

    @staticmethod
    def passwords_path() -> Path:
        return Path(settings.VAR_DIR) / PASSWORDS_FILE

    def kept_passwords(self) -> dict:
        """The passwords an earlier run kept; none when the file is missing or not ours."""
        try:
            kept = json.loads(self.passwords_path().read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(kept, dict):
            return {}
        return {name: kept[name] for name, _ in ACCOUNTS if isinstance(kept.get(name), str)}

    def keep_passwords(self, passwords):
        path = self.passwords_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump(passwords, file)
        path.chmod(0o600)  # an older file keeps its mode through O_CREAT

    def start_workers(self, workers, count, log_path):
        """Append each started worker to `workers` at once, so an interrupt stops every one."""
        log = open(log_path, "a")  # noqa: SIM115 - shared by the worker processes until they exit
        manage = Path(settings.BASE_DIR) / "manage.py"
        for _ in range(count):
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(manage),
                        "runworker",
                        "--concurrency",
                        "2",
                        "--poll",
                        "0.5",
                        "--grace",
                        "10",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # Own session: a terminal's Ctrl-C reaches only us; one SIGTERM stops them.
                    start_new_session=True,
                    preexec_fn=die_with_parent(),
                )
            )

    def start_qcluster(self, workers, log_path):
        """django-q2's cluster beside our workers, stopped with them (SIGTERM, then kill).

        Its retry is shortened for the demo unless REDRIVE_Q_RETRY is set: a failed django-q2
        task is redelivered when its broker lock expires."""
        env = {"REDRIVE_Q_RETRY": "5", "REDRIVE_Q_TIMEOUT": "4", **os.environ}
        log = open(log_path, "a")  # noqa: SIM115 - shared with the workers until they exit
        workers.append(
            subprocess.Popen(
                [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "qcluster"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        )

    def ledger_outage(self, seconds, count=3):
        """The django-q2 side of the outage: ledger syncs that exhaust their attempts."""
        from django_q.tasks import async_task

        services.start_outage("ledger", seconds)
        payments = list(Payment.objects.order_by("-pk").values_list("pk", flat=True)[:count])
        for pk in payments:
            async_task("demo.q2tasks.sync_ledger", pk)
        return (
            f"  django-q2: {len(payments)} ledger syncs (demo.q2tasks.sync_ledger) fail during "
            "the outage and become dead letters of source django_q2"
        )

    def stop_workers(self, workers):
        """SIGTERM to each child, STOP_GRACE seconds to drain (a second Ctrl-C cuts it short),
        then SIGKILL to each child's process group: it takes whatever a child left behind
        (the qcluster's own processes share its group), so nothing outlives the demo."""
        try:
            self.stdout.write("Stopping: draining workers...")
            for proc in workers:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE
            for proc in workers:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            pass  # a second signal: no more waiting, but no process left behind either
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)  # the last sweep is short: let it finish
            for proc in workers:
                # Its session's group (pgid == pid); gone once the child and all it started
                # have exited.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.stdout.write("Stopped.")

    def outage_over(self):
        # The sign-in again: with --verbose, the banner is far up the screen by now.
        self.stdout.write(
            "\n".join(
                [
                    "The receipt service is back: replay the dead receipts from the console.",
                    *self.reminder,
                ]
            )
        )
        self.stdout.flush()


class DemoServer(socketserver.ThreadingMixIn, WSGIServer):
    """Django's development server class, threaded, as `runserver` builds it."""

    daemon_threads = True
    log_requests = False


class DemoRequestHandler(WSGIRequestHandler):
    """The development server's handler, quiet about requests that succeeded unless the server
    logs requests (--verbose): the console polls every second, and a line per poll pushed the
    banner with the accounts off the screen (413 lines in 12 minutes). Client and server
    errors are still logged."""

    def log_request(self, code="-", size="-"):
        status = str(getattr(code, "value", code))
        if self.server.log_requests or not (status.isdigit() and int(status) < 400):
            super().log_request(code, size)
