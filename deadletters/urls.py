from django.urls import path, register_converter

from jobqueue.models import MAX_ID

from . import dashboard, views


class RowIdConverter:
    """A row id in the path: ASCII digits within bigint, else no match (a 404).

    Django's own <int:…> takes any length (the database then overflows); a regex group hands
    the view a string that int() may refuse (over 4,300 digits).
    """

    regex = "[0-9]{1,19}"

    def to_python(self, value):
        pk = int(value)
        if not 1 <= pk <= MAX_ID:
            raise ValueError(value)
        return pk

    def to_url(self, value):
        return str(value)


class RunCommandConverter:
    regex = "pause|resume|cancel"

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


register_converter(RowIdConverter, "row_id")
register_converter(RunCommandConverter, "run_command")

app_name = "deadletters"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("list/", views.letter_list, name="list"),
    path("list/count/", views.matching_count, name="count"),
    path("<row_id:pk>/", views.letter_detail, name="detail"),
    path("<row_id:pk>/reveal/", views.reveal, name="reveal"),
    path("<row_id:pk>/edit/", views.edit_letter, name="edit"),
    path("preview/", views.preview, name="preview"),
    path("selections/<row_id:pk>/", views.confirm, name="confirm"),
    path("runs/<row_id:pk>/", views.run_detail, name="run"),
    path("runs/<row_id:pk>/<run_command:command>/", views.run_control, name="run-control"),
    path("runs/<row_id:pk>/approve/", views.run_approve, name="run-approve"),
    path("audit/", views.audit, name="audit"),
    path("audit/export/", views.audit_export, name="audit-export"),
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/counts/", views.job_counts, name="job-counts"),
    path("jobs/<row_id:pk>/", views.job_detail, name="job"),
    path("jobs/<row_id:pk>/act/", views.job_act, name="job-act"),
    path("jobs/preview/", views.job_preview, name="job-preview"),
    path("jobs/selections/<row_id:pk>/", views.job_confirm, name="job-confirm"),
    path("health/", dashboard.dashboard, name="health"),
    path("health/tasks/<str:task>/", dashboard.task_timing, name="task-timing"),
    path("health/queues/", views.queue_control, name="queue-control"),
    path("health/workers/", views.worker_control, name="worker-control"),
    path("schedules/", views.schedule_list, name="schedules"),
    path("schedules/act/", views.schedule_act, name="schedule-act"),
    path("workflows/", views.workflow_list, name="workflows"),
    path("workflows/<row_id:pk>/", views.workflow_detail, name="workflow"),
    path("workflows/<row_id:pk>/signal/", views.workflow_signal, name="workflow-signal"),
    path("export/", views.export, name="export"),
    path("tokens/", views.token_list, name="tokens"),
    path("tokens/<row_id:pk>/revoke/", views.token_revoke, name="token-revoke"),
]
