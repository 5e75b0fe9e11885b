"""Workflows' durable records (jobqueue.workflows is the code that calls them): the workflow row,
each step's outcome, signals, batch checkpoints, and the dead letter of a batch's bad item.

Every write that records progress is guarded by the lease of the job carrying the workflow
(`hold`): only the attempt that owns the job may say a step is done, so a worker that lost its
lease (and whose step a newer owner may be running) records nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connections
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from jobqueue.errors import LeaseExpired
from jobqueue.models import (
    UNFINISHED_STATES,
    DeadLetter,
    Job,
    JobState,
    Workflow,
    WorkflowSignal,
    WorkflowState,
    WorkflowStep,
)

from . import dead_letters, dialects
from .jobs import NewJob, enqueue_many
from .leases import JOBS
from .payloads import dumps


def root_id(job: Job, using: str) -> int:
    """The workflow a job carries: its own id, or for a replay of a dead letter the id of the
    job that letter was first written for (a replay that dies again keeps the same letter)."""
    if job.replayed_from_id is None:
        return job.pk
    original = (
        DeadLetter.objects.using(using)
        .filter(pk=job.replayed_from_id)
        .values_list("original_job_id", flat=True)
        .first()
    )
    return original or job.pk


def begin(job: Job, *, now: datetime, using: str) -> tuple[Workflow, dict[str, WorkflowStep]]:
    """The workflow this attempt carries, made on its first step, and its steps so far.

    When a new job carries it (a replay of its dead letter), the job is recorded and the steps
    that failed start their retry budget afresh."""
    workflow_id = root_id(job, using)
    workflow, created = Workflow.objects.using(using).get_or_create(
        pk=workflow_id,
        defaults={
            "task_path": job.task_path,
            "job": job,
            "started_at": now,
            "updated_at": now,
        },
    )
    if not created:
        changes = {"state": WorkflowState.RUNNING, "wake_at": None, "waiting_for": ""}
        if workflow.job_id != job.pk:
            changes["job_id"] = job.pk
            WorkflowStep.objects.using(using).filter(
                workflow=workflow,
                state__in=[WorkflowStep.State.FAILED, WorkflowStep.State.DEAD],
            ).update(state=WorkflowStep.State.FAILED, attempts=0)
        if any(getattr(workflow, name) != value for name, value in changes.items()):
            for name, value in changes.items():
                setattr(workflow, name, value)
            workflow.updated_at = now
            workflow.save(using=using, update_fields=[*changes, "updated_at"])
    steps = {s.name: s for s in WorkflowStep.objects.using(using).filter(workflow=workflow)}
    return workflow, steps


def hold(job: Job, *, now: datetime, using: str, lease_seconds: float) -> None:
    """Lock the job's row while its lease is this attempt's, and renew the lease;
    LeaseExpired otherwise. Called in the transaction that records a step: on PostgreSQL the
    sweep waits for it to commit."""
    until = now + timedelta(seconds=lease_seconds)
    if JOBS.guard(job, now, using).update(locked_until=Greatest(F("locked_until"), until)) != 1:
        raise LeaseExpired(f"job {job.pk} is no longer this worker's: its step is not recorded")


def save_step(
    workflow: Workflow,
    name: str,
    kind: str,
    *,
    state: str,
    now: datetime,
    using: str,
    known: WorkflowStep | None,
    **fields,
) -> WorkflowStep:
    """Write a step's row (insert on its first outcome, update after)."""
    if known is None:
        known = WorkflowStep(workflow=workflow, name=name, kind=kind, started_at=now)
    known.state = state
    if state in (WorkflowStep.State.DONE, WorkflowStep.State.DEAD):
        known.finished_at = now
    for field, value in fields.items():
        setattr(known, field, value)
    known.save(using=using)
    return known


def set_state(workflow: Workflow, state: str, *, now: datetime, using: str, **fields) -> None:
    workflow.state = state
    workflow.updated_at = now
    for field, value in fields.items():
        setattr(workflow, field, value)
    Workflow.objects.using(using).filter(pk=workflow.pk).update(
        state=state, updated_at=now, **fields
    )


def take_signal(workflow: Workflow, name: str, using: str) -> WorkflowSignal | None:
    """The signal `name` if it was sent, the workflow row locked (a signal sent meanwhile
    waits for this transaction, then sees the workflow waiting and wakes it)."""
    Workflow.objects.using(using).select_for_update().filter(pk=workflow.pk).exists()
    return WorkflowSignal.objects.using(using).filter(workflow=workflow, name=name).first()


