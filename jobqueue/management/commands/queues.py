import json

from django.contrib.auth import get_user_model
from django.db.models import Count, Q
from django.utils import timezone

from jobqueue import store
from jobqueue.management import cli
from jobqueue.models import Job, JobState, PausedQueue

PERMISSION = "jobqueue.pause_queue"


def operator_name(text):
    User = get_user_model()
    return cli.text(User._meta.get_field(User.USERNAME_FIELD).max_length)(text)


class Command(cli.Command):
    requires_system_checks = []
    help = "List queues, and pause or resume one (audited)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="command", required=True)
        listing = sub.add_parser("list", help="Queues with live jobs or paused, and their state.")
        listing.add_argument("--json", action="store_true", help="One JSON object per line.")
        for name, verb in (("pause", "Stop every worker claiming from"), ("resume", "Resume")):
            each = sub.add_parser(name, help=f"{verb} a queue (running jobs finish).")
            each.add_argument("queue", type=cli.column(PausedQueue, "queue_name"))
            each.add_argument(
                "--reason", type=cli.text(), required=True, help="Why (kept in the audit log)."
            )
            each.add_argument(
                "--operator",
                type=operator_name,
                required=True,
                help=f"Username the audit names; needs {PERMISSION}.",
            )

    def handle(self, *args, **opts):
        if opts["command"] == "list":
            return self._list(opts["json"])
        operator = self._operator(opts["operator"])
        change = store.queues.pause if opts["command"] == "pause" else store.queues.resume
        try:
            changed = change(opts["queue"], actor=operator, reason=opts["reason"])
        except ValueError as exc:
            raise cli.usage_error(exc) from None
        state = "paused" if opts["command"] == "pause" else "running"
        self.stdout.write(
            f"{opts['queue']} {state}" if changed else f"{opts['queue']} was already {state}"
        )

    def _list(self, as_json):
        now = timezone.now()
        paused = store.queues.paused()
        live = {
            r["queue_name"]: r
            for r in Job.objects.filter(state__in=[JobState.READY, JobState.RUNNING])
            .values("queue_name")
            .annotate(
                ready=Count("id", filter=Q(state=JobState.READY, run_after__lte=now)),
                scheduled=Count("id", filter=Q(state=JobState.READY, run_after__gt=now)),
                running=Count("id", filter=Q(state=JobState.RUNNING)),
            )
        }
        names = sorted(set(live) | set(paused))
        for name in names:
            figures = live.get(name, {"ready": 0, "scheduled": 0, "running": 0})
            pause = paused.get(name)
            row = {
                "queue": name,
                "paused": pause is not None,
                "ready": figures["ready"],
                "scheduled": figures["scheduled"],
                "running": figures["running"],
                "paused_by": pause.paused_by if pause else None,
                "paused_at": pause.paused_at.isoformat() if pause else None,
                "reason": pause.reason if pause else None,
            }
            if as_json:
                self.stdout.write(json.dumps(row))
            else:
                state = f"PAUSED by {pause.paused_by}: {pause.reason!r}" if pause else "running"
                self.stdout.write(
                    f"{name:<24} ready={row['ready']} scheduled={row['scheduled']} "
                    f"running={row['running']}  {state}"
                )
        if not names and not as_json:
            self.stdout.write("no queues with live jobs, none paused")

    def _operator(self, username) -> str:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise cli.usage_error(f"No user {username!r}") from None
        if not (user.is_active and user.has_perm(PERMISSION)):
            raise cli.usage_error(f"{username} lacks {PERMISSION}.")
        return username
