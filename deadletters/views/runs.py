"""Replay runs: the live page, pause/resume/cancel, the two-person approval."""

from django.contrib import messages
from django.http import HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from jobqueue.conf import setting

from .. import actions, databases, selectors, services
from ..forms import RunPageForm, refusal
from ..models import ReplayRun, RunState
from ..roles import ACTION_PERMISSION, POISON
from .base import CONSOLE, NotFound, console_view, render_page


def _run(pk):
    try:
        return ReplayRun.objects.get(pk=pk)
    except ReplayRun.DoesNotExist:
        raise NotFound("replay run", pk, "The audit log lists every run.") from None


def _run_context(request, run, *, after=None, notice=""):
    """The run page's live part: the run read first, then only the ledger rows of the batches
    it counts, so progress and ledger agree even while a batch commits between the reads."""
    items, next_after = selectors.run_items(run, after=after, through_batch=run.batches)
    if run.is_active:
        poll_every = 1
    elif run.state == RunState.AWAITING:  # until someone else's approval starts it
        poll_every = setting("OVERVIEW_POLL_SECONDS")
    elif any(item.job_outcome == "pending" for item in items):
        # Ended, but jobs it made have not run yet: their outcomes still change.
        poll_every = setting("OVERVIEW_POLL_SECONDS")
    else:
        poll_every = None
    poll_url = reverse("deadletters:run", args=[run.pk])
    return {
        "run": run,
        "items": items,
        "next_after": next_after,
        "can_control": request.user.has_perm(ACTION_PERMISSION[run.action]),
        "can_approve": _may_approve(request.user, run),
        "queue": setting("REPLAY_QUEUE"),
        "notice": notice,
        "poll_every": poll_every,
        "poll_url": f"{poll_url}?after={after}" if after else poll_url,
        # The ledger's letters are the selection's database's: their links say its backend.
        "backend": databases.of_database(run.selection.database),
        "several": databases.multiple(),
        "letter_query": databases.query(databases.of_database(run.selection.database)),
        "canary": services.canary_as_judged(run) if run.canary_size else None,
        "times": selectors.run_times(run, timezone.now()),
        "events": services.run_events(run),
    }


@require_GET
@console_view
def run_detail(request, pk):
    run = _run(pk)
    form = RunPageForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest(f"Invalid page: {refusal(form)}", content_type="text/plain")
    context = _run_context(request, run, after=form.cleaned_data["after"])
    return render_page(request, "deadletters/run.html", "live", context)


@require_POST
@console_view
def run_control(request, pk, command):
    run = _run(pk)
    outcome = actions.perform(
        f"run.{command}", user=request.user, channel=CONSOLE, data={"run": run.pk}
    )
    notice = "" if outcome.changed else outcome.message
    if request.htmx:  # the swapped partial carries the notice: no page load would show it
        run.refresh_from_db()
        context = _run_context(request, run, notice=notice)
        return render(request, "deadletters/run.html#live", context)
    if notice:
        messages.warning(request, notice)
    return redirect("deadletters:run", pk=run.pk)


def _may_approve(user, run) -> bool:
    """Offer the Approve button: a run awaiting approval, to a user other than its requester
    who holds what the run does (services.approve checks it all again)."""
    return (
        run.state == RunState.AWAITING
        and user.pk != run.operator_id
        and user.has_perm(ACTION_PERMISSION[run.action])
        and (not run.allow_poisoned or user.has_perm(POISON))
    )


@require_POST
@console_view
def run_approve(request, pk):
    """The two-person rule: a second user approves a run awaiting approval, which starts it.
    The requester's own approval, a run not awaiting, a missing permission: refused, the run
    page saying why, nothing written."""
    run = _run(pk)
    try:
        outcome = actions.perform(
            "run.approve", user=request.user, channel=CONSOLE, data={"run": run.pk}
        )
    except actions.Conflict as exc:
        run.refresh_from_db()
        response = render_page(
            request, "deadletters/run.html", "live", _run_context(request, run, notice=str(exc))
        )
        response.status_code = 403 if run.operator_id == request.user.pk else 409
        return response
    messages.success(request, outcome.message)
    return redirect("deadletters:run", pk=run.pk)
