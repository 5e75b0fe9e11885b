"""Thin views: parse the request, check the permission, call a selector or service, render.

HTMX requests get the partial that changes (`template#partial`), full loads the whole page.
"""

import json
from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import connections, transaction
from django.http import (
    Http404,
    HttpResponseBadRequest,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from jobqueue import store
from jobqueue.models import AuditEntry, DeadLetter, Job, Schedule, ScheduleRun, Workflow
from jobqueue.store import sources

from . import (
    conf,
    databases,
    edits,
    exports,
    jobs,
    redaction,
    search,
    selectors,
    services,
    workflows,
)
from .forms import (
    AuditFilterForm,
    ConfirmForm,
    EditForm,
    FilterForm,
    JobActionForm,
    JobConfirmForm,
    JobFilterForm,
    JobSelectionForm,
    ListPageForm,
    QueueControlForm,
    RunPageForm,
    ScheduleActionForm,
    SelectionForm,
    refusal,
)
from .models import Action, ReplayRun, RunState, Selection
from .roles import ACT_ON_JOB, ACTION_PERMISSION, EDIT, MANAGE_SCHEDULE, PAUSE_QUEUE, POISON, VIEW

LETTER_GONE = "It may have been discarded and pruned, or the link has a typo."

# Every change made here is audited as done through the console.
CONSOLE = AuditEntry.Channel.CONSOLE


# What each permission lets one do, for the 403 page that names the one missing.
DOING = {
    VIEW: "browse the dead-letter console",
    ACTION_PERMISSION[Action.REPLAY]: "replay dead letters",
    ACTION_PERMISSION[Action.DISCARD]: "discard dead letters",
    POISON: "replay items past the poison limit",
    redaction.REVEAL_PERMISSION: "see masked payload values",
    PAUSE_QUEUE: "pause or resume queues",
    MANAGE_SCHEDULE: "pause, resume or run schedules",
    ACT_ON_JOB: "run queued jobs now or cancel them",
}


class Missing(PermissionDenied):
    """Refused for want of `permission`: the console's 403 page names it and the role that
    holds it."""

    def __init__(self, permission):
        super().__init__(permission)
        self.permission = permission


class NotFound(Http404):
    """A row the URL names that does not exist (any more): the 404 page says which."""

    def __init__(self, what, pk=None, hint=""):
        super().__init__(f"No {what} #{pk}" if pk is not None else f"No {what}")
        self.what, self.pk, self.hint = what, pk, hint


def require(user, permission):
    if not user.has_perm(permission):
        raise Missing(permission)


def console_view(view):
    """Login required (redirect to the login page), then the view permission; a refusal or a
    missing row inside is answered with the console's own page saying why and where to go."""

    @login_required
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        try:
            require(request.user, VIEW)
            return view(request, *args, **kwargs)
        except (PermissionDenied, Http404) as exc:
            # Answered here rather than raised: under ATOMIC_REQUESTS a refusal must still
            # roll back whatever the request wrote before it.
            for connection in connections.all(initialized_only=True):
                if connection.settings_dict["ATOMIC_REQUESTS"] and connection.in_atomic_block:
                    transaction.set_rollback(True, using=connection.alias)
            if isinstance(exc, Http404):
                return page_not_found(request, exc)
            return permission_denied(request, exc)

    return wrapped


def _role_with(permission) -> str | None:
    """The smallest console role that holds `permission`."""
    from .roles import ROLE_PERMISSIONS

    return next((role for role, held in ROLE_PERMISSIONS.items() if permission in held), None)


def permission_denied(request, exception=None, template_name="deadletters/error.html"):
    """403 in the console's layout, naming the missing permission where it is known (also
    usable as a project's handler403)."""
    permission = getattr(exception, "permission", None)
    context = {
        "status": 403,
        "title": "Not allowed",
        "permission": permission,
        "doing": DOING.get(permission),
        "role": _role_with(permission) if permission else None,
    }
    return render(request, template_name, context, status=403)


@require_GET
def favicon(request):
    """The console's icon at a project's /favicon.ico, which browsers ask for on pages that
    link none (the admin's, for one). A temporary redirect: the static name may be hashed."""
    return HttpResponseRedirect(static("deadletters/favicon.svg"))


def page_not_found(request, exception=None, template_name="deadletters/error.html"):
    """404 in the console's layout, saying what was not found (also usable as a project's
    handler404)."""
    context = {
        "status": 404,
        "title": "Not found",
        "what": getattr(exception, "what", None),
        "pk": getattr(exception, "pk", None),
        "hint": getattr(exception, "hint", ""),
        "path": request.path,
    }
    return render(request, template_name, context, status=404)


def whole_page(request) -> bool:
    """A normal load, a boosted link, or htmx's history restore (which also sends HX-Request,
    and must get a page back): the whole page, not a partial."""
    htmx = request.htmx
    return not htmx or htmx.boosted or htmx.history_restore_request


def render_page(request, template, partial, context):
    """The partial for an HTMX swap; the whole page for a normal load, a boosted link, and
    htmx's history restore (which also sends HX-Request, and must get a page back)."""
    whole = whole_page(request)
    response = render(request, template if whole else f"{template}#{partial}", context)
    # One URL, two bodies: caches (the browser's back button included) must key on the header.
    patch_vary_headers(response, ("HX-Request",))
    return response


def _backend(name) -> databases.QueueBackend:
    """The queue backend a URL's `backend` names (none: the default one), or the console's 404
    naming the backends there are."""
    found = databases.named(name)
    if found is None:
        _no_such_backend()
    return found


def _no_such_backend():
    raise NotFound(
        "such backend",
        hint="Backends are the Redrive TASKS backends: "
        + ", ".join(b.name for b in databases.backends())
        + ".",
    )


@require_GET
@console_view
def overview(request):
    summaries = []
    for backend in databases.backends():
        for summary in selectors.overview(using=backend.database):
            summary.backend = backend
            summaries.append(summary)
    context = {
        # Every backend's job types together, most pending first (one backend: as they come).
        "summaries": sorted(summaries, key=lambda s: (-s.count, s.task_path))
        if databases.multiple()
        else summaries,
        "several": databases.multiple(),
        "now": timezone.now(),
        "poll_seconds": conf.get("OVERVIEW_POLL_SECONDS"),
    }
    return render_page(request, "deadletters/overview.html", "groups", context)


@require_GET
@console_view
def letter_list(request):
    form = ListPageForm(request.GET)
    f = _filter(form, request.user)
    if "backend" in form.errors:  # not ignored as other fields: it says which letters these are
        _no_such_backend()
    backend = _backend(f.backend)
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
        **_permissions(request.user),
    }
    context["can_select"] = context["can_replay"] or context["can_discard"]
    # The filter form swaps itself with the rows (its fields carry their errors); the pager
    # swaps only the rows.
    partial = "listing" if request.htmx.target == "listing" else "results"
    if f.job_type and (partial == "listing" or whole_page(request)):
        # A job type's letters grouped by cause, above the rows: not for the pager, which
        # swaps only the rows.
        context["causes"] = selectors.causes(f.job_type, using=backend.database)
    return render_page(request, "deadletters/list.html", partial, context)


