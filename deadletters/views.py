"""Thin views: parse the request, check the permission, call a selector or service, render.

HTMX requests get the partial that changes (`template#partial`), full loads the whole page.
"""

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from jobqueue.models import DeadLetter

from . import conf, redaction, selectors, services
from .forms import (
    AuditFilterForm,
    ConfirmForm,
    FilterForm,
    ListPageForm,
    RunPageForm,
    SelectionForm,
    refusal,
)
from .models import Action, ReplayRun, Selection
from .roles import ACTION_PERMISSION, POISON, VIEW


def console_view(view):
    """Login required (redirect to the login page), then the view permission (403)."""

    @login_required
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.has_perm(VIEW):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return wrapped


def render_page(request, template, partial, context):
    """The partial for an HTMX swap; the whole page for a normal load, a boosted link, and
    htmx's history restore (which also sends HX-Request, and must get a page back)."""
    htmx = request.htmx
    whole = not htmx or htmx.boosted or htmx.history_restore_request
    response = render(request, template if whole else f"{template}#{partial}", context)
    # One URL, two bodies: caches (the browser's back button included) must key on the header.
    patch_vary_headers(response, ("HX-Request",))
    return response


@require_GET
@console_view
def overview(request):
    context = {
        "summaries": selectors.overview(),
        "now": timezone.now(),
        "poll_seconds": conf.get("OVERVIEW_POLL_SECONDS"),
    }
    return render_page(request, "deadletters/overview.html", "groups", context)


@require_GET
@console_view
def letter_list(request):
    form = ListPageForm(request.GET)
    f = form.to_filter()
    cursors = form.cleaned_data
    result = selectors.page(f, after=cursors.get("after"), before=cursors.get("before"))
    echo = form.echo()
    context = {
        "form": form,
        "page": result,
        # Only the applied filter goes back into links and the selection form's hidden inputs:
        # an `ids` or `select_all` in the URL must not ride along into an operator's selection.
        "echo": echo,
        "shown_filter": [(name, value) for name, value in echo if name != "order"],
        "filter_query": form.query(),
        "choices": selectors.filter_choices(),
        "now": timezone.now(),
        # Detail pages are <overview>/<pk>/: one reverse() for the page instead of one per row.
        "detail_prefix": reverse("deadletters:overview"),
        **_permissions(request.user),
    }
    context["can_select"] = context["can_replay"] or context["can_discard"]
    return render_page(request, "deadletters/list.html", "results", context)


@require_GET
@console_view
def matching_count(request):
    form = FilterForm(request.GET)
    if not form.is_valid():
        # The list links here with its valid filters only; a count of some other filter than
        # the one a select-all would freeze must not be offered.
        return HttpResponseBadRequest(f"Invalid filter: {refusal(form)}", content_type="text/plain")
    count, more = selectors.count_matching(form.to_filter())
    return render(request, "deadletters/list.html#select-all", {"count": count, "more": more})


def _permissions(user):
    return {
        "can_replay": user.has_perm(ACTION_PERMISSION[Action.REPLAY]),
        "can_discard": user.has_perm(ACTION_PERMISSION[Action.DISCARD]),
        "can_replay_poisoned": user.has_perm(POISON),
        "can_reveal": user.has_perm(redaction.REVEAL_PERMISSION),
    }


@require_GET
@console_view
def letter_detail(request, pk):
    try:
        detail = selectors.detail(pk)
    except DeadLetter.DoesNotExist:
        raise Http404("No such dead letter") from None
    return render(
        request,
        "deadletters/detail.html",
        {"d": detail, "letter": detail.letter, **_permissions(request.user)},
    )


@require_POST
@console_view
@never_cache
def reveal(request, pk):
    """The detail page with the masked values shown, for a user with the permission; each
    reveal is recorded. A POST, so a link or a reload never reveals (or records) by itself."""
    if not request.user.has_perm(redaction.REVEAL_PERMISSION):
        raise PermissionDenied
    try:
        detail = selectors.detail(pk, redacted=False)
    except DeadLetter.DoesNotExist:
        raise Http404("No such dead letter") from None
    redaction.record_reveal(request.user, detail.letter, via="console")
    return render(
        request,
        "deadletters/detail.html",
        {"d": detail, "letter": detail.letter, "revealed": True, **_permissions(request.user)},
    )


