"""Workflows: the list and a workflow's timeline."""

from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from jobqueue.models import Workflow, WorkflowState

from .. import workflows
from ..roles import ACT_ON_JOB
from .base import NotFound, act, console_view, render_page

WORKFLOW_GONE = (
    "A workflow's id is the id of the job first enqueued for it; a task that never called a "
    "step is no workflow, or the link has a typo."
)


@require_GET
@console_view
def workflow_list(request):
    """Recent workflows, most recently changed first, by state, keyset-paged."""
    form = workflows.WorkflowFilterForm(request.GET)
    state = form.applied_state()
    cursors = form.cleaned_data
    context = {
        "form": form,
        "state": state,
        "page": workflows.page(state, after=cursors.get("after"), before=cursors.get("before")),
        "filter_query": form.query(),
        "states": workflows.STATES,
    }
    return render_page(request, "deadletters/workflows.html", "workflow-results", context)


@require_GET
@console_view
def workflow_detail(request, pk):
    """One workflow's timeline: its steps, what they stored (masked), failures, signals."""
    try:
        detail = workflows.detail(pk)
    except Workflow.DoesNotExist:
        raise NotFound("workflow", pk, WORKFLOW_GONE) from None
    context = {
        "d": detail,
        "workflow": detail.workflow,
        "can_signal": request.user.has_perm(ACT_ON_JOB)
        and detail.workflow.state != WorkflowState.DONE,
    }
    return render_page(request, "deadletters/workflow.html", "timeline", context)


@require_POST
@console_view
def workflow_signal(request, pk):
    """Send a workflow an event (the registry's workflow.signal), back to its page."""
    page = reverse("deadletters:workflow", args=[pk])
    data = request.POST.copy()
    data["workflow"] = str(pk)  # the workflow is the page's, whatever the form says
    return act(
        request,
        "workflow.signal",
        back=page + "#signal",
        done=lambda o: page + "#signals",
        data=data,
    )