@require_GET
@console_view
def matching_count(request):
    form = FilterForm(request.GET)
    if not form.is_valid():
        # The list links here with its valid filters only; a count of some other filter than
        # the one a select-all would freeze must not be offered.
        return HttpResponseBadRequest(f"Invalid filter: {refusal(form)}", content_type="text/plain")
    count, more = selectors.count_matching(_filter(form, request.user))
    return render(request, "deadletters/list.html#select-all", {"count": count, "more": more})


def _filter(form, user):
    """The form's filter for `user`: its search looks in payload values only for one who may
    see them unmasked, or a search would tell which rows hold a masked value."""
    return form.to_filter(payload_search=user.has_perm(redaction.REVEAL_PERMISSION))


def _permissions(user):
    return {
        "can_replay": user.has_perm(ACTION_PERMISSION[Action.REPLAY]),
        "can_discard": user.has_perm(ACTION_PERMISSION[Action.DISCARD]),
        "can_replay_poisoned": user.has_perm(POISON),
        "can_reveal": user.has_perm(redaction.REVEAL_PERMISSION),
    }


def _detail_permissions(user, detail, backend):
    link = detail.origin.link
    on_default = backend.database == "default"
    return {
        **_permissions(user),
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
    backend = _backend(request.GET.get("backend"))
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
    require(request.user, redaction.REVEAL_PERMISSION)
    backend, detail = _letter_detail(request, pk, redacted=False)
    redaction.record_reveal(request.user, detail.letter, via="console")
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
        database = _backend(form.cleaned_data.get("backend")).database
        if form.cleaned_data["select_all"]:
            f = _filter(form, request.user)
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
        "approval_threshold": _approval_threshold(),
    }
    return render(request, "deadletters/confirm.html", context, status=400 if form.errors else 200)


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
        poll_every = conf.get("OVERVIEW_POLL_SECONDS")
    elif any(item.job_outcome == "pending" for item in items):
        # Ended, but jobs it made have not run yet: their outcomes still change.
        poll_every = conf.get("OVERVIEW_POLL_SECONDS")
    else:
        poll_every = None
    poll_url = reverse("deadletters:run", args=[run.pk])
    return {
        "run": run,
        "items": items,
        "next_after": next_after,
        "can_control": request.user.has_perm(ACTION_PERMISSION[run.action]),
        "can_approve": _may_approve(request.user, run),
        "queue": conf.get("REPLAY_QUEUE"),
        "notice": notice,
        "poll_every": poll_every,
        "poll_url": f"{poll_url}?after={after}" if after else poll_url,
        # The ledger's letters are the selection's database's: their links say its backend.
        "backend": databases.of_database(run.selection.database),
        "several": databases.multiple(),
        "letter_query": databases.query(databases.of_database(run.selection.database)),
        "canary": services.canary_as_judged(run) if run.canary_size else None,
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
    require(request.user, ACTION_PERMISSION[run.action])
    handler = {"pause": services.pause, "resume": services.resume, "cancel": services.cancel}
    notice = ""
    if not handler[command](run, operator=request.user, channel=CONSOLE):
        notice = f"The run is {run.get_state_display().lower()}; nothing to {command}."
    if request.htmx:  # the swapped partial carries the notice: no page load would show it
        run.refresh_from_db()
        context = _run_context(request, run, notice=notice)
        return render(request, "deadletters/run.html#live", context)
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
    exports_ = selectors.audit_exports(form.to_filter())
    return render(
        request,
        "deadletters/audit.html",
        {
            "runs": runs,
            "exports": exports_,
            "entries": selectors.audit_entries(
                form.to_filter(), after=form.cleaned_data.get("entries_after")
            ),
            "edits": edits.for_audit(form.to_filter()),
            "next_before": next_before,
            "form": form,
            "filter_query": form.query(),
        },
    )


@require_POST
@console_view
def queue_control(request):
    """Pause or resume a queue (the health page's form): permission-checked, with a reason
    that the audit keeps; back to the health page saying what happened."""
    require(request.user, PAUSE_QUEUE)
    form = QueueControlForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing changed ({refusal(form)}).")
        return redirect("deadletters:health")
    action, queue = form.cleaned_data["action"], form.cleaned_data["queue"]
    backend = _backend(form.cleaned_data["backend"])
    try:
        changed = services.control_queue(
            action,
            queue,
            operator=request.user,
            reason=form.cleaned_data["reason"],
            allow_unknown=form.cleaned_data["allow_unknown"],
            channel=CONSOLE,
            using=backend.database,
        )
    except store.queues.UnknownQueue as exc:
        messages.error(
            request,
            f"Nothing changed: {exc}. To pause it before its first job, tick "
            "“Pause a queue that has no jobs yet”.",
        )
        return HttpResponseRedirect(reverse("deadletters:health") + "#queue-control")
    except ValueError as exc:
        messages.error(request, f"Nothing changed: {exc}.")
        return redirect("deadletters:health")
    done = "paused" if action == "pause" else "resumed"
    if not changed:
        messages.warning(request, f"Queue {queue} was already {done}: nothing changed.")
        return redirect("deadletters:health")
    messages.success(request, f"Queue {queue} {done}.")
    return HttpResponseRedirect(reverse("deadletters:health") + "#queue-control")


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


WORKFLOW_GONE = (
    "A workflow's id is the id of the job first enqueued for it; a task that never called a "
    "step is no workflow, or the link has a typo."
)


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


JOB_GONE = "Finished jobs may have been pruned, or the link has a typo."


def _backend_echo(backend) -> list[tuple[str, str]]:
    """`backend` as a filter field for links and forms; none for the default backend, so a
    single backend's URLs stay as they were."""
    return [] if backend == databases.default() else [("backend", backend.name)]


@require_GET
@console_view
def job_list(request):
    """Every job, not only dead ones: by state, task, queue, key and text, newest first; of one
    backend's queue database (`backend`, the default one's if none)."""
    backend = _backend(request.GET.get("backend"))
    form = JobFilterForm(request.GET)
    f = _filter(form, request.user)
    cursors = form.cleaned_data
    echo = _backend_echo(backend) + form.echo()
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
        "waiting": jobs.WAITING,
        "max_selection": f"{conf.get('MAX_SELECTION'):,}",
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


@require_GET
@console_view
def job_detail(request, pk):
    backend = _backend(request.GET.get("backend"))
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
        "backend": backend,
        "several": databases.multiple(),
        "job_query": databases.query(backend),
    }
    return render(request, "deadletters/job.html", context)