@require_POST
@console_view
def preview(request):
    """Freeze the chosen ids (ticked rows, or every row matching the filter) and preview."""
    action = request.POST.get("action")
    if action not in ACTION_PERMISSION:
        raise Http404("Unknown action")
    if not request.user.has_perm(ACTION_PERMISSION[action]):
        raise PermissionDenied
    form = SelectionForm(request.POST)
    try:
        if not form.is_valid():
            # Also a filter field: "select all" with part of its filter ignored would freeze
            # more than the operator saw.
            raise services.RefusedError(f"Refused: {refusal(form)}")
        if form.cleaned_data["select_all"]:
            f = form.to_filter()
            ids, recorded_filter = selectors.matching_ids(f), f.as_json()
        else:
            ids = form.cleaned_data["ids"]
            recorded_filter = {}  # hand-picked
        selection = services.freeze_selection(
            operator=request.user, action=action, ids=ids, filter=recorded_filter
        )
    except (selectors.SelectionTooLarge, services.RefusedError) as exc:
        messages.error(request, str(exc))
        back = request.POST.get("back", "")
        # A path on this site only: redirect() would take "0" or "admin" for a view name.
        if not (
            back.startswith("/")
            and back.isprintable()
            and url_has_allowed_host_and_scheme(
                back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
            )
        ):
            back = reverse("deadletters:list")
        return HttpResponseRedirect(back)
    return redirect("deadletters:confirm", pk=selection.pk)


def _own_selection(request, pk):
    selection = get_object_or_404(Selection, pk=pk, operator=request.user)
    if not request.user.has_perm(ACTION_PERMISSION[selection.action]):
        raise PermissionDenied
    return selection


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
            raise PermissionDenied
        try:
            run = services.start_run(
                operator=request.user,
                selection=selection,
                reason=form.cleaned_data["reason"],
                allow_poisoned=allow_poisoned,
                rate=form.cleaned_data["rate"],
            )
        except services.RefusedError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("deadletters:run", pk=run.pk)
    allow_poisoned = may_poison and form.data.get("allow_poisoned") in ("on", "true", "1")
    context = {
        "selection": selection,
        "preview": selectors.preview(
            selection.dead_letter_ids, action=selection.action, allow_poisoned=allow_poisoned
        ),
        "form": form,
        "can_replay_poisoned": may_poison,
        "max_replays": conf.get("MAX_REPLAYS"),
        "batch_size": conf.get("REPLAY_BATCH_SIZE"),
    }
    return render(request, "deadletters/confirm.html", context, status=400 if form.errors else 200)


@require_GET
@console_view
def run_detail(request, pk):
    run = get_object_or_404(ReplayRun, pk=pk)
    form = RunPageForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest(f"Invalid page: {refusal(form)}", content_type="text/plain")
    items, next_after = selectors.run_items(run, after=form.cleaned_data["after"])
    context = {
        "run": run,
        "items": items,
        "next_after": next_after,
        "can_control": request.user.has_perm(ACTION_PERMISSION[run.action]),
        "queue": conf.get("QUEUE"),
    }
    return render_page(request, "deadletters/run.html", "progress", context)


@require_POST
@console_view
def run_control(request, pk, command):
    run = get_object_or_404(ReplayRun, pk=pk)
    if not request.user.has_perm(ACTION_PERMISSION[run.action]):
        raise PermissionDenied
    handler = {"pause": services.pause, "resume": services.resume, "cancel": services.cancel}
    notice = ""
    if not handler[command](run, operator=request.user):
        notice = f"The run is {run.get_state_display().lower()}; nothing to {command}."
    if request.htmx:  # the swapped partial carries the notice: no page load would show it
        context = {"run": run, "can_control": True, "queue": conf.get("QUEUE"), "notice": notice}
        return render(request, "deadletters/run.html#progress", context)
    if notice:
        messages.warning(request, notice)
    return redirect("deadletters:run", pk=run.pk)


@require_GET
@console_view
def audit(request):
    form = AuditFilterForm(request.GET)
    runs, next_before = selectors.audit_runs(
        form.to_filter(), before=form.cleaned_data.get("before")
    )
    return render(
        request,
        "deadletters/audit.html",
        {
            "runs": runs,
            "next_before": next_before,
            "form": form,
            "filter_query": form.query(),
        },
    )
