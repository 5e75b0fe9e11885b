"""The console's permissions, and operator roles: a group per role holding them.

Every state-changing view and CLI action checks one of these on the server.
"""

from django.contrib.auth.models import Group, Permission

from .models import Action
from .redaction import REVEAL_PERMISSION

VIEW = "deadletters.view_deadletter"
ACTION_PERMISSION = {
    Action.REPLAY: "deadletters.replay_deadletter",
    Action.DISCARD: "deadletters.discard_deadletter",
}
# Replay items past the poison limit (conf MAX_REPLAYS).
POISON = "deadletters.replay_poisoned"
# Pause and resume queues (jobqueue.store.queues; audited in the audit log, jobqueue.store.audit).
PAUSE_QUEUE = "jobqueue.pause_queue"
# Pause, resume or run a periodic job now (jobqueue.store.schedules; audited in
# the audit log).
MANAGE_SCHEDULE = "jobqueue.manage_schedule"
# Run a queued job now or cancel it (jobqueue.store.job_actions; audited in the audit log).
ACT_ON_JOB = "jobqueue.act_on_job"
# Quiet or stop a worker, or every worker of a host (jobqueue.store.workers.command; audited).
CONTROL_WORKER = "jobqueue.control_worker"
# Edit one letter's payload and replay it (kept in deadletters.PayloadEdit, audited in the
# audit log).
EDIT = "deadletters.edit_deadletter"
# Export the filtered letters as CSV or JSON Lines (audited in the audit log).
EXPORT = "deadletters.export_deadletter"
# Revoke another user's API token (anyone manages their own: deadletters.tokens).
REVOKE_ANY_TOKEN = "deadletters.revoke_any_apitoken"

ROLE_PERMISSIONS = {
    "viewer": [VIEW],
    "operator": [
        VIEW,
        ACTION_PERMISSION[Action.REPLAY],
        ACTION_PERMISSION[Action.DISCARD],
        PAUSE_QUEUE,
        ACT_ON_JOB,
        MANAGE_SCHEDULE,
        CONTROL_WORKER,
        EXPORT,
    ],
    "admin": [
        VIEW,
        ACTION_PERMISSION[Action.REPLAY],
        ACTION_PERMISSION[Action.DISCARD],
        POISON,
        PAUSE_QUEUE,
        ACT_ON_JOB,
        MANAGE_SCHEDULE,
        CONTROL_WORKER,
        EXPORT,
        EDIT,
        # Unmasked payloads, one audited reveal at a time (deadletters/redaction.py).
        REVEAL_PERMISSION,
        REVOKE_ANY_TOKEN,
        # The read-only admin pages of the queue and the audit log.
        "jobqueue.view_deadletter",
        "deadletters.view_replayrun",
        "deadletters.view_replayitem",
        "deadletters.view_selection",
        "jobqueue.view_auditentry",
    ],
}
GROUP_NAMES = {role: f"Dead-letter {role}s" for role in ROLE_PERMISSIONS}


def group_for(role: str) -> Group:
    group, _ = Group.objects.get_or_create(name=GROUP_NAMES[role])
    perms = []
    for name in ROLE_PERMISSIONS[role]:
        app_label, codename = name.split(".")
        perms.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    group.permissions.set(perms)
    return group


def assign(user, role: str):
    """Make `user` hold exactly `role` among the console roles. The admin role makes them
    staff too (the Django admin is one of its tools); staff status is never taken away here:
    the host may have given it for its own reasons (a superuser made an operator stays able
    to sign in to the admin)."""
    user.groups.remove(*Group.objects.filter(name__in=GROUP_NAMES.values()))
    user.groups.add(group_for(role))
    if role == "admin" and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