def _job_url(pk, backend) -> str:
    return reverse("deadletters:job", args=[pk]) + databases.query(backend)


@require_POST
@console_view
def job_act(request, pk):
    """Run one queued job now or cancel it, from its page: permission, CSRF, a reason; in the
    queue database of the backend its form names (`backend`; none: the default one)."""
    require(request.user, ACT_ON_JOB)
    backend = _backend(request.POST.get("backend"))
    form = JobActionForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing changed ({refusal(form)}).")
        return HttpResponseRedirect(_job_url(pk, backend))
    action = form.cleaned_data["action"]
    changed = services.act_on_jobs(
        action,
        [pk],
        operator=request.user,
        reason=form.cleaned_data["reason"],
        channel=CONSOLE,
        using=backend.database,
    )
    if changed:
        messages.success(
            request, f"Job {pk} {'is due now' if action == 'run_now' else 'cancelled'}."
        )
        # To its history, which now lists the change.
        return HttpResponseRedirect(_job_url(pk, backend) + "#history")
    why = "for a later time" if action == "run_now" else "(it started, finished or is gone)"
    messages.warning(request, f"Nothing changed: job {pk} is not waiting {why}.")
    return HttpResponseRedirect(_job_url(pk, backend))


@require_POST
@console_view
def job_preview(request):
    """Freeze the chosen jobs (ticked rows, or every row matching the filter) of one backend's
    queue database (`backend`; none: the default one) and preview."""
    require(request.user, ACT_ON_JOB)
    backend = _backend(request.POST.get("backend"))
    form = JobSelectionForm(request.POST)
    echo = _backend_echo(backend) + (form.echo() if form.is_valid() else [])
    back = reverse("deadletters:jobs") + (f"?{urlencode(echo)}" if echo else "")
    try:
        if not form.is_valid():
            raise services.RefusedError(f"Refused: {refusal(form)}")
        if form.cleaned_data["select_all"]:
            f = _filter(form, request.user)
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
    back_filter = _backend_echo(backend) + list((selection.filter or {}).items())
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


