"""What every console view shares: login and the view permission, the 403 and 404 pages that
say why, htmx's partial-or-whole page, the backend a URL names."""

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import connections, transaction
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.templatetags.static import static
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from jobqueue.models import AuditEntry

from .. import actions, conf, databases, redaction
from ..actions import Gone, Missing
from ..models import Action
from ..roles import (
    ACT_ON_JOB,
    ACTION_PERMISSION,
    CONTROL_WORKER,
    MANAGE_SCHEDULE,
    PAUSE_QUEUE,
    POISON,
    VIEW,
)

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
    CONTROL_WORKER: "quiet or stop workers",
}


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
        except (PermissionDenied, Http404, Gone) as exc:
            # Answered here rather than raised: under ATOMIC_REQUESTS a refusal must still
            # roll back whatever the request wrote before it.
            for connection in connections.all(initialized_only=True):
                if connection.settings_dict["ATOMIC_REQUESTS"] and connection.in_atomic_block:
                    transaction.set_rollback(True, using=connection.alias)
            if isinstance(exc, Http404 | Gone):
                return page_not_found(request, exc)
            return permission_denied(request, exc)

    return wrapped


def role_with(permission) -> str | None:
    """The smallest console role that holds `permission`."""
    from ..roles import ROLE_PERMISSIONS

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
        "role": role_with(permission) if permission else None,
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


def backend_named(name) -> databases.QueueBackend:
    """The queue backend a URL's `backend` names (none: the default one), or the console's 404
    naming the backends there are."""
    found = databases.named(name)
    if found is None:
        no_such_backend()
    return found


def no_such_backend():
    raise NotFound(
        "such backend",
        hint="Backends are the Redrive TASKS backends: "
        + ", ".join(b.name for b in databases.backends())
        + ".",
    )


def filter_for(form, user):
    """The form's filter for `user`: its search looks in payload values only for one who may
    see them unmasked, or a search would tell which rows hold a masked value. The search box
    says which it is, so no one searches a payload value they see and finds nothing."""
    payload_search = user.has_perm(redaction.REVEAL_PERMISSION)
    form.fields["q"].label = form.SEARCH_LABELS[payload_search]
    return form.to_filter(payload_search=payload_search)


def letter_permissions(user):
    return {
        "can_replay": user.has_perm(ACTION_PERMISSION[Action.REPLAY]),
        "can_discard": user.has_perm(ACTION_PERMISSION[Action.DISCARD]),
        "can_replay_poisoned": user.has_perm(POISON),
        "can_reveal": user.has_perm(redaction.REVEAL_PERMISSION),
    }


def backend_echo(backend) -> list[tuple[str, str]]:
    """`backend` as a filter field for links and forms; none for the default backend, so a
    single backend's URLs stay as they were."""
    return [] if backend == databases.default() else [("backend", backend.name)]


def approval_threshold():
    """The approval threshold for the confirm page's notice (None when off or misconfigured:
    `manage.py check` names a bad value, and confirming refuses with its message)."""
    try:
        return conf.approval_threshold()
    except ValueError:
        return None


def act(request, name: str, *, back: str, done=None, data=None):
    """Carry out the registry's action `name` with the POSTed form, then back to the page it
    came from (`back`) saying what happened: an error for input refused or a target gone or
    not in a state for it, a warning for nothing changed, a success (to `done(outcome)` where
    given: the page that now shows the change) otherwise. A missing permission is the 403
    page (console_view). `data`: the input, where not the POSTed form as it is."""
    data = request.POST if data is None else data
    try:
        outcome = actions.perform(name, user=request.user, channel=CONSOLE, data=data)
    except (actions.Invalid, actions.Conflict, actions.Gone) as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(back)
    if not outcome.changed:
        messages.warning(request, outcome.message)
        return HttpResponseRedirect(back)
    messages.success(request, outcome.message)
    return HttpResponseRedirect(done(outcome) if done else back)
