from jobqueue.checks import TAG
from jobqueue.chores import ChoresProcess
from jobqueue.conf import setting
from jobqueue.management import cli
from jobqueue.management.commands.runworker import _redrive_backend


class Command(cli.Command):
    help = (
        "Run the background chores (expired-lease sweep, schedule ticks, broker mirrors, "
        "pruning: jobqueue/chores.py) for one queue database, and no jobs: for "
        "REDRIVE['CHORES'] = 'off', or beside workers started with --no-chores. Any number may "
        "run: one at a time leads, the others take over within a lease of its end."
    )
    requires_system_checks = [TAG]

    def add_arguments(self, parser):
        cli.add_loop_arguments(
            parser,
            defaults="REDRIVE",
            id_dest="holder",
            id_help="Identity in the lease and the logs (default host:pid:random).",
        )
        parser.add_argument(
            "--backend",
            default="default",
            metavar="ALIAS",
            help="The TASKS backend whose database to look after (default: default).",
        )

        parser.add_argument(
            "--once",
            action="store_true",
            help="One round (each chore, if this process is elected), then exit: for a cron job.",
        )

    def handle(self, *args, **opts):
        cli.show_event_lines(opts["log_level"])
        backend = _redrive_backend(opts["backend"])
        cli.wait_for_database(backend.database)
        process = ChoresProcess(
            using=backend.database,
            lease_seconds=opts["lease"] or setting("LEASE_SECONDS"),
            holder=opts["holder"],
            poll_interval=opts["poll"],
        )
        process.install_signal_handlers()
        process.run(once=opts["once"])
