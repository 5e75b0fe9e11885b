"""Workflows: the list and a workflow's timeline."""

from django.views.decorators.http import require_GET

from jobqueue.models import Workflow

from .. import workflows
from .base import NotFound, console_view, render_page

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
    context = {"d": detail, "workflow": detail.workflow}
    return render_page(request, "deadletters/workflow.html", "timeline", context)
