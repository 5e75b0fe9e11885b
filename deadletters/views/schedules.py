"""Periodic jobs: the list, pause, resume, run now."""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from jobqueue.models import AuditEntry, Schedule, ScheduleRun

from .. import actions, selectors
from ..roles import MANAGE_SCHEDULE
from .base import act, console_view, render_page


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


VERBS = ("pause", "resume", "run")


@require_POST
@console_view
def schedule_act(request):
    """Pause, resume or run a schedule now: permission-checked, with a reason the audit
    keeps; back to the schedules page saying what happened."""
    schedules = reverse("deadletters:schedules")
    verb = request.POST.get("action")
    if verb not in VERBS:
        actions.check("schedule.pause", request.user)  # a refusal names what is missing
        messages.error(request, "Nothing changed: the action is pause, resume or run.")
        return HttpResponseRedirect(schedules)

    def its_row(outcome):
        name = outcome.data["schedule"]
        pk = Schedule.objects.filter(name=name).values_list("pk", flat=True).first()
        return f"{schedules}#schedule-{pk}"

    return act(request, f"schedule.{verb}", back=schedules, done=its_row)
