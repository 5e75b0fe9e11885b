"""Operator roles: a group per role holding the console's permissions."""

from django.contrib.auth.models import Group, Permission

ROLE_PERMISSIONS = {
    "viewer": ["deadletters.view_deadletter"],
    "operator": [
        "deadletters.view_deadletter",
        "deadletters.replay_deadletter",
        "deadletters.discard_deadletter",
    ],
    "admin": [
        "deadletters.view_deadletter",
        "deadletters.replay_deadletter",
        "deadletters.discard_deadletter",
        "deadletters.replay_poisoned",
        # Unmasked payloads, one audited reveal at a time (deadletters/redaction.py).
        "deadletters.view_secrets",
        # The read-only admin pages of the queue and the audit log.
        "jobqueue.view_deadletter",
        "deadletters.view_replayrun",
        "deadletters.view_replayitem",
        "deadletters.view_selection",
        "deadletters.view_reveal",
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
    """Make `user` hold exactly `role` among the console roles."""
    user.groups.remove(*Group.objects.filter(name__in=GROUP_NAMES.values()))
    user.groups.add(group_for(role))
    user.is_staff = role == "admin"
    user.save(update_fields=["is_staff"])
