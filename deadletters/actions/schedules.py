"""Schedule actions."""

from __future__ import annotations

from jobqueue.models import (
    Schedule,
)

from .. import services
from ..roles import (
    MANAGE_SCHEDULE,
)
from .forms import (
    ScheduleForm,
)
from .kernel import (
    Action,
    Actor,
    Conflict,
    Gone,
    Outcome,
    register,
)


def _schedule_change(verb: str):
    def carry_out(actor: Actor, cleaned) -> Outcome:
        name = cleaned["schedule"]
        if not Schedule.objects.filter(name=name).exists():
            raise Gone("schedule named " + repr(name), hint="The schedules page lists them.")
        try:
            outcome = services.act_on_schedule(
                verb, name, operator=actor.user, reason=cleaned["reason"], channel=actor.channel
            )
        except ValueError as exc:
            raise Conflict(f"Nothing changed: {exc}.") from None
        if not outcome:  # a pause of a paused schedule, a resume of a running one
            state = "paused" if verb == "pause" else "running"
            return Outcome(False, f"{name} was already {state}: nothing changed.")
        if verb == "run":
            return Outcome(
                True, f"{name}: job {outcome.pk} enqueued.", {"schedule": name, "job": outcome.pk}
            )
        done = "paused" if verb == "pause" else "resumed"
        return Outcome(True, f"{name} {done}.", {"schedule": name})

    return carry_out


for _verb, _label, _summary in (
    ("pause", "Pause", "Stop a periodic job's ticks from enqueueing until resumed."),
    ("resume", "Resume", "Let a paused periodic job's ticks enqueue again."),
    ("run", "Run now", "Enqueue a periodic job's task now, outside its schedule."),
):
    register(
        Action(
            f"schedule.{_verb}",
            "schedule",
            _label,
            _summary,
            (MANAGE_SCHEDULE,),
            ScheduleForm,
            _schedule_change(_verb),
        )
    )
