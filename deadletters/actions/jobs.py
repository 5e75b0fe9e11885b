"""Job actions, one job or a frozen selection of jobs."""

from __future__ import annotations

from django.utils import timezone

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.models import (
    Job,
    JobStatus,
)

from .. import jobs, services
from ..forms import (
    JobConfirmForm,
)
from ..models import Selection
from ..roles import (
    ACT_ON_JOB,
)
from .forms import (
    JobForm,
    JobsSelectionForm,
)
from .kernel import (
    Action,
    Actor,
    Conflict,
    Gone,
    Outcome,
    backend_of,
    may_search_payloads,
    register,
)

JOB_VERBS = {"run_now": "made due now", "cancel": "cancelled"}  # of a selection of jobs


def _job_change(verb: str, *, retrying_only: bool = False):
    def carry_out(actor: Actor, cleaned) -> Outcome:
        backend, pk = backend_of(cleaned), cleaned["job"]
        job = Job.objects.using(backend.database).filter(pk=pk).first()
        if job is None:
            raise Gone("job", pk, "Finished jobs may have been pruned, or the id has a typo.")
        if retrying_only and JobStatus.of(job, timezone.now()) != JobStatus.RETRYING:
            raise Conflict(f"Nothing changed: job {pk} is not waiting for a retry.")
        changed = services.act_on_jobs(
            verb,
            [pk],
            operator=actor.user,
            reason=cleaned["reason"],
            channel=actor.channel,
            using=backend.database,
        )
        if changed:
            done = "is due now" if verb == "run_now" else "cancelled"
            paused = store.queues.paused(backend.database).get(job.queue_name)
            if verb == "run_now" and paused is not None:
                # Due, and yet no worker claims it: say why rather than leave them waiting.
                done += (
                    f", but its queue {job.queue_name} is paused (by {paused.paused_by}): it "
                    "runs once the queue is resumed"
                )
            return Outcome(True, f"Job {pk} {done}.", {"job": pk, "queue_paused": bool(paused)})
        why = "for a later time" if verb == "run_now" else "(it started, finished or is gone)"
        return Outcome(False, f"Nothing changed: job {pk} is not waiting {why}.", {"job": pk})

    return carry_out


def _select_jobs(actor: Actor, cleaned) -> tuple[list[int], dict, str]:
    backend = backend_of(cleaned)
    if cleaned["select_all"]:
        f = cleaned.form.to_filter(payload_search=may_search_payloads(actor))
        ids = jobs.matching_ids(f, setting("MAX_SELECTION"), using=backend.database)
        recorded = dict(cleaned.form.echo())
        # A bound as the moment it meant when frozen ("1h" read later would mean another hour).
        for name in ("since", "until"):
            if bound := cleaned.get(name):
                recorded[name] = bound.at.isoformat()
        return ids, recorded, backend.database
    return cleaned["ids"], {}, backend.database


def _apply_jobs(actor: Actor, cleaned, selection: Selection) -> Outcome:
    if selection.applied_at is not None:
        raise Conflict("This selection was already confirmed.")
    changed = services.apply_job_selection(
        selection, reason=cleaned["reason"], channel=actor.channel
    )
    verb = JOB_VERBS[selection.action]
    skipped = len(selection.ids) - len(changed)
    message = f"{len(changed)} job{'s' if len(changed) != 1 else ''} {verb}" + (
        f"; {skipped} skipped (no longer waiting)." if skipped else "."
    )
    return Outcome(
        bool(changed),
        message,
        {"selection": selection.pk, "changed_ids": changed, "skipped": skipped},
    )


register(
    Action(
        "job.run_now",
        "job",
        "Run now",
        "Make a scheduled or retrying job due now.",
        (ACT_ON_JOB,),
        JobForm,
        _job_change("run_now"),
    )
)
register(
    Action(
        "job.retry_now",
        "job",
        "Retry now",
        "Make a job waiting out its backoff retry now.",
        (ACT_ON_JOB,),
        JobForm,
        _job_change("run_now", retrying_only=True),
        audited_as="job.run_now",
    )
)
register(
    Action(
        "job.cancel",
        "job",
        "Cancel",
        "Cancel a job that has not started: it never will.",
        (ACT_ON_JOB,),
        JobForm,
        _job_change("cancel"),
    )
)
for _verb, _label in (("run_now", "Run now"), ("cancel", "Cancel")):
    register(
        Action(
            f"jobs.{_verb}",
            "jobs",
            _label,
            f"{_label}: the ticked jobs, or every job matching a filter, previewed first.",
            (ACT_ON_JOB,),
            JobConfirmForm,
            _apply_jobs,
            selection_kind=Selection.Kind.JOBS,
            select_form=JobsSelectionForm,
            select=_select_jobs,
            audited_as=f"job.{_verb}",
        )
    )
