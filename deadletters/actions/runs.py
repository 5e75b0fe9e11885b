"""Replay-run actions: control, resume past a canary, approve."""

from __future__ import annotations

from .. import services
from ..models import ReplayRun, RunState
from ..roles import (
    ACTION_PERMISSION,
    POISON,
)
from .forms import (
    RunForm,
)
from .kernel import (
    Action,
    Actor,
    Conflict,
    Gone,
    Outcome,
    register,
)


def _run(cleaned) -> ReplayRun:
    run = ReplayRun.objects.filter(pk=cleaned["run"]).select_related("selection").first()
    if run is None:
        raise Gone("replay run", cleaned["run"], "The audit log lists every run.")
    return run


def _run_change(verb: str):
    handler = {"pause": services.pause, "resume": services.resume, "cancel": services.cancel}[verb]

    def carry_out(actor: Actor, cleaned) -> Outcome:
        run = _run(cleaned)
        actor.require(ACTION_PERMISSION[run.action])
        if not handler(run, operator=actor.user, channel=actor.channel):
            return Outcome(
                False,
                f"The run is {run.get_state_display().lower()}; nothing to {verb}.",
                {"run": run.pk, "state": run.state},
                run,
            )
        return Outcome(
            True,
            f"Run #{run.pk} {run.get_state_display().lower()}.",
            {"run": run.pk, "state": run.state},
            run,
        )

    return carry_out


def _resume_past_canary(actor: Actor, cleaned) -> Outcome:
    run = _run(cleaned)
    actor.require(ACTION_PERMISSION[run.action])
    if run.state != RunState.HALTED:
        raise Conflict(
            f"The run is {run.get_state_display().lower()}: only a run its canary halted "
            "resumes past the canary."
        )
    services.resume(run, operator=actor.user, channel=actor.channel)
    return Outcome(
        True,
        f"Run #{run.pk} goes on past its canary.",
        {"run": run.pk, "state": run.state},
        run,
    )


def _approve(actor: Actor, cleaned) -> Outcome:
    run = _run(cleaned)
    actor.require(ACTION_PERMISSION[run.action])
    if run.allow_poisoned:
        actor.require(POISON)
    services.approve(run, operator=actor.user, channel=actor.channel)
    return Outcome(
        True, f"Approved: run #{run.pk} has started.", {"run": run.pk, "state": run.state}, run
    )


for _verb, _label, _summary in (
    ("pause", "Pause", "Pause a running replay run after its current batch."),
    ("resume", "Resume", "Continue a paused (or stuck) replay run."),
    ("cancel", "Cancel", "Stop a replay run for good; what it did stays done."),
):
    register(
        Action(
            f"run.{_verb}",
            "run",
            _label,
            _summary,
            (),
            RunForm,
            _run_change(_verb),
            audited_as={"pause": "run.paused", "resume": "run.resumed", "cancel": "run.cancelled"}[
                _verb
            ],
        )
    )
register(
    Action(
        "run.resume_past_canary",
        "run",
        "Resume past the canary",
        "Go on with a run its canary halted: the operator's deliberate override.",
        (),
        RunForm,
        _resume_past_canary,
        audited_as="run.resumed",
    )
)
register(
    Action(
        "run.approve",
        "run",
        "Approve",
        "The two-person rule: a second person approves a run awaiting approval.",
        (),
        RunForm,
        _approve,
        audited_as="run.approved",
    )
)