DOING[exports.EXPORT] = "export dead letters"


@require_POST
@console_view
@never_cache
def export(request):
    """The letters matching the list's filter as a CSV or JSON Lines download (`format`),
    streamed; audited (deadletters.Export), payloads masked. A POST with the CSRF token, like
    every request that writes (here, the audit row): a link on another site cannot make a
    logged-in operator export. An invalid filter field is refused, never dropped: an export of
    more than the operator asked for is the one thing it must not do."""
    require(request.user, exports.EXPORT)
    fmt = request.POST.get("format", "")
    if fmt not in exports.FORMATS:
        return HttpResponseBadRequest(
            "Invalid format: ask for format=csv or format=jsonl.", content_type="text/plain"
        )
    form = FilterForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(f"Invalid filter: {refusal(form)}", content_type="text/plain")
    record, chunks = exports.export(
        operator=request.user,
        filter=_filter(form, request.user),
        fmt=fmt,
    )
    response = StreamingHttpResponse(
        (chunk.encode("utf-8") for chunk in chunks), content_type=exports.CONTENT_TYPES[fmt]
    )
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(record)}"'
    return response


# --- edit before replay; the two-person rule (issue 18) -------------------------------------

DOING[EDIT] = "edit a dead letter's payload and replay it"


def _approval_threshold():
    """The approval threshold for the confirm page's notice (None when off or misconfigured:
    `manage.py check` names a bad value, and confirming refuses with its message)."""
    try:
        return conf.approval_threshold()
    except ValueError:
        return None


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
    require(request.user, ACTION_PERMISSION[run.action])
    if run.allow_poisoned:
        require(request.user, POISON)
    try:
        services.approve(run, operator=request.user, channel=CONSOLE)
    except services.RefusedError as exc:
        run.refresh_from_db()
        response = render_page(
            request, "deadletters/run.html", "live", _run_context(request, run, notice=str(exc))
        )
        response.status_code = 403 if run.operator_id == request.user.pk else 409
        return response
    messages.success(request, f"Approved: run #{run.pk} has started.")
    return redirect("deadletters:run", pk=run.pk)


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
    if _backend(request.GET.get("backend")).database != "default":
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
        require(request.user, redaction.REVEAL_PERMISSION)
        redaction.record_reveal(request.user, letter, via="edit")
        revealed = True
        form = EditForm(initial=_payload_text(letter, redacted=False))
    elif request.method == "POST":
        form = EditForm(request.POST)
        if form.is_valid():
            allow_poisoned = form.cleaned_data["allow_poisoned"]
            if allow_poisoned and not may_poison:
                raise Missing(POISON)
            try:
                edit = services.edit_and_replay(
                    operator=request.user,
                    dead_letter_id=letter.pk,
                    args=form.cleaned_data["args"],
                    kwargs=form.cleaned_data["kwargs"],
                    reason=form.cleaned_data["reason"],
                    allow_poisoned=allow_poisoned,
                )
            except services.RefusedError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(
                    request, f"Replayed with the edited payload: job {edit.job_id} is queued."
                )
                return HttpResponseRedirect(
                    reverse("deadletters:detail", args=[letter.pk]) + f"#edit-{edit.pk}"
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
        "poisoned": letter.replays >= conf.get("MAX_REPLAYS"),
        "can_replay_poisoned": may_poison,
        "max_replays": conf.get("MAX_REPLAYS"),
        "masked": redaction.REDACTED,
    }
    return render(request, "deadletters/edit.html", context, status=status)
