from jobqueue.checks import TAG
from jobqueue.management import cli
from jobqueue.relay import Relay


class Command(cli.Command):
    help = "Run an outbox relay: claim unpublished messages, publish them, mark them published."
    requires_system_checks = [TAG]

    def add_arguments(self, parser):
        cli.add_loop_arguments(
            parser,
            defaults="REDRIVE['OUTBOX']",
            id_dest="relay_id",
            id_help="Relay identity in leases and logs.",
        )
        parser.add_argument(
            "--batch",
            type=cli.integer(1, 10_000),
            default=None,
            help="Messages claimed per round trip (default REDRIVE['OUTBOX']['BATCH_SIZE']).",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit 0 once no message is claimable."
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
