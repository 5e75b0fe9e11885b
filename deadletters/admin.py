"""Read-only admin for the queue's dead letters and the console's audit log.

The audit log is append-only: no add, change or delete, and no bulk actions.
"""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from jobqueue.models import AuditEntry, DeadLetter

from . import redaction
from .models import ReplayItem, ReplayRun, Selection


class ReadOnlyAdmin(admin.ModelAdmin):
    actions = None
    # Filters a page of ours links to, beyond its list filters' own parameters.
    url_filters: tuple[str, ...] = ()

    def lookup_allowed(self, lookup, value, request):
        """Only the filters the page offers. Django's default takes a filter on any of the
        model's fields, with any lookup, from the URL: a key or regex lookup into a dead
        letter's hidden payload (shown unmasked only through the console's audited reveal) or
        into a saved selection's search words, or a malformed one the database refuses (a
        server error; so is a NUL in a value, on PostgreSQL). A refused one is a 400."""
        allowed = set(self.url_filters)
        for name in self.get_list_filter(request):
            allowed |= {f"{name}__exact", f"{name}__isnull"}
        return lookup in allowed and "\x00" not in str(value)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "task_path",
        "queue_name",
        "state",
        "error_class",
        "replays",
        "dead_lettered_at",
    ]
    list_filter = ["state", "queue_name"]
    search_fields = ["=id", "task_path", "idempotency_key"]
    show_full_result_count = False
    # The raw argument fields would show every secret: the admin shows the masked copy the
    # console shows (unmasked only through the console's audited Reveal).
    exclude = ["args", "kwargs"]
    readonly_fields = ["masked_args", "masked_kwargs"]

    @admin.display(description="Args")
    def masked_args(self, letter):
        return format_html("<pre>{}</pre>", _masked_json(letter.args))

    @admin.display(description="Kwargs")
    def masked_kwargs(self, letter):
        return format_html("<pre>{}</pre>", _masked_json(letter.kwargs))


def _masked_json(value):
    return redaction.pretty(redaction.redact(value))


@admin.register(ReplayRun)
class ReplayRunAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "operator_name",
        "action",
        "state",
        "requested",
        "done",
        "skipped",
    ]
    list_filter = ["action", "state"]
    search_fields = ["operator_name", "reason"]

    # A run can hold 100,000 items: link to them (paginated) rather than inline them all.
    @admin.display(description="Ledger")
    def ledger(self, run):
        items = reverse("admin:deadletters_replayitem_changelist") + f"?run__id__exact={run.pk}"
        return format_html(
            '<a href="{}">{} item(s)</a> · <a href="{}">run page in the console</a>',
            items,
            run.processed,
            reverse("deadletters:run", args=[run.pk]),
        )

    def get_readonly_fields(self, request, obj=None):
        return [*super().get_readonly_fields(request, obj), "ledger"]


@admin.register(ReplayItem)
class ReplayItemAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "dead_letter_id", "task_path", "outcome", "job_id", "at"]
    list_filter = ["outcome"]
    url_filters = ("run__id__exact",)  # ReplayRunAdmin.ledger's link


@admin.register(Selection)
class SelectionAdmin(ReadOnlyAdmin):
    list_display = ["id", "operator", "action", "created_at"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The one audit log, read-only (the ORM refuses changes to it anyway)."""

    list_display = ["seq", "at", "actor", "channel", "action", "target_kind", "reason"]
    list_filter = ["channel", "target_kind", "action"]
