"""Queue actions: pause and resume."""

from __future__ import annotations

from jobqueue import store

from .. import services
from ..roles import (
    PAUSE_QUEUE,
)
from .forms import (
    QueueForm,
    QueuePauseForm,
)
from .kernel import (
    Action,
    Actor,
    Conflict,
    Invalid,
    Outcome,
    backend_of,
    register,
)


def _queue_change(verb: str):
    done = "paused" if verb == "pause" else "resumed"
    state = "paused" if verb == "pause" else "running"

    def carry_out(actor: Actor, cleaned) -> Outcome:
        queue = cleaned["queue"]
        try:
            queue = store.queues.checked_name(queue)  # as the store names it (NFC)
            changed = services.control_queue(
                verb,
                queue,
                operator=actor.user,
                reason=cleaned["reason"],
                allow_unknown=cleaned.get("allow_unknown", False),
                channel=actor.channel,
                using=backend_of(cleaned).database,
            )
        except store.queues.UnknownQueue as exc:
            raise Conflict(f"Nothing changed: {exc}", code="unknown_queue") from None
        except ValueError as exc:
            raise Invalid(f"Nothing changed: {exc}.") from None
        if not changed:
            return Outcome(False, f"Queue {queue} was already {state}: nothing changed.")
        return Outcome(True, f"Queue {queue} {done}.", {"queue": queue, "state": state})

    return carry_out


register(
    Action(
        "queue.pause",
        "queue",
        "Pause",
        "Stop every worker claiming from a queue (running jobs finish).",
        (PAUSE_QUEUE,),
        QueuePauseForm,
        _queue_change("pause"),
    )
)
register(
    Action(
        "queue.resume",
        "queue",
        "Resume",
        "Let workers claim from a paused queue again.",
        (PAUSE_QUEUE,),
        QueueForm,
        _queue_change("resume"),
    )
)
