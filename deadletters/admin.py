"""Read-only admin for the queue's dead letters and the console's audit log.

The audit log is append-only: no add, change or delete, and no bulk actions.
"""

import json

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from jobqueue.models import DeadLetter

from . import redaction
from .models import ReplayItem, ReplayRun, Reveal, RunEvent, Selection


class ReadOnlyAdmin(admin.ModelAdmin):
    actions = None

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
    return json.dumps(redaction.redact(value), indent=2, ensure_ascii=False, sort_keys=True)


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


@admin.register(Selection)
class SelectionAdmin(ReadOnlyAdmin):
    list_display = ["id", "operator", "action", "created_at"]


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "action", "operator_name", "at"]
    list_filter = ["action"]


@admin.register(Reveal)
class RevealAdmin(ReadOnlyAdmin):
    list_display = ["id", "at", "operator_name", "dead_letter_id", "task_path", "via"]
    list_filter = ["via"]
    search_fields = ["operator_name", "=dead_letter__id"]
