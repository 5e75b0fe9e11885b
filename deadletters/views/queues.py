"""Queues: pause and resume (the health page's form)."""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from jobqueue import store

from .. import services
from ..forms import QueueControlForm, refusal
from ..roles import PAUSE_QUEUE
from .base import CONSOLE, backend_named, console_view, require


@require_POST
@console_view
def queue_control(request):
    """Pause or resume a queue (the health page's form): permission-checked, with a reason
    that the audit keeps; back to the health page saying what happened."""
    require(request.user, PAUSE_QUEUE)
    form = QueueControlForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing changed ({refusal(form)}).")
        return redirect("deadletters:health")
    action, queue = form.cleaned_data["action"], form.cleaned_data["queue"]
    backend = backend_named(form.cleaned_data["backend"])
    try:
        changed = services.control_queue(
            action,
            queue,
            operator=request.user,
            reason=form.cleaned_data["reason"],
            allow_unknown=form.cleaned_data["allow_unknown"],
            channel=CONSOLE,
            using=backend.database,
        )
    except store.queues.UnknownQueue as exc:
        messages.error(
            request,
            f"Nothing changed: {exc}. To pause it before its first job, tick "
            "“Pause a queue that has no jobs yet”.",
        )
        return HttpResponseRedirect(reverse("deadletters:health") + "#queue-control")
    except ValueError as exc:
        messages.error(request, f"Nothing changed: {exc}.")
        return redirect("deadletters:health")
    done = "paused" if action == "pause" else "resumed"
    if not changed:
        messages.warning(request, f"Queue {queue} was already {done}: nothing changed.")
        return redirect("deadletters:health")
    messages.success(request, f"Queue {queue} {done}.")
    return HttpResponseRedirect(reverse("deadletters:health") + "#queue-control")
