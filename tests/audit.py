"""The audit log as the tests read it: one tuple a target of each entry, oldest first."""

from jobqueue.models import AuditEntry


def audited(kind: str, using: str = "default") -> list[tuple[str, str, str, str]]:
    """(verb, target, actor, reason) for each target of each entry on this kind of target."""
    return [
        (entry.action.partition(".")[2], target, entry.actor, entry.reason)
        for entry in AuditEntry.objects.using(using).filter(target_kind=kind).order_by("seq")
        for target in entry.targets
    ]


def run_events(run) -> list[tuple[str, str]]:
    """(verb, actor) of each audit entry on a replay run, oldest first."""
    from deadletters.services import run_events as events

    return [(entry.action.partition(".")[2], entry.actor) for entry in events(run)]


def entries(action: str, using: str = "default") -> list[tuple]:
    """(targets, actor, channel, reason, params) of each entry of `action`, oldest first."""
    return [
        (entry.targets, entry.actor, entry.channel, entry.reason, entry.params)
        for entry in AuditEntry.objects.using(using).filter(action=action).order_by("seq")
    ]
