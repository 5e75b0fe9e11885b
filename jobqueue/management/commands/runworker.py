import logging
import signal
import sys
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.db.migrations.executor import MigrationExecutor

from jobqueue.listener import (
    add_log_level_argument,
    first_line,
    logfmt,
    next_backoff,
    show_event_lines,
)
from jobqueue.outbox import setting
from jobqueue.relay import Relay, run_in_thread
from jobqueue.worker import Worker

logger = logging.getLogger("jobqueue.worker")


def positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise ValueError(text)
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def wait_for_database():
    """A worker started while the database is down or restarting waits for it (saying so)
    instead of dying with a traceback: process managers start workers and databases in any
    order."""
    delay = 0.0
    while True:
        try:
            ensure_migrated()
            return
        except OperationalError as exc:
            delay = next_backoff(delay)
            logger.warning(
                "event=database_unavailable error=%s retry_in=%.1fs", logfmt(first_line(exc)), delay
            )
            connections[DEFAULT_DB_ALIAS].close()
            time.sleep(delay)


def ensure_migrated():
    """Refuse to start on an unmigrated database rather than retry a missing table forever."""
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:3])
        raise CommandError(
            f"the database has unapplied migrations ({names}...): run `manage.py migrate` first"
        )


class Command(BaseCommand):
    help = "Run a worker that claims jobs, runs their tasks and acknowledges them."

    def add_arguments(self, parser):
        add_log_level_argument(parser)
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            dest="queues",
            metavar="Q",
            help="Queue to take jobs from (repeatable). Default: every queue.",
        )
        parser.add_argument(
            "--concurrency",
            "-c",
            type=positive(int),
            default=1,
            help="Handler threads (default 1).",
        )
        parser.add_argument(
            "--prefetch",
            type=int,
            default=None,
            help="Jobs leased beyond the running ones (default: adapts to job duration, <= 100).",
        )
        parser.add_argument("--burst", action="store_true", help="Exit 0 once no due job is left.")
        parser.add_argument(
            "--max-jobs",
            type=positive(int),
            default=None,
            help="Exit after claiming this many jobs and finishing them.",
        )
        parser.add_argument(
            "--lease",
            type=positive(float),
            default=None,
            metavar="SECONDS",
            help="Lease length of each claim (default settings.JOBQUEUE).",
        )
        parser.add_argument(
            "--grace",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="How long a stop waits for running jobs (default 30).",
        )
        parser.add_argument(
            "--poll",
            type=positive(float),
            default=None,
            metavar="SECONDS",
            help="Polling interval when idle (default settings.JOBQUEUE).",
        )
        parser.add_argument(
            "--id",
            dest="worker_id",
            default=None,
            help="Worker identity in leases and logs (default host:pid:random).",
        )
        parser.add_argument(
            "--relay",
            action="store_true",
            default=None,
            help="Also run an outbox relay thread (default settings.OUTBOX RELAY_IN_WORKER).",
        )

    def handle(self, *args, **opts):
        show_event_lines(opts["log_level"])
        if opts["prefetch"] is not None and opts["prefetch"] < 0:
            raise CommandError("--prefetch must be 0 or more", returncode=2)
        wait_for_database()
        worker = Worker(
            queues=opts["queues"],
            concurrency=opts["concurrency"],
            prefetch=opts["prefetch"],
            burst=opts["burst"],
            max_jobs=opts["max_jobs"],
            lease_seconds=opts["lease"],
            poll_interval=opts["poll"],
            grace=opts["grace"],
            worker_id=opts["worker_id"],
        )
        worker.install_signal_handlers()
        relay_thread = relay = None
        if opts["relay"] or setting("RELAY_IN_WORKER"):
            relay = Relay(relay_id=f"{worker.worker_id}:relay")
            _stop_relay_on_signals(relay)
            relay_thread = run_in_thread(relay)
        try:
            code = worker.run()
        finally:
            if relay is not None:
                relay.stop()
                relay_thread.join(timeout=30.0)
        if code:
            sys.exit(code)  # the worker asked to be restarted (too many stuck handlers)


def _stop_relay_on_signals(relay):
    """The signal that stops the worker stops the relay too (then runs the worker's handler)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(received, frame, previous=previous):
            relay.stop()
            if callable(previous):
                previous(received, frame)

        signal.signal(signum, handler)
