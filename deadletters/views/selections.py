"""Frozen selections of letters or jobs: preview, then a reason and confirm, each step through
the action registry (deadletters.actions.freeze and confirm)."""

import unicodedata

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_http_methods, require_POST

from jobqueue.conf import setting

from .. import actions, databases, jobs, selectors
from ..forms import ConfirmForm, JobConfirmForm
from ..models import Selection
from ..roles import ACTION_PERMISSION, POISON
from .base import CONSOLE, NotFound, approval_threshold, backend_echo, backend_named, console_view


@require_POST
@console_view
def preview(request):
    """Freeze the chosen ids (ticked rows, or every row matching the filter) and preview."""
    action = request.POST.get("action")
    if action not in ACTION_PERMISSION:
        raise NotFound("such action", hint="Actions are replay and discard.")
    try:
        selection = actions.freeze(
            f"letters.{action}", user=request.user, channel=CONSOLE, data=request.POST
        )
    except (actions.Invalid, actions.Conflict) as exc:
        # Also a filter field: "select all" with part of its filter ignored would freeze more
        # than the operator saw (or the letters of another backend).
        messages.error(request, str(exc))
        return HttpResponseRedirect(_back(request))
    # The confirm page's Cancel returns to the list as filtered (or the detail page) it came
    # from; kept in the session, so the confirm page's address stays the selection's alone.
    request.session[BACK_KEY.format(selection.pk)] = _back(request)
    return redirect("deadletters:confirm", pk=selection.pk)


BACK_KEY = "deadletters:back:{}"


def _back(request) -> str:
    """The form's `back` path if it is a path on this site, else the list."""
    back = request.POST.get("back", "")
    # A path on this site only: redirect() would take "0" or "admin" for a view name.
    if (
        back.startswith("/")
        and back.isprintable()
        and url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    ):
        return back
    return reverse("deadletters:list")


def _own_selection(request, pk, kind=Selection.Kind.LETTERS):
    """The request's user's frozen selection `pk` of `kind`, if they may carry it out."""
    selection = actions.own_selection(pk, request.user)
    if selection.kind != kind:
        raise NotFound("selection", pk, "A selection is seen only by the operator who made it.")
    actions.check(actions.action_of(selection).name, request.user)
    return selection


# Refusals of the queue typed (services.check_destination), said beside its field; that the
# selection cannot go to another queue is said of the whole form (the field is not shown then).
DESTINATION_REFUSALS = {"unknown_queue", "queue_not_allowed"}


def _confirmed(request, selection, form):
    """Confirm `selection` with the POSTed reason (actions.confirm): its outcome, or None with
    `form` holding why not, its messages beside their fields as every channel words them."""
    try:
        return actions.confirm(selection.pk, user=request.user, channel=CONSOLE, data=request.POST)
    except (actions.Invalid, actions.Conflict) as exc:
        form.is_valid()
        if not isinstance(exc, actions.Conflict):
            return None
        if exc.code in DESTINATION_REFUSALS and "to_queue" in form.fields:
            hint = ""
            if exc.code == "unknown_queue":
                hint = f" To send them there anyway, tick “{form['allow_unknown_queue'].label}”."
            form.add_error("to_queue", f"{exc}{hint}")
        else:
            form.add_error(None, str(exc))
        return None


