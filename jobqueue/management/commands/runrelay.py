from jobqueue.listener import add_log_level_argument, show_event_lines
from jobqueue.management import cli
from jobqueue.management.commands.runworker import LEASE, POLL, PROCESS_ID, ensure_migrated
from jobqueue.relay import Relay


class Command(cli.Command):
    help = "Run an outbox relay: claim unpublished messages, publish them, mark them published."

    def add_arguments(self, parser):
        add_log_level_argument(parser)
        parser.add_argument(
            "--batch",
            type=cli.integer(1, 10_000),
            default=None,
            help="Messages claimed per round trip (default REDRIVE['OUTBOX']['BATCH_SIZE']).",
        )
        parser.add_argument(
            "--lease",
            type=LEASE,
            default=None,
            metavar="SECONDS",
            help="Lease length of each claim (default REDRIVE['OUTBOX']['LEASE_SECONDS']).",
        )
        parser.add_argument(
            "--poll",
            type=POLL,
            default=None,
            metavar="SECONDS",
            help="Polling interval when idle (default REDRIVE['OUTBOX']['POLL_INTERVAL']).",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit 0 once no message is claimable."
        )
        parser.add_argument(
            "--id",
            dest="relay_id",
            type=PROCESS_ID,
            default=None,
            help="Relay identity in leases and logs.",
        )

    def handle(self, *args, **opts):
        show_event_lines(opts["log_level"])
        ensure_migrated()
        relay = Relay(
            relay_id=opts["relay_id"],
            batch_size=opts["batch"],
            lease_seconds=opts["lease"],
            poll_interval=opts["poll"],
            burst=opts["burst"],
        )
        relay.install_signal_handlers()
        relay.run()
