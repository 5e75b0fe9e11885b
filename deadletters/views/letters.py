"""Dead letters: the overview by job type, the list, a letter's page, reveal, export, edit
before replay."""

import json

from django.contrib import messages
from django.http import HttpResponseBadRequest, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from jobqueue.conf import setting
from jobqueue.models import DeadLetter
from jobqueue.store import sources

from .. import (
    actions,
    databases,
    edits,
    exports,
    redaction,
    search,
    selectors,
    services,
    summaries,
    workflows,
)
from ..forms import EditForm, FilterForm, ListPageForm, refusal
from ..models import Action
from ..roles import ACTION_PERMISSION, EDIT, POISON
from .base import (
    CONSOLE,
    DOING,
    NotFound,
    backend_named,
    console_view,
    filter_for,
    letter_permissions,
    no_such_backend,
    render_page,
    require,
    whole_page,
)

LETTER_GONE = "It may have been discarded and pruned, or the link has a typo."


@require_GET
@console_view
def overview(request):
    types = []
    for backend in databases.backends():
        for summary in summaries.by_type(using=backend.database):
            summary.backend = backend
            types.append(summary)
    context = {
        # Every backend's job types together, most pending first (one backend: as they come).
        "summaries": sorted(types, key=lambda s: (-s.count, s.task_path))
        if databases.multiple()
        else types,
        "several": databases.multiple(),
        "now": timezone.now(),
        "poll_seconds": setting("OVERVIEW_POLL_SECONDS"),
        "spark_marks": summaries.spark_marks(),
    }
    return render_page(request, "deadletters/overview.html", "groups", context)


@require_GET
@console_view
def letter_list(request):
    form = ListPageForm(request.GET)
    f = filter_for(form, request.user)
    if "backend" in form.errors:  # not ignored as other fields: it says which letters these are
        no_such_backend()
    backend = backend_named(f.backend)
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
        "choices": selectors.filter_choices(using=backend.database),
        "now": timezone.now(),
        # A job type's dead letters grouped by cause, each a link that filters to it.
        "search_bound": search.SQLITE_SCAN if f.q and search.bounded(backend.database) else None,
        # Several queue databases: this list is one backend's; the others' pending counts beside
        # it, each a link to its list, so no letter is out of sight.
        "backend": backend,
        "other_backends": [
            (other, selectors.pending_total(other.database))
            for other in databases.backends()
            if other != backend
        ],
        # Appended to each row's detail link: the letter's backend, unless the default one.
        "letter_query": databases.query(backend),
        # Detail pages are <overview>/<pk>/: one reverse() for the page instead of one per row.
        "detail_prefix": reverse("deadletters:overview"),
        **letter_permissions(request.user),
    }
    context["can_select"] = context["can_replay"] or context["can_discard"]
    # The filter form swaps itself with the rows (its fields carry their errors); the pager
    # swaps only the rows.
    partial = "listing" if request.htmx.target == "listing" else "results"
    if f.job_type and (partial == "listing" or whole_page(request)):
        # A job type's letters grouped by cause, above the rows: not for the pager, which
        # swaps only the rows.
        context["causes"] = summaries.causes(f.job_type, using=backend.database)
        context["spark_marks"] = summaries.spark_marks()
    return render_page(request, "deadletters/list.html", partial, context)


@require_GET
@console_view
def matching_count(request):
    form = FilterForm(request.GET)
    if not form.is_valid():
        # The list links here with its valid filters only; a count of some other filter than
        # the one a select-all would freeze must not be offered.
        return HttpResponseBadRequest(f"Invalid filter: {refusal(form)}", content_type="text/plain")
    count, more = selectors.count_matching(filter_for(form, request.user))
    return render(request, "deadletters/list.html#select-all", {"count": count, "more": more})


def _detail_permissions(user, detail, backend):
    link = detail.origin.link
    on_default = backend.database == "default"
    return {
        **letter_permissions(user),
        # A link to the letter's original (django-q2's admin page) only for who can open it.
        "can_follow_origin_link": link is not None and link.open_to(user),
        # Edit before replay: a pending letter of a source that replays an edited payload (of
        # the default database only: its record, PayloadEdit, points at a letter there).
        "can_edit": user.has_perm(EDIT) and on_default,
        "editable": detail.letter.state == "pending" and sources.editable(detail.letter.source),
        "backend": backend,
        "several": databases.multiple(),
        "letter_query": databases.query(backend),
    }


def _letter_detail(request, pk, *, redacted):
    """The letter `pk` of the backend the URL's `backend` names (none: the default one)."""
    backend = backend_named(request.GET.get("backend"))
    try:
        detail = selectors.detail(pk, redacted=redacted, using=backend.database)
    except DeadLetter.DoesNotExist:
        raise NotFound("dead letter", pk, LETTER_GONE) from None
    return backend, detail


def _letter_extras(backend, detail, *, redacted=True):
    """The workflow and payload edits of a letter: kept on default, so for its letters only
    (a workflow's page and an edit's record read default; ids repeat across databases)."""
    if backend.database != "default":
        return {"workflow_id": None, "edits": []}
    return {
        "workflow_id": workflows.for_letter(detail.letter),
        "edits": edits.of_letter(detail.letter.pk, redacted=redacted),
    }


@require_GET
@console_view
def letter_detail(request, pk):
    backend, detail = _letter_detail(request, pk, redacted=True)
    return render(
        request,
        "deadletters/detail.html",
        {
            "d": detail,
            "letter": detail.letter,
            **_letter_extras(backend, detail),
            **_detail_permissions(request.user, detail, backend),
        },
    )


