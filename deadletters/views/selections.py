"""Frozen selections of letters or jobs: preview, then a reason and confirm."""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_http_methods, require_POST

from .. import conf, databases, jobs, search, selectors, services
from ..forms import (
    ConfirmForm,
    JobActionForm,
    JobConfirmForm,
    JobSelectionForm,
    SelectionForm,
    refusal,
)
from ..models import Selection
from ..roles import ACT_ON_JOB, ACTION_PERMISSION, POISON
from .base import (
    CONSOLE,
    Missing,
    NotFound,
    approval_threshold,
    backend_echo,
    backend_named,
    console_view,
    filter_for,
    require,
)


@require_POST
@console_view
def preview(request):
    """Freeze the chosen ids (ticked rows, or every row matching the filter) and preview."""
    action = request.POST.get("action")
    if action not in ACTION_PERMISSION:
        raise NotFound("such action", hint="Actions are replay and discard.")
    require(request.user, ACTION_PERMISSION[action])
    form = SelectionForm(request.POST)
    try:
        if not form.is_valid():
            # Also a filter field: "select all" with part of its filter ignored would freeze
            # more than the operator saw (or the letters of another backend).
            raise services.RefusedError(f"Refused: {refusal(form)}")
        # The letters' backend (its database recorded with the ids): ticked on its list or
        # its letter's page, or every letter of its filter.
        database = backend_named(form.cleaned_data.get("backend")).database
        if form.cleaned_data["select_all"]:
            f = filter_for(form, request.user)
            ids, recorded_filter = selectors.matching_ids(f), f.as_json()
        else:
            ids = form.cleaned_data["ids"]
            recorded_filter = {}  # hand-picked
        selection = services.freeze_selection(
            operator=request.user,
            action=action,
            ids=ids,
            filter=recorded_filter,
            database=database,
        )
    except (selectors.SelectionTooLarge, services.RefusedError) as exc:
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


def _own_selection(request, pk):
    selection = Selection.objects.filter(
        pk=pk, kind=Selection.Kind.LETTERS, operator=request.user
    ).first()
    if selection is not None and databases.of_database(selection.database) is None:
        raise NotFound(
            "selection",
            pk,
            f"Its letters are in database {selection.database!r}, which no Redrive TASKS "
            "backend uses now.",
        )
    if selection is None:
        raise NotFound(
            "selection",
            pk,
            "A selection is seen only by the operator who made it; make your own from the list.",
        )
    require(request.user, ACTION_PERMISSION[selection.action])
    return selection


@require_http_methods(["GET", "POST"])
@console_view
def confirm(request, pk):
    """GET: the preview of a frozen selection. POST: confirm it with a reason, start the run."""
    selection = _own_selection(request, pk)
    if hasattr(selection, "run"):
        return redirect("deadletters:run", pk=selection.run.pk)
    may_poison = request.user.has_perm(POISON)
    form = ConfirmForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        allow_poisoned = form.cleaned_data["allow_poisoned"]
        if allow_poisoned and not may_poison:
            raise Missing(POISON)
        try:
            run = services.start_run(
                operator=request.user,
                selection=selection,
                reason=form.cleaned_data["reason"],
                allow_poisoned=allow_poisoned,
                rate=form.cleaned_data["rate"],
                # A discard has none: the service keeps the canary to replays.
                canary_size=form.cleaned_data["canary_size"],
                canary_max_dead_share=form.cleaned_data["canary_max_dead_share"],
            )
        except services.RefusedError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("deadletters:run", pk=run.pk)
    allow_poisoned = may_poison and form.data.get("allow_poisoned") in ("on", "true", "1")
    context = {
        "selection": selection,
        "preview": selectors.preview(
            selection.ids,
            action=selection.action,
            allow_poisoned=allow_poisoned,
            using=selection.database,
        ),
        "backend": databases.of_database(selection.database),
        "several": databases.multiple(),
        "form": form,
        "can_replay_poisoned": may_poison,
        "max_replays": conf.get("MAX_REPLAYS"),
        "batch_size": conf.get("REPLAY_BATCH_SIZE"),
        "back": request.session.get(BACK_KEY.format(selection.pk), reverse("deadletters:list")),
        "approval_threshold": approval_threshold(),
    }
    return render(request, "deadletters/confirm.html", context, status=400 if form.errors else 200)


