"""The Audit page."""

from django.shortcuts import render
from django.views.decorators.http import require_GET

from .. import edits, selectors
from ..forms import AuditFilterForm
from .base import console_view


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
