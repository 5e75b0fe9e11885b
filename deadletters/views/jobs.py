"""Jobs of every state: the browser, a job's page, run now or cancel one."""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.models import Job

from .. import actions, databases, jobs, search, workflows
from ..forms import JobFilterForm
from ..roles import ACT_ON_JOB
from .base import (
    NotFound,
    act,
    backend_echo,
    backend_named,
    console_view,
    filter_for,
    render_page,
)

JOB_GONE = "Finished jobs may have been pruned, or the link has a typo."


@require_GET
@console_view
def job_list(request):
    """Every job, not only dead ones: by state, task, queue, key and text, newest first; of one
    backend's queue database (`backend`, the default one's if none)."""
    backend = backend_named(request.GET.get("backend"))
    form = JobFilterForm(request.GET)
    f = filter_for(form, request.user)
    cursors = form.cleaned_data
    echo = backend_echo(backend) + form.echo()
    try:
        result = jobs.page(
            f, after=cursors.get("after"), before=cursors.get("before"), using=backend.database
        )
        timed_out = None
    except search.SearchTimedOut as exc:
        result, timed_out = jobs.JobPage([], None, None), exc
    context = {
        "form": form,
        "page": result,
        # What a text search read: the page says so, and a search stopped at its time limit.
        "searched": f.q and {"scan": f"{search.JOB_SCAN:,}", "seconds": f"{search.TIME_LIMIT:g}"},
        "search_timed_out": timed_out,
        "filter_query": urlencode(echo),
        "shown_filter": echo,
        "echo": echo,
        "states": jobs.STATES,
        "now": timezone.now(),
        "can_act": request.user.has_perm(ACT_ON_JOB),
        # The tabs; their counts come in a request of their own once the page is shown
        # (job_counts), so counting the live jobs never holds the page back.
        **_tabs(request, form, backend, counts=None),
        # Nothing to select on a tab of jobs that can no longer change (done, dead, running).
        "can_select": request.user.has_perm(ACT_ON_JOB)
        and (not form.cleaned_data.get("state") or form.cleaned_data["state"] in jobs.WAITING),
        "waiting": jobs.WAITING,
        "max_selection": f"{setting('MAX_SELECTION'):,}",
        # Several queue databases: this list is one backend's, the others a link (a whole page:
        # the heading, tabs and filter say the backend) away.
        "backend": backend,
        "several": databases.multiple(),
        "backend_choices": databases.choices(),
        "default_backend": databases.default().name,
        # Appended to each row's links (its page, its dead letter): its backend, unless default.
        "job_query": databases.query(backend),
    }
    return render_page(request, "deadletters/jobs.html", "job-results", context)


def _tabs(request, form, backend, counts) -> dict:
    """The state tabs of `form`'s filter: each links to its state under the same filters, with
    its count (jobs.TabCount) once `counts` are read, or a request for them."""
    state = form.cleaned_data.get("state") or ""
    kept = [(k, v) for k, v in backend_echo(backend) + form.echo() if k != "state"]
    base = urlencode(kept)
    return {
        "tabs": [
            (value, label, counts[value] if counts else None, urlencode([*kept, ("state", value)]))
            for value, label in jobs.STATES.items()
        ],
        "all_count": counts[""] if counts else None,
        "all_query": base,
        "counted": counts is not None,
        # Every tab's count is missing for one reason (a text search): said once.
        "uncounted_why": counts[""].why if counts and counts[""].count is None else "",
        "current_state": state,
        "tabs_query": urlencode([*kept, ("state", state)]),
    }


@require_GET
@console_view
def job_counts(request):
    """The jobs browser's state tabs with how many jobs each holds under the page's filters
    (jobs.tab_counts: capped, or not counted, and saying so); fetched by the page once it is
    shown."""
    backend = backend_named(request.GET.get("backend"))
    form = JobFilterForm(request.GET)
    f = filter_for(form, request.user)
    counts = jobs.tab_counts(f, timezone.now(), backend.database)
    context = {
        **_tabs(request, form, backend, counts),
        "backend": backend,
        "job_query": databases.query(backend),
    }
    return render(request, "deadletters/jobs.html#state-tabs", context)


@require_GET
@console_view
def job_detail(request, pk):
    backend = backend_named(request.GET.get("backend"))
    try:
        detail = jobs.detail(pk, using=backend.database)
    except Job.DoesNotExist:
        raise NotFound("job", pk, JOB_GONE) from None
    context = {
        "d": detail,
        "job": detail.job,
        # Workflows are kept on default: a workflow's page is of the default backend's jobs.
        "workflow_id": workflows.for_job(detail.job) if backend.database == "default" else None,
        "can_act": request.user.has_perm(ACT_ON_JOB) and detail.state in jobs.WAITING,
        # A waiting job of a paused queue waits for the resume, whatever its time says.
        "queue_paused": store.queues.paused(backend.database).get(detail.job.queue_name),
        "backend": backend,
        "several": databases.multiple(),
        "job_query": databases.query(backend),
    }
    return render(request, "deadletters/job.html", context)


def _job_url(pk, backend) -> str:
    return reverse("deadletters:job", args=[pk]) + databases.query(backend)


JOB_VERBS = ("run_now", "retry_now", "cancel")


@require_POST
@console_view
def job_act(request, pk):
    """Run one queued job now, retry it now or cancel it, from its page: permission, CSRF, a
    reason; in the queue database of the backend its form names (`backend`; none: the
    default one)."""
    backend = backend_named(request.POST.get("backend"))
    back = _job_url(pk, backend)
    verb = request.POST.get("action")
    if verb not in JOB_VERBS:
        actions.check("job.cancel", request.user)  # a refusal names what is missing
        messages.error(request, "Nothing changed: the action is run_now, retry_now or cancel.")
        return HttpResponseRedirect(back)
    data = request.POST.copy()
    data["job"] = str(pk)  # the job is the page's, whatever the form says
    # To its history, which now lists the change.
    return act(request, f"job.{verb}", back=back, done=lambda outcome: back + "#history", data=data)
