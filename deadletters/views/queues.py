"""Queues and workers: pause and resume a queue, quiet or stop a worker (the health page's forms),
through the action registry."""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from .. import actions
from .base import CONSOLE, act, console_view

VERBS = ("pause", "resume")


@require_POST
@console_view
def queue_control(request):
    """Pause or resume a queue: permission-checked, with a reason that the audit keeps; back to
    the health page saying what happened."""
    health = reverse("deadletters:health")
    verb = request.POST.get("action")
    if verb not in VERBS:
        actions.check("queue.pause", request.user)  # a refusal names what is missing
        messages.error(request, "Nothing changed: the action is pause or resume.")
        return HttpResponseRedirect(health)
    try:
        outcome = actions.perform(
            f"queue.{verb}", user=request.user, channel=CONSOLE, data=request.POST
        )
    except actions.Conflict as exc:
        hint = (
            ". To pause it before its first job, tick “Pause a queue that has no jobs yet”."
            if exc.code == "unknown_queue"
            else ""
        )
        messages.error(request, f"{exc}{hint}")
        return HttpResponseRedirect(health + "#queue-control")
    except actions.Invalid as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(health)
    if not outcome.changed:
        messages.warning(request, outcome.message)
        return HttpResponseRedirect(health)
    messages.success(request, outcome.message)
    return HttpResponseRedirect(health + "#queue-control")


WORKER_VERBS = ("quiet", "stop")


@require_POST
@console_view
def worker_control(request):
    """Quiet or stop a worker, or every worker of a host (the health page's form)."""
    health = reverse("deadletters:health")
    verb = request.POST.get("action")
    if verb not in WORKER_VERBS:
        actions.check("worker.stop", request.user)  # a refusal names what is missing
        messages.error(request, "Nothing changed: the action is quiet or stop.")
        return HttpResponseRedirect(health)
    return act(
        request,
        f"worker.{verb}",
        back=health + "#worker-control",
        done=lambda outcome: health + "#workers",
    )