@require_http_methods(["GET", "POST"])
@console_view
def confirm(request, pk):
    """GET: the preview of a frozen selection. POST: confirm it with a reason, start the run."""
    selection = _own_selection(request, pk)
    if hasattr(selection, "run"):
        return redirect("deadletters:run", pk=selection.run.pk)
    may_poison = request.user.has_perm(POISON)
    allow_poisoned = may_poison and request.POST.get("allow_poisoned") in ("on", "true", "1")
    preview = selectors.preview(
        selection.ids,
        action=selection.action,
        allow_poisoned=allow_poisoned,
        using=selection.database,
    )
    last_rate = None
    if selection.action == "replay":
        last_rate = selectors.last_rate(path for path, _ in preview.by_type)
    initial = {"rate": last_rate.rate} if last_rate else {}
    # A canary as large as the selection is none (services.start_run): the field offers what
    # the run will do, 0, and its hint says why, rather than the default the run would ignore.
    canary_too_large = preview.total <= setting("CANARY_SIZE")
    if canary_too_large:
        initial["canary_size"] = 0
    form = ConfirmForm(request.POST or None, initial=initial)
    if request.method == "POST" and (outcome := _confirmed(request, selection, form)):
        if outcome.data.get("paused_queues"):
            messages.warning(request, outcome.message)  # allowed, and said
        return redirect("deadletters:run", pk=outcome.data["run"])
    backend = databases.of_database(selection.database)
    to_queue = (form["to_queue"].value() or "") if form.is_bound else ""
    # As the store names queues (NFC: store.queues.checked_name).
    typed = unicodedata.normalize("NFC", to_queue) if isinstance(to_queue, str) else ""
    destinations = [typed] if typed else [queue for queue, _ in preview.queues]
    context = {
        "selection": selection,
        "letters": True,
        "label": actions.action_of(selection).label,
        "preview": preview,
        "backend": backend,
        "backend_query": databases.query(backend),
        "several": databases.multiple(),
        "form": form,
        "last_rate": last_rate,
        "can_replay_poisoned": may_poison,
        "max_replays": setting("MAX_REPLAYS"),
        "batch_size": setting("REPLAY_BATCH_SIZE"),
        "back": request.session.get(BACK_KEY.format(selection.pk), reverse("deadletters:list")),
        "approval_threshold": approval_threshold(),
        "canary_default": setting("CANARY_SIZE"),
        "canary_too_large": canary_too_large,
        # A replay's destination as typed (its refusal, if any, is beside its field).
        "to_queue": to_queue,
        # The paused queues it would send jobs to: allowed (they wait there), and said.
        "paused_destinations": [
            (q, preview.paused[q]) for q in destinations if q in preview.paused
        ],
    }
    return render(request, "deadletters/confirm.html", context, status=400 if form.errors else 200)


@require_POST
@console_view
def job_preview(request):
    """Freeze the chosen jobs (ticked rows, or every row matching the filter) of one backend's
    queue database (`backend`; none: the default one) and preview."""
    backend = backend_named(request.POST.get("backend"))
    verb = request.POST.get("action")
    if verb not in actions.JOB_VERBS:
        actions.check("jobs.cancel", request.user)  # a refusal names what is missing
        verb = None
    form = actions.JobsSelectionForm(request.POST)
    echo = backend_echo(backend) + (form.echo() if form.is_valid() else [])
    back = reverse("deadletters:jobs") + (f"?{urlencode(echo)}" if echo else "")
    if verb is None:
        messages.error(request, "Nothing changed: the action is run_now or cancel.")
        return HttpResponseRedirect(back)
    try:
        selection = actions.freeze(
            f"jobs.{verb}", user=request.user, channel=CONSOLE, data=request.POST
        )
    except (actions.Invalid, actions.Conflict) as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(back)
    return redirect("deadletters:job-confirm", pk=selection.pk)


@require_http_methods(["GET", "POST"])
@console_view
def job_confirm(request, pk):
    """GET: the preview of a frozen job selection. POST: confirm it with a reason, act (in the
    queue database its jobs are of)."""
    selection = _own_selection(request, pk, Selection.Kind.JOBS)
    database = selection.database
    backend = databases.of_database(database)
    form = JobConfirmForm(request.POST or None)
    if (
        request.method == "POST"
        and selection.applied_at is None
        and (outcome := _confirmed(request, selection, form))
    ):
        messages.success(request, outcome.message)
        # The selection's page, which now says what was done (as a replay's run page).
        return redirect("deadletters:job-confirm", pk=selection.pk)
    back_filter = backend_echo(backend) + list((selection.filter or {}).items())
    context = {
        "selection": selection,
        "preview": jobs.preview(selection.ids, selection.action, using=database),
        "form": form,
        "label": actions.action_of(selection).label,
        "back": reverse("deadletters:jobs") + "?" + urlencode(back_filter),
        "backend": backend,
        "several": databases.multiple(),
        "backend_query": databases.query(backend),
    }
    return render(request, "deadletters/confirm.html", context, status=400 if form.errors else 200)