@require_POST
@console_view
def job_preview(request):
    """Freeze the chosen jobs (ticked rows, or every row matching the filter) of one backend's
    queue database (`backend`; none: the default one) and preview."""
    require(request.user, ACT_ON_JOB)
    backend = backend_named(request.POST.get("backend"))
    form = JobSelectionForm(request.POST)
    echo = backend_echo(backend) + (form.echo() if form.is_valid() else [])
    back = reverse("deadletters:jobs") + (f"?{urlencode(echo)}" if echo else "")
    try:
        if not form.is_valid():
            raise services.RefusedError(f"Refused: {refusal(form)}")
        if form.cleaned_data["select_all"]:
            f = filter_for(form, request.user)
            ids = jobs.matching_ids(f, conf.get("MAX_SELECTION"), using=backend.database)
            recorded = dict(form.echo())
        else:
            ids, recorded = form.cleaned_data["ids"], {}
        selection = services.freeze_selection(
            operator=request.user,
            kind=Selection.Kind.JOBS,
            action=form.cleaned_data["action"],
            ids=ids,
            filter=recorded,
            database=backend.database,
        )
    except (selectors.SelectionTooLarge, services.RefusedError) as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(back)
    except search.SearchTimedOut as exc:
        messages.error(request, f"Nothing selected: {exc}. Narrow it by state, task or queue.")
        return HttpResponseRedirect(back)
    return redirect("deadletters:job-confirm", pk=selection.pk)


@require_http_methods(["GET", "POST"])
@console_view
def job_confirm(request, pk):
    """GET: the preview of a frozen job selection. POST: confirm it with a reason, act (in the
    queue database its jobs are of)."""
    require(request.user, ACT_ON_JOB)
    selection = Selection.objects.filter(
        pk=pk, kind=Selection.Kind.JOBS, operator=request.user
    ).first()
    if selection is None:
        raise NotFound("selection", pk, "A selection is seen only by the operator who made it.")
    database = selection.database
    backend = databases.of_database(database)
    if backend is None:
        raise NotFound(
            "selection",
            pk,
            f"Its jobs are in database {database!r}, which no Redrive TASKS backend uses now.",
        )
    form = JobConfirmForm(request.POST or None)
    if request.method == "POST" and form.is_valid() and selection.applied_at is None:
        try:
            changed = services.apply_job_selection(
                selection, reason=form.cleaned_data["reason"], channel=CONSOLE
            )
        except services.RefusedError as exc:
            form.add_error(None, str(exc))
        else:
            verb = "made due now" if selection.action == "run_now" else "cancelled"
            skipped = len(selection.ids) - len(changed)
            messages.success(
                request,
                f"{len(changed)} job{'s' if len(changed) != 1 else ''} {verb}"
                + (f"; {skipped} skipped (no longer waiting)." if skipped else "."),
            )
            # The selection's page, which now says what was done (as a replay's run page).
            return redirect("deadletters:job-confirm", pk=selection.pk)
    back_filter = backend_echo(backend) + list((selection.filter or {}).items())
    context = {
        "selection": selection,
        "preview": jobs.preview(selection.ids, selection.action, using=database),
        "form": form,
        "label": dict(JobActionForm.base_fields["action"].choices)[selection.action],
        "back": reverse("deadletters:jobs") + "?" + urlencode(back_filter),
        "backend": backend,
        "several": databases.multiple(),
        "job_query": databases.query(backend),
    }
    return render(
        request, "deadletters/job_confirm.html", context, status=400 if form.errors else 200
    )