def signal(workflow_id: int, name: str, payload, *, now: datetime | None, using: str) -> bool:
    """Record the event; wake the workflow at once if it waits for it. False if it was sent
    before (one event per name). Raises Workflow.DoesNotExist for an unknown workflow.
    The caller holds a transaction."""
    now = now or timezone.now()
    workflow = Workflow.objects.using(using).select_for_update().filter(pk=workflow_id).first()
    if workflow is None:
        # Enqueued and not yet at its first step: its record begins here, so the signal waits
        # for it (the workflow's id is its first job's).
        job = (
            Job.objects.using(using)
            .filter(pk=workflow_id, replayed_from__isnull=True)
            .exclude(state__in=[JobState.DONE, JobState.DEAD, JobState.CANCELLED])
            .first()
        )
        if job is None:
            raise Workflow.DoesNotExist(f"no workflow {workflow_id}")
        workflow, _ = Workflow.objects.using(using).get_or_create(
            pk=job.pk,
            defaults={"task_path": job.task_path, "job": job, "started_at": now, "updated_at": now},
        )
        workflow = Workflow.objects.using(using).select_for_update().get(pk=job.pk)
    if WorkflowSignal.objects.using(using).filter(workflow=workflow, name=name).exists():
        return False
    WorkflowSignal.objects.using(using).create(
        workflow=workflow, name=name, payload=payload, sent_at=now
    )
    if workflow.state == WorkflowState.WAITING and workflow.waiting_for == name:
        woken = Job.objects.using(using).filter(
            pk=workflow.job_id, state=JobState.READY, run_after__gt=now
        )
        queues = list(woken.values_list("queue_name", flat=True))
        if woken.update(run_after=now):
            dialects.of(using).notify(connections[using], set(queues))
    return True


def bury_item(
    *,
    task_path: str,
    queue_name: str,
    backend: str,
    item,
    error: dict,
    workflow: Workflow,
    batch: str,
    now: datetime,
    using: str,
) -> DeadLetter:
    """A batch item that failed: a dead job of the batch's item task with the item as its one
    argument, and its dead letter, so an operator can replay the item alone as a job (whose
    death, should the replay die too, returns this letter to pending: jobqueue.store.jobs)."""
    [(job, _)] = enqueue_many(
        [
            NewJob(
                task_path=task_path,
                args=[item],
                # Not held to the payload limit: the item is already in the workflow's records.
                encoded=(dumps([item]), "{}"),
                queue_name=queue_name,
                backend=backend,
                max_attempts=1,
                died=error,
            )
        ],
        now=now,
        using=using,
    )
    return dead_letters.bury(
        dead_letters.Burial(
            error,
            attempts=1,
            now=now,
            last_error=f"batch {batch!r} of workflow {workflow.pk}: {error['message']}",
            letter=dead_letters.NewLetter(
                job_id=job.pk,
                original_job_id=job.pk,
                task_path=task_path,
                queue_name=queue_name,
                backend=backend,
                args=[item],
                max_attempts=1,
                errors=[error],
                first_failed_at=now,
            ),
        ),
        using=using,
    )


PRUNE_CHUNK = 1_000


def prune_finished(*, older_than, now: datetime | None = None, using: str = "default") -> int:
    """Delete workflows done before now - older_than, their steps and signals with them, a
    chunk per statement, and the records signals began for jobs that never ran a step. Other
    workflows stay: a dead one's letter may yet be replayed, and the replay resumes from its
    steps."""
    cutoff = (now or timezone.now()) - older_than
    workflows = Workflow.objects.using(using).filter(updated_at__lt=cutoff)
    old = workflows.filter(state=WorkflowState.DONE) | (
        # A record a signal began for a job that never ran a step (its task was no
        # workflow, or it was cancelled), once that job is finished or gone.
        workflows.filter(steps__isnull=True).exclude(job__state__in=UNFINISHED_STATES)
    )
    deleted = 0
    while chunk := list(old.order_by("pk").values_list("pk", flat=True).distinct()[:PRUNE_CHUNK]):
        _, by_model = Workflow.objects.using(using).filter(pk__in=chunk).delete()
        deleted += by_model.get(Workflow._meta.label, 0)
    return deleted
