import logging
import signal
import sys

from jobqueue import schedules
from jobqueue.backend import DatabaseBackend
from jobqueue.checks import TAG
from jobqueue.conf import setting
from jobqueue.logfmt import log_line
from jobqueue.management import cli
from jobqueue.models import MAX_ID, Job
from jobqueue.worker import MAX_PREFETCH, Worker

logger = logging.getLogger("jobqueue.worker")


class Command(cli.Command):
    help = "Run a worker that claims jobs, runs their tasks and acknowledges them."
    requires_system_checks = [TAG]

    def add_arguments(self, parser):
        cli.add_loop_arguments(
            parser,
            defaults="REDRIVE",
            id_dest="worker_id",
            id_help="Worker identity in leases and logs (default host:pid:random).",
        )
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            dest="queues",
            type=cli.column(Job, "queue_name"),
            metavar="Q",
            help="Queue to take jobs from (repeatable). Default: every queue.",
        )
        parser.add_argument(
            "--concurrency",
            "-c",
            type=cli.integer(1, 1000),
            default=1,
            help="Handler threads (default 1).",
        )
        parser.add_argument(
            "--prefetch",
            type=cli.integer(0, 10_000),
            default=None,
            help="Jobs leased beyond the running ones (default: a quarter second of work by "
            f"the jobs' recent durations, at most {MAX_PREFETCH}).",
        )
        parser.add_argument(
            "--backend",
            default="default",
            metavar="ALIAS",
            help="The TASKS backend whose jobs to run, from its OPTIONS['DATABASE'] (default: "
            "default).",
        )
        parser.add_argument("--burst", action="store_true", help="Exit 0 once no due job is left.")
        parser.add_argument(
            "--drain",
            type=cli.number(0, 86400, unit="seconds"),
            default=None,
            metavar="SECONDS",
            help="As --burst, but also wait for retries and scheduled jobs: exit 0 once no job "
            "of its queues is left to finish, 1 if some are after SECONDS (for CI).",
        )
        parser.add_argument(
            "--max-jobs",
            type=cli.integer(1, MAX_ID),
            default=None,
            help="Exit after claiming this many jobs and finishing them.",
        )
        parser.add_argument(
            "--grace",
            type=cli.number(0, 86400, unit="seconds"),
            default=30.0,
            metavar="SECONDS",
            help="How long a stop waits for running jobs (default 30).",
        )
        parser.add_argument(
            "--no-chores",
            action="store_true",
            help="Take no part in the background chores (the expired-lease sweep, schedule "
            "ticks, broker mirrors: jobqueue/chores.py), which one worker per database runs by "
            "default (REDRIVE['CHORES']).",
        )
        parser.add_argument(
            "--relay",
            action="store_true",
            default=None,
            help="Also run an outbox relay thread (default REDRIVE['OUTBOX']['RELAY_IN_WORKER']).",
        )

    def handle(self, *args, **opts):
        cli.show_event_lines(opts["log_level"])
        backend = _redrive_backend(opts["backend"])
        cli.wait_for_database(backend.database)
        try:
            report = schedules.sync()
        except (ImportError, TypeError, ValueError) as exc:
            # A declaration that could never run stops the worker here, with its reason,
            # rather than as a traceback (or not at all, its ticks silently missing).
            raise cli.CommandError(f"a periodic job cannot be declared: {exc}") from None
        for change in ("created", "updated"):
            for name in report[change]:
                log_line(logger, logging.INFO, "schedule_synced", schedule=name, change=change)
        worker = Worker(
            queues=opts["queues"],
            concurrency=opts["concurrency"],
            prefetch=opts["prefetch"],
            burst=opts["burst"],
            drain=opts["drain"],
            max_jobs=opts["max_jobs"],
            lease_seconds=opts["lease"],
            poll_interval=opts["poll"],
            grace=opts["grace"],
            worker_id=opts["worker_id"],
            backend=opts["backend"],
            chores="off" if opts["no_chores"] else None,
        )
        worker.install_signal_handlers()
        relay_thread = relay = None
        if opts["relay"] or setting("OUTBOX", "RELAY_IN_WORKER"):
            # Imported only here: most workers run no relay, and each module loaded is start-up
            # time for every worker (compiled anew on each start where bytecode is not kept).
            from jobqueue.relay import Relay, run_in_thread

            relay = Relay(relay_id=f"{worker.worker_id}{cli.RELAY_SUFFIX}")
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


def _redrive_backend(alias: str) -> DatabaseBackend:
    """The TASKS backend `alias`, which must be Redrive's: a worker runs only its jobs."""
    from django.tasks import InvalidTaskBackend, task_backends

    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        known = ", ".join(sorted(task_backends.settings)) or "none"
        raise cli.usage_error(f"no TASKS backend {alias!r} (configured: {known})") from None
    if not isinstance(backend, DatabaseBackend):
        raise cli.usage_error(
            f"TASKS backend {alias!r} is {type(backend).__module__}.{type(backend).__qualname__}, "
            "not jobqueue.backend.DatabaseBackend: runworker runs Redrive's jobs only"
        )
    return backend


def _stop_relay_on_signals(relay):
    """The signal that stops the worker stops the relay too (then runs the worker's handler)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(received, frame, previous=previous):
            relay.stop()
            if callable(previous):
                previous(received, frame)

        signal.signal(signum, handler)
