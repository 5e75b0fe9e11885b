"""Workflow actions: signal a waiting step."""

from __future__ import annotations

from django.db import transaction

from jobqueue import store
from jobqueue import workflows as workflow_api
from jobqueue.models import (
    Workflow,
    WorkflowState,
)

from .. import redaction
from ..roles import (
    ACT_ON_JOB,
)
from .forms import (
    SignalForm,
)
from .kernel import (
    Action,
    Actor,
    Gone,
    Invalid,
    Outcome,
    register,
)


def _signal(actor: Actor, cleaned) -> Outcome:
    pk, event = cleaned["workflow"], cleaned["event"]
    with transaction.atomic():
        try:
            # A workflow enqueued and not at its first step yet takes the signal too (its record
            # begins with it), as jobqueue.workflows.signal takes it from code.
            sent = workflow_api.signal(pk, event, cleaned["payload"])
        except ValueError as exc:
            raise Invalid(f"Nothing changed: {exc}.") from None
        except LookupError:
            raise Gone(
                "workflow", pk, "A workflow's id is the id of the job first enqueued for it."
            ) from None
        # Read before the signal commits: the state it met, not one a worker made after.
        state, waiting_for = Workflow.objects.values_list("state", "waiting_for").get(pk=pk)
        woke = sent and state == WorkflowState.WAITING and waiting_for == event
        data = {"workflow": pk, "event": event, "woke": woke, "state": state}
        if not sent:
            return Outcome(False, f"Workflow {pk} already had {event!r}: nothing changed.", data)
        store.audit.record(
            "workflow.signal",
            actor=actor.name,
            channel=actor.channel,
            target_kind="workflow",
            targets=[pk],
            reason=cleaned["reason"],
            params={"event": event, "payload": redaction.redact(cleaned["payload"])},
        )
    return Outcome(True, f"Workflow {pk}: {event!r} sent{_signal_met(state, woke, event)}.", data)


def _signal_met(state: str, woke: bool, event: str) -> str:
    """What the signal does now: whoever sent it learns whether anything will read it."""
    if woke:
        return "; it was waiting for it and runs again now"
    if state == WorkflowState.DONE:
        return ", but the workflow is done: nothing will read it"
    if state == WorkflowState.DEAD:
        return (
            f"; the workflow is dead: in a replay of its dead letter, a wait_for({event!r}) it "
            "reaches returns it"
        )
    return f"; the workflow is {state}: a wait_for({event!r}) it reaches returns it at once"


register(
    Action(
        "workflow.signal",
        "workflow",
        "Signal",
        "Send an event to a workflow: a wait_for(event) it is in returns the payload.",
        (ACT_ON_JOB,),
        SignalForm,
        _signal,
    )
)
