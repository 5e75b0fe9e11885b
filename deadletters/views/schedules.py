"""Periodic jobs: the list, pause, resume, run now."""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from jobqueue.models import AuditEntry, Schedule, ScheduleRun

from .. import selectors, services
from ..forms import ScheduleActionForm, refusal
from ..roles import MANAGE_SCHEDULE
from .base import CONSOLE, console_view, render_page, require


@require_GET
@console_view
def schedule_list(request):
    """The periodic jobs: cron, next and last run, the last run's outcome, who paused one and
    why; the ticks that did not become a job; the audit of operators' actions."""
    context = {
        "schedules": selectors.schedules(),
        "unrun": ScheduleRun.objects.exclude(outcome=ScheduleRun.Outcome.ENQUEUED)
        .select_related("schedule")
        .order_by("-at", "-id")[:50],
        "actions": AuditEntry.objects.filter(target_kind="schedule").order_by("-id")[:20],
        "can_manage": request.user.has_perm(MANAGE_SCHEDULE),
        "now": timezone.now(),
    }
    return render_page(request, "deadletters/schedules.html", "schedule-table", context)


@require_POST
@console_view
def schedule_act(request):
    """Pause, resume or run a schedule now: permission-checked, with a reason the audit
    keeps; back to the schedules page saying what happened."""
    require(request.user, MANAGE_SCHEDULE)
    form = ScheduleActionForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing changed ({refusal(form)}).")
        return redirect("deadletters:schedules")
    action, name = form.cleaned_data["action"], form.cleaned_data["schedule"]
    try:
        outcome = services.act_on_schedule(
            action, name, operator=request.user, reason=form.cleaned_data["reason"], channel=CONSOLE
        )
    except ValueError as exc:
        messages.error(request, f"Nothing changed: {exc}.")
        return redirect("deadletters:schedules")
    if not outcome:  # a pause of a paused schedule, a resume of a running one
        state = "paused" if action == "pause" else "running"
        messages.warning(request, f"{name} was already {state}: nothing changed.")
        return redirect("deadletters:schedules")
    if action == "run":
        messages.success(request, f"{name}: job {outcome.pk} enqueued.")
    else:
        messages.success(request, f"{name} {'paused' if action == 'pause' else 'resumed'}.")
    pk = Schedule.objects.filter(name=name).values_list("pk", flat=True).first()
    return HttpResponseRedirect(reverse("deadletters:schedules") + f"#schedule-{pk}")
