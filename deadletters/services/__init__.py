"""Writes of the console: freeze a selection, run it batch by batch, pause, resume, cancel;
change queues, schedules and jobs; edit a letter and replay it.

Plain functions; the caller checks permissions. One module per concern; every name is
re-exported here, so callers say `services.start_run`.
"""

from .controls import (
    act_on_jobs,
    act_on_schedule,
    apply_job_selection,
    control_queue,
)
from .edit_replay import (
    EDIT_REPLAY,
    edit_and_replay,
    edit_params,
    refuse_unless_editable,
)
from .runs import (
    CANARY_ACTOR,
    CANARY_CHECK_SECONDS,
    CANARY_JOB_VERDICT,
    CANARY_LETTER_VERDICT,
    DEADLOCK_RETRIES,
    PACING_WINDOW,
    STATE_CHECK_SECONDS,
    BatchResult,
    CanaryTally,
    approve,
    canary_as_judged,
    canary_params,
    canary_tally,
    cancel,
    carry_out,
    pause,
    process_batch,
    resume,
    run_due,
    run_events,
    start_params,
    start_run,
)
from .selections import (
    PREVIEW_LIFETIME,
    RefusedError,
    check_destination,
    freeze_selection,
)

__all__ = [
    "CANARY_ACTOR",
    "CANARY_CHECK_SECONDS",
    "CANARY_JOB_VERDICT",
    "CANARY_LETTER_VERDICT",
    "DEADLOCK_RETRIES",
    "EDIT_REPLAY",
    "PACING_WINDOW",
    "PREVIEW_LIFETIME",
    "STATE_CHECK_SECONDS",
    "BatchResult",
    "CanaryTally",
    "RefusedError",
    "act_on_jobs",
    "act_on_schedule",
    "apply_job_selection",
    "approve",
    "canary_as_judged",
    "canary_params",
    "canary_tally",
    "cancel",
    "carry_out",
    "check_destination",
    "control_queue",
    "edit_and_replay",
    "edit_params",
    "freeze_selection",
    "pause",
    "process_batch",
    "refuse_unless_editable",
    "resume",
    "run_due",
    "run_events",
    "start_params",
    "start_run",
]
