"""The Audit page: the one audit log, filtered, paged and exported; the replay runs beside it."""

from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from .. import databases, exports, selectors
from ..forms import AUDIT_ACTIONS, AUDIT_TARGET_KINDS, AuditFilterForm, refusal
from .base import CONSOLE, console_view, require


@require_GET
@console_view
def audit(request):
    form = AuditFilterForm(request.GET)
    f = form.to_filter()
    cursors = form.cleaned_data
    entries = selectors.audit_entries(
        f, after=cursors.get("entries_after"), before=cursors.get("entries_before")
    )
    selectors.audit_links(entries.rows)
    for entry in entries.rows:
        entry.shown_params = selectors.audit_params(entry, request.user)
    runs, next_before = selectors.audit_runs(f, before=cursors.get("before"))
    return render(
        request,
        "deadletters/audit.html",
        {
            "entries": entries,
            "runs": runs,
            "next_before": next_before,
            "form": form,
            "filter_query": form.query(),
            "applied": form.applied(),
            "actions": AUDIT_ACTIONS,
            "kinds": AUDIT_TARGET_KINDS,
            "several": databases.multiple(),
            "can_export": request.user.has_perm(exports.EXPORT),
        },
    )


@require_POST
@console_view
@never_cache
def audit_export(request):
    """The entries matching the Audit page's filter as a CSV or JSON Lines download (`format`),
    streamed, parameters masked as the page shows them; the export is itself an entry
    (audit.export). A POST with the CSRF token, as every request that writes. An invalid filter
    field is refused, never dropped: an export of more than was asked for must not happen."""
    require(request.user, exports.EXPORT)
    fmt = request.POST.get("format", "")
    if fmt not in exports.FORMATS:
        return HttpResponseBadRequest(
            "Invalid format: ask for format=csv or format=jsonl.", content_type="text/plain"
        )
    form = AuditFilterForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(f"Invalid filter: {refusal(form)}", content_type="text/plain")
    record, chunks = exports.export_audit(
        operator=request.user, filter=form.to_filter(), fmt=fmt, channel=CONSOLE
    )
    response = StreamingHttpResponse(
        (chunk.encode("utf-8") for chunk in chunks), content_type=exports.CONTENT_TYPES[fmt]
    )
    response["Content-Disposition"] = f'attachment; filename="{exports.audit_filename(record)}"'
    return response
