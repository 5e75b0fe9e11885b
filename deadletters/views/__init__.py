"""The console's views, one module per resource, on the kit in `base`.

HTMX requests get the partial that changes (`template#partial`), full loads the whole page.
The names below are the URLconf's and a project's (handler403/handler404, favicon).
"""

from .audit import audit, audit_export
from .base import (
    Missing,
    NotFound,
    console_view,
    favicon,
    page_not_found,
    permission_denied,
    render_page,
    require,
    whole_page,
)
from .jobs import job_act, job_counts, job_detail, job_list
from .letters import (
    edit_letter,
    export,
    letter_detail,
    letter_list,
    matching_count,
    overview,
    reveal,
)
from .queues import queue_control, worker_control
from .runs import run_approve, run_control, run_detail
from .schedules import schedule_act, schedule_list
from .selections import confirm, job_confirm, job_preview, preview
from .tokens import token_list, token_revoke
from .workflows import workflow_detail, workflow_list, workflow_signal

__all__ = [
    "Missing",
    "NotFound",
    "audit",
    "audit_export",
    "confirm",
    "console_view",
    "edit_letter",
    "export",
    "favicon",
    "job_act",
    "job_confirm",
    "job_counts",
    "job_detail",
    "job_list",
    "job_preview",
    "letter_detail",
    "letter_list",
    "matching_count",
    "overview",
    "page_not_found",
    "permission_denied",
    "preview",
    "queue_control",
    "render_page",
    "require",
    "reveal",
    "run_approve",
    "run_control",
    "run_detail",
    "schedule_act",
    "schedule_list",
    "token_list",
    "token_revoke",
    "whole_page",
    "worker_control",
    "workflow_detail",
    "workflow_list",
    "workflow_signal",
]
