"""Read-only admin for the queue's dead letters and the console's audit log.

The audit log is append-only: no add, change or delete, and no bulk actions.
"""

from django.contrib import admin

from jobqueue.models import DeadLetter

from .models import ReplayItem, ReplayRun, Selection


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


class ReplayItemInline(admin.TabularInline):
    model = ReplayItem
    fields = ["dead_letter_id", "task_path", "outcome", "job_id", "skip_reason", "batch", "at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


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
    inlines = [ReplayItemInline]


@admin.register(ReplayItem)
class ReplayItemAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "dead_letter_id", "task_path", "outcome", "job_id", "at"]
    list_filter = ["outcome"]


@admin.register(Selection)
class SelectionAdmin(ReadOnlyAdmin):
    list_display = ["id", "operator", "action", "created_at"]