@require_POST
@console_view
@never_cache
def reveal(request, pk):
    """The detail page with the masked values shown, for a user with the permission; each
    reveal is recorded. A POST, so a link or a reload never reveals (or records) by itself."""
    data = {"letter": pk, "backend": request.GET.get("backend") or ""}
    try:
        outcome = actions.perform("letter.reveal", user=request.user, channel=CONSOLE, data=data)
    except actions.Invalid:  # the one input not in the path: the backend
        no_such_backend()
    backend, detail = outcome.result
    return render(
        request,
        "deadletters/detail.html",
        {
            "d": detail,
            "letter": detail.letter,
            "revealed": True,
            # The edits' diffs unmasked too: this reveal is recorded for the letter.
            **_letter_extras(backend, detail, redacted=False),
            **_detail_permissions(request.user, detail, backend),
        },
    )


DOING[exports.EXPORT] = "export dead letters"


@require_POST
@console_view
@never_cache
def export(request):
    """The letters matching the list's filter as a CSV or JSON Lines download (`format`),
    streamed; audited (letters.export in the audit log), payloads masked. A POST with the CSRF
    token, like every request that writes (here, the audit entry): a link on another site
    cannot make a logged-in operator export. An invalid filter field is refused, never dropped:
    an export of more than the operator asked for is the one thing it must not do."""
    try:
        outcome = actions.perform(
            "letters.export", user=request.user, channel=CONSOLE, data=request.POST
        )
    except actions.Invalid as exc:
        refused = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in exc.errors.items())
        return HttpResponseBadRequest(f"Invalid filter: {refused}", content_type="text/plain")
    record, chunks = outcome.result
    fmt = outcome.data["format"]
    response = StreamingHttpResponse(
        (chunk.encode("utf-8") for chunk in chunks), content_type=exports.CONTENT_TYPES[fmt]
    )
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(record)}"'
    return response


DOING[EDIT] = "edit a dead letter's payload and replay it"


def _payload_text(letter, *, redacted: bool) -> dict:
    """The edit form's initial text: the letter's payload as pretty JSON, masked or not."""
    payload = {"args": letter.args, "kwargs": letter.kwargs}
    if redacted:
        payload = {name: redaction.redact(value) for name, value in payload.items()}
    return {
        name: json.dumps(value, indent=2, ensure_ascii=False) for name, value in payload.items()
    }


def _not_editable(letter) -> str:
    """Why this letter cannot be edited and replayed, or ""."""
    try:
        services.refuse_unless_editable(letter, allow_poisoned=True)
    except services.RefusedError as exc:
        return str(exc)
    return ""


def _not_beside_fields(exc, form) -> list[str]:
    """The registry's refusals the edit form does not already show beside one of its fields."""
    return [
        " ".join(errors)
        for name, errors in exc.errors.items()
        if name not in form.fields or name not in form.errors
    ] or ([] if form.errors else [str(exc)])


@require_http_methods(["GET", "POST"])
@console_view
@never_cache
def edit_letter(request, pk):
    """Edit before replay. GET: the letter's payload as JSON in a form, masked values masked
    (a masked value left as it is keeps its value). POST `reveal`: the same form unmasked, for
    a user who may reveal (recorded like the detail page's reveal). POST: replay the letter with
    the edited payload (deadletters.services.edit_and_replay), back to its page where the edit
    and its diff are listed; refused with the form saying why, nothing written."""
    require(request.user, EDIT)
    # An edit is a replay: it takes the replay permission too, whatever a custom grant gives.
    require(request.user, ACTION_PERMISSION[Action.REPLAY])
    if backend_named(request.GET.get("backend")).database != "default":
        # Its record (PayloadEdit) points at a letter on default: replay it as it is instead.
        raise NotFound(
            "edit of this backend's letters",
            hint="Edit before replay works on the letters of the default database only.",
        )
    letter = DeadLetter.objects.filter(pk=pk).first()
    if letter is None:
        raise NotFound("dead letter", pk, LETTER_GONE)
    may_poison = request.user.has_perm(POISON)
    refused = _not_editable(letter)
    revealed, status, form = False, 200, None
    if refused:
        status = 409 if request.method == "POST" else 200
    elif request.method == "POST" and "reveal" in request.POST:
        actions.perform(
            "letter.reveal",
            user=request.user,
            channel=CONSOLE,
            data={"letter": letter.pk, "for_edit": True},
        )
        revealed = True
        form = EditForm(initial=_payload_text(letter, redacted=False))
    elif request.method == "POST":
        form = EditForm(request.POST)
        try:
            outcome = actions.perform(
                "letter.edit_replay",
                user=request.user,
                channel=CONSOLE,
                data={**request.POST.dict(), "letter": letter.pk},
            )
        except actions.Invalid as exc:
            form.is_valid()  # its own messages beside its fields; the rest above them
            for message in _not_beside_fields(exc, form):
                form.add_error(None, message)
        except (actions.Conflict, actions.Gone) as exc:
            form.is_valid()
            form.add_error(None, str(exc))
        else:
            messages.success(request, outcome.message)
            return HttpResponseRedirect(
                reverse("deadletters:detail", args=[letter.pk]) + f"#edit-{outcome.result.pk}"
            )
        status = 400
    else:
        form = EditForm(initial=_payload_text(letter, redacted=True))
    context = {
        "letter": letter,
        "form": form,
        "refused": refused,
        "revealed": revealed,
        "can_reveal": request.user.has_perm(redaction.REVEAL_PERMISSION),
        "poisoned": letter.replays >= setting("MAX_REPLAYS"),
        "can_replay_poisoned": may_poison,
        "max_replays": setting("MAX_REPLAYS"),
        "masked": redaction.REDACTED,
    }
    return render(request, "deadletters/edit.html", context, status=status)
