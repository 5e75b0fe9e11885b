from jobqueue.management import cli
from jobqueue.relay import Relay


class Command(cli.Command):
    help = "Run an outbox relay: claim unpublished messages, publish them, mark them published."

    def add_arguments(self, parser):
        cli.add_log_level_argument(parser)
        parser.add_argument(
            "--batch",
            type=cli.integer(1, 10_000),
            default=None,
            help="Messages claimed per round trip (default settings.OUTBOX BATCH_SIZE).",
        )
        parser.add_argument(
            "--lease",
            type=cli.LEASE,
            default=None,
            metavar="SECONDS",
            help="Lease length of each claim (default settings.OUTBOX LEASE_SECONDS).",
        )
        parser.add_argument(
            "--poll",
            type=cli.POLL,
            default=None,
            metavar="SECONDS",
            help="Polling interval when idle (default settings.OUTBOX POLL_INTERVAL).",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit 0 once no message is claimable."
        )
        parser.add_argument(
            "--id",
            dest="relay_id",
            type=cli.PROCESS_ID,
            default=None,
            help="Relay identity in leases and logs.",
        )

    def handle(self, *args, **opts):
        cli.show_event_lines(opts["log_level"])
        cli.ensure_migrated()
        relay = Relay(
            relay_id=opts["relay_id"],
            batch_size=opts["batch"],
            lease_seconds=opts["lease"],
            poll_interval=opts["poll"],
            burst=opts["burst"],
        )
        relay.install_signal_handlers()
        relay.run()
