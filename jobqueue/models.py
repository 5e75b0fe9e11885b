"""Durable queue records. Every write to them goes through jobqueue.store."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce

# The largest id a row can have (BigAutoField: a signed 64-bit integer on both databases); a
# larger number in a URL, a form or a command line would overflow the query, not miss a row.
MAX_ID = 2**63 - 1


class JobState(models.TextChoices):
    READY = "ready", "Ready"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    DEAD = "dead", "Dead"
    # An operator cancelled it before it ran (jobqueue.store.job_actions): final, and its key
    # stays taken, so a producer retrying the same key does not bring it back.
    CANCELLED = "cancelled", "Cancelled"


# The stored states of a job not finished: waiting for a worker (due or not) or under a lease.
# UNFINISHED below is the same jobs in JobStatus's finer vocabulary.
UNFINISHED_STATES = (JobState.READY, JobState.RUNNING)


class JobStatus(models.TextChoices):
    """What a job is doing now: its stored state read against the time and its lease. The one
    vocabulary of job states that the health page, the jobs browser, the commands, unique jobs'
    holds and /metrics all use, so two screens never count the same jobs differently.

    A stored READY job is *ready* (due), *scheduled* (its first run is later) or *retrying*
    (failed, waiting out its backoff); a stored RUNNING job is *running* or *expired* (its lease
    ran out and no worker has claimed it again). The others are the stored state itself."""

    READY = "ready", "Ready (due now)"
    SCHEDULED = "scheduled", "Scheduled (first run later)"
    RETRYING = "retrying", "Retrying (next attempt later)"
    RUNNING = "running", "Running"
    EXPIRED = "expired", "Running, lease expired"
    DONE = "done", "Done"
    DEAD = "dead", "Dead"
    CANCELLED = "cancelled", "Cancelled"

    @classmethod
    def of(cls, job, now) -> JobStatus:
        if job.state == JobState.READY:
            if job.run_after <= now:
                return cls.READY
            return cls.RETRYING if job.attempts else cls.SCHEDULED
        if job.state == JobState.RUNNING:
            return (
                cls.EXPIRED if job.locked_until is None or job.locked_until <= now else cls.RUNNING
            )
        return cls(job.state)

    def q(self, now) -> Q:
        """The jobs in this status, as a filter."""
        match self:
            case JobStatus.READY:
                return Q(state=JobState.READY, run_after__lte=now)
            case JobStatus.SCHEDULED:
                return Q(state=JobState.READY, run_after__gt=now, attempts=0)
            case JobStatus.RETRYING:
                return Q(state=JobState.READY, run_after__gt=now, attempts__gt=0)
            case JobStatus.RUNNING:
                return Q(state=JobState.RUNNING, locked_until__gt=now)
            case JobStatus.EXPIRED:
                return Q(state=JobState.RUNNING) & (
                    Q(locked_until__lte=now) | Q(locked_until__isnull=True)
                )
        return Q(state=self.value)


# A job waiting for a worker (where an operator may still run it now or cancel it), one under
# a lease, and the two together: a job not finished, in the order screens list them.
WAITING = (JobStatus.READY, JobStatus.SCHEDULED, JobStatus.RETRYING)
LEASED = (JobStatus.RUNNING, JobStatus.EXPIRED)
UNFINISHED = WAITING + LEASED


# The three partial indexes of waiting jobs, each claimed its own way: plain ones in priority
# order, ordered ones by their line's head, those with a concurrency key per key. "state is
# ready" alone matches none of them (a walk of every finished job): a query of waiting jobs
# says which part it reads, or all three (READY_PARTS).
READY_PLAIN = Q(state="ready", concurrency_key__isnull=True, ordering_key__isnull=True)
READY_IN_LINE = Q(state="ready", concurrency_key__isnull=True, ordering_key__isnull=False)
READY_KEYED = Q(state="ready", concurrency_key__isnull=False)
READY_PARTS = (READY_PLAIN, READY_IN_LINE, READY_KEYED)
# A job's place in its ordering line (Job.position), as the ordering indexes have it.
LINE_POSITION = Coalesce("ordering_position", "id", output_field=models.BigIntegerField())


class JobQuerySet(models.QuerySet):
    def ready(self, now):
        return self.filter(state=JobState.READY, run_after__lte=now)

    def lease_expired(self, now):
        return self.filter(state=JobState.RUNNING, locked_until__lte=now)


class Job(models.Model):
    task_path = models.CharField(max_length=255)
    queue_name = models.CharField(max_length=100, default="default")
    priority = models.SmallIntegerField(default=0)
    backend = models.CharField(max_length=100, default="default")
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)

    state = models.CharField(max_length=10, choices=JobState.choices, default=JobState.READY)
    run_after = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=5)

    lease_token = models.CharField(max_length=64, null=True, blank=True)
    locked_until = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=255, null=True, blank=True)
    worker_ids = models.JSONField(default=list)

    enqueued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # One entry per failed attempt:
    # attempt, at, worker_id, exception_class_path, message, traceback.
    errors = models.JSONField(default=list)
    return_value = models.JSONField(null=True, blank=True)

    # Set on jobs created by replaying a dead letter; ties the retry back to the operator's item.
    # Indexed only where set (jobqueue_job_replayed_idx): almost no job is a replay, and every
    # index a claim and an acknowledgement must update costs the drain.
    replayed_from = models.ForeignKey(
        "DeadLetter",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="replay_jobs",
        db_index=False,
    )

    # Per-key ordering (jobqueue.store.sql_common.ORDERED): jobs with the same key run one at a
    # time, in the order of their position: their own id, or for a replay the position of the
    # job it replays, so that it runs before the key's later jobs. `ordering_on_dead`: "block"
    # holds the key's later jobs while this job is dead and its letter unresolved; "skip" lets
    # them run. NULL on every job without a key (not indexed then: no cost to them).
    ordering_key = models.CharField(max_length=255, null=True, blank=True)
    ordering_position = models.BigIntegerField(null=True, blank=True)
    ordering_on_dead = models.CharField(
        max_length=5, null=True, blank=True, choices=[("block", "Block"), ("skip", "Skip")]
    )

    # Fair share and a per-key concurrency limit (jobqueue.store.jobs.claim): at most
    # concurrency_limit jobs of one key run at once across every worker, and a claim takes the
    # next job of each key before the second of any. NULL on jobs without a key.
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        permissions = [("act_on_job", "Can run queued jobs now or cancel them (audited)")]
        indexes = [
            # The claim scans only due ready rows, best priority first: one index for workers
            # that take every queue, one for workers bound to named queues.
            # Jobs with a concurrency key are claimed apart (fairly, per key) and are not in
            # these two, so a tenant's backlog never sits in front of the other jobs; nor are
            # jobs with an ordering key (a line's later jobs wait behind its head: the claim
            # walked every one of them), whose lines have their own index, next.
            models.Index(
                fields=["-priority", "run_after", "id"],
                name="jobqueue_job_ready_idx",
                condition=READY_PLAIN,
            ),
            models.Index(
                fields=["queue_name", "-priority", "run_after", "id"],
                name="jobqueue_job_ready_queue_idx",
                condition=READY_PLAIN,
            ),
            # Each ordering line's ready jobs in position order: the claim finds each line's
            # head with one probe per line (a loose index scan), however long the line.
            models.Index(
                F("ordering_key"),
                LINE_POSITION,
                name="jobqueue_job_ready_line_idx",
                condition=READY_IN_LINE,
            ),
            # The keyed claim: each key's next jobs, and how many of a key run now.
            models.Index(
                fields=["concurrency_key", "-priority", "run_after", "id"],
                name="jobqueue_job_ready_key_idx",
                condition=READY_KEYED,
            ),
            models.Index(
                fields=["concurrency_key"],
                name="jobqueue_job_running_key_idx",
                condition=Q(state="running", concurrency_key__isnull=False),
            ),
            # The sweep looks only at leased rows.
            models.Index(
                fields=["locked_until"],
                name="jobqueue_job_leased_idx",
                condition=Q(state="running"),
            ),
            # Ready and running rows have the indexes above; finished ones are most of the table
            # and are listed newest first along the primary key. Only dead jobs, few among
            # millions, need their own: a full (state, id) index cost every claim and every
            # acknowledgement an index entry.
            models.Index(fields=["id"], name="jobqueue_job_dead_idx", condition=Q(state="dead")),
            models.Index(
                fields=["replayed_from"],
                name="jobqueue_job_replayed_idx",
                condition=Q(replayed_from__isnull=False),
            ),
            # Finding a job by its key in any state (the live-key constraint covers only jobs
            # that are not dead); keyless jobs, most of them, are not in it.
            models.Index(
                fields=["idempotency_key"],
                name="jobqueue_job_key_idx",
                condition=Q(idempotency_key__isnull=False),
            ),
            # The claim's look for an earlier job of the same ordering key: only keyed jobs
            # that can still hold their key back (waiting, running, or dead) are in it.
            # Along each key in position order, so the look stops at the first earlier job.
            models.Index(
                F("ordering_key"),
                Coalesce("ordering_position", "id", output_field=models.BigIntegerField()),
                name="jobqueue_job_ordering_idx",
                condition=Q(ordering_key__isnull=False, state__in=["ready", "running", "dead"]),
            ),
        ]
        constraints = [
            # A key names one obligation: at most one job per key that is not dead.
            # A dead job's key is carried by its dead letter, whose replay reuses it.
            models.UniqueConstraint(
                fields=["idempotency_key"],
                condition=Q(idempotency_key__isnull=False) & ~Q(state="dead"),
                name="jobqueue_job_live_key_uniq",
            ),
            models.CheckConstraint(
                condition=Q(state="running", lease_token__isnull=False, locked_until__isnull=False)
                | ~Q(state="running"),
                name="jobqueue_job_running_has_lease",
            ),
        ]

    def __str__(self):
        return f"Job {self.pk} {self.task_path} [{self.state}]"

    @property
    def position(self) -> int | None:
        """Its place in its ordering key's line."""
        return self.ordering_position if self.ordering_position is not None else self.pk

    @property
    def last_error(self):
        return self.errors[-1] if self.errors else None


class DeadLetterState(models.TextChoices):
    PENDING = "pending", "Pending"
    REPLAYING = "replaying", "Replay pending"
    REPLAYED = "replayed", "Replayed"
    DISCARDED = "discarded", "Discarded"


class DeadLetter(models.Model):
    """A job that ran out of attempts or failed permanently, kept for investigation and replay.

    One row per obligation: when a replayed job dies again the same row returns to pending, so
    its replay count and error history follow the item across every cycle.
    """

    source = models.CharField(max_length=30, default="jobqueue")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    original_job_id = models.BigIntegerField(null=True, blank=True)
    task_path = models.CharField(max_length=255)
    queue_name = models.CharField(max_length=100, default="default")
    priority = models.SmallIntegerField(default=0)
    backend = models.CharField(max_length=100, default="default")
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    max_attempts = models.PositiveIntegerField(default=5)

    attempts = models.PositiveIntegerField()
    last_error = models.TextField()
    error_class = models.CharField(max_length=255, blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    errors = models.JSONField(default=list)
    # The cause of the last death (jobqueue.fingerprints): its class, its message without what
    # varies (ids, numbers, times, quoted values) and the innermost frame of our code.
    fingerprint = models.CharField(max_length=16, blank=True, default="")

    first_failed_at = models.DateTimeField()
    dead_lettered_at = models.DateTimeField()

    state = models.CharField(
        max_length=10, choices=DeadLetterState.choices, default=DeadLetterState.PENDING
    )
    replays = models.PositiveIntegerField(default=0)
    last_replayed_at = models.DateTimeField(null=True, blank=True)
    replay_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    discarded_at = models.DateTimeField(null=True, blank=True)
    # Source "django_q2": the django-q2 task id of the latest replay (its result, saved by the
    # cluster, settles the letter). The original task's id is in `idempotency_key`. Broker
    # sources ("rabbitmq", "sqs"): the id of the message the latest replay published.
    replay_ref = models.CharField(max_length=32, null=True, blank=True)
    # Broker sources: SHA-256 of the message as first mirrored (its body and properties, not the
    # broker's or Redrive's own marks). A replay publishes only a copy with this digest, and a
    # message claiming the letter with another body is a letter of its own.
    message_digest = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            # One dead letter per django-q2 task: django-q2 may save a failure more than once.
            models.UniqueConstraint(
                fields=["idempotency_key"],
                condition=Q(source="django_q2"),
                name="jobqueue_dl_django_q2_task_uniq",
            ),
            # One dead letter per broker message (its identity at the broker, kept in
            # `idempotency_key`): a sync sees the same message again until it is settled.
            models.UniqueConstraint(
                fields=["source", "idempotency_key"],
                condition=Q(source__in=["rabbitmq", "sqs"]),
                name="jobqueue_dl_broker_message_uniq",
            ),
        ]
        indexes = [
            models.Index(
                fields=["replay_ref"],
                name="jobqueue_dl_replay_ref_idx",
                condition=Q(replay_ref__isnull=False),
            ),
            models.Index(
                fields=["task_path", "dead_lettered_at"],
                name="jobqueue_dl_pending_idx",
                condition=Q(state="pending"),
            ),
            models.Index(fields=["dead_lettered_at", "id"], name="jobqueue_dl_time_idx"),
            # A job's page finds the letter it became (job_id has the foreign key's index).
            models.Index(fields=["original_job_id"], name="jobqueue_dl_original_job_idx"),
            models.Index(
                fields=["task_path", "dead_lettered_at", "id"], name="jobqueue_dl_type_time_idx"
            ),
            models.Index(
                fields=["state", "dead_lettered_at", "id"], name="jobqueue_dl_state_time_idx"
            ),
            # The console's other equality filters: a rare error class or queue is then a short
            # index range, not a walk of the time index over a million rows.
            models.Index(
                fields=["error_class", "dead_lettered_at", "id"], name="jobqueue_dl_error_time_idx"
            ),
            models.Index(
                fields=["queue_name", "dead_lettered_at", "id"], name="jobqueue_dl_queue_time_idx"
            ),
            # A fingerprint's letters newest first (the console's drill-down), and its first
            # and last seen from either end.
            models.Index(
                fields=["fingerprint", "dead_lettered_at", "id"], name="jobqueue_dl_fp_time_idx"
            ),
        ]

    def __str__(self):
        return f"DeadLetter {self.pk} {self.task_path} [{self.state}]"

    @property
    def payload(self):
        return {"args": self.args, "kwargs": self.kwargs}


class WorkerRecord(models.Model):
    """A running `runworker` process, refreshed on its heartbeat and removed on a clean exit.

    A record whose heartbeat is older than the health threshold belongs to a lost worker.
    """

    worker_id = models.CharField(max_length=255, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)  # empty: every queue
    concurrency = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()
    jobs_succeeded = models.PositiveIntegerField(default=0)
    jobs_failed = models.PositiveIntegerField(default=0)
    current_job_ids = models.JSONField(default=list)
    # When a claim last leased it a job (written with the record, so up to its interval late;
    # None: none yet): a quieted worker is seen to stop claiming.
    last_claim_at = models.DateTimeField(null=True, blank=True)
    # An operator's command (jobqueue.store.workers.command), read by the worker on its next
    # heartbeat: quiet (claim nothing more, finish what it holds) or stop (drain and exit).
    command = models.CharField(max_length=10, blank=True, default="")
    commanded_by = models.CharField(max_length=150, blank=True, default="")

    class Command(models.TextChoices):
        QUIET = "quiet", "Quiet: claims nothing more, finishes what it holds"
        STOP = "stop", "Stop: finishes what it holds, then exits"

    class Meta:
        permissions = [("control_worker", "Can quiet and stop workers (audited)")]

    def __str__(self):
        return self.worker_id


class LeaderLease(models.Model):
    """Who runs a duty that one process per database should (jobqueue.chores): the holder
    renews `expires_at` while it lives; once that passes, the next process to look takes it
    over (jobqueue.store.leader). A row, not an advisory lock: it works on SQLite and through
    a transaction pooler, where no session outlives a transaction."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=255)  # a worker's id (host:pid:random)
    expires_at = models.DateTimeField()
    acquired_at = models.DateTimeField()  # when this holder took it (kept across renewals)

    def __str__(self):
        return f"{self.name}: {self.holder}"


class JobCounter(models.Model):
    """Attempts finished per minute, queue and task: throughput and failure rate without
    scanning finished jobs. Each outcome is added by the store's transition that records it, in
    its transaction (jobqueue.store.workers.count): exact after a worker is killed."""

    minute = models.DateTimeField()
    queue_name = models.CharField(max_length=100)
    task_path = models.CharField(max_length=255)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)  # failed attempts, retried or not
    dead = models.PositiveIntegerField(default=0)
    last_success_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "queue_name", "task_path"], name="jobqueue_counter_uniq"
            )
        ]
        indexes = [models.Index(fields=["minute"], name="jobqueue_counter_minute_idx")]

    def __str__(self):
        return f"{self.minute:%H:%M} {self.task_path}"


class JobTiming(models.Model):
    """Run time or queue wait of the attempts finished per minute (span 1) or per hour (span 60),
    queue and task, as counts in one histogram bucket (jobqueue.timing.BOUNDS) and the sum of
    their seconds: percentiles and histograms over any window without scanning jobs, a long one
    mostly from hours. Workers add to both in their heartbeat, and they are
    pruned with them."""

    span = models.PositiveSmallIntegerField(default=1)  # minutes: 1 or 60
    minute = models.DateTimeField()  # the first minute of the span
    queue_name = models.CharField(max_length=100)
    task_path = models.CharField(max_length=255)
    kind = models.CharField(max_length=4, choices=[("run", "Run time"), ("wait", "Queue wait")])
    bucket = models.PositiveSmallIntegerField()  # an index into jobqueue.timing.BOUNDS
    count = models.PositiveIntegerField(default=0)
    seconds = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["span", "minute", "queue_name", "task_path", "kind", "bucket"],
                name="jobqueue_timing_uniq",
            )
        ]
        # A task's page reads one task's rows of a window.
        indexes = [
            models.Index(fields=["task_path", "span", "minute"], name="jobqueue_timing_task_idx")
        ]

    def __str__(self):
        return f"{self.minute:%H:%M}+{self.span}m {self.task_path} {self.kind}[{self.bucket}]"


class Execution(models.Model):
    """An idempotency key recorded in the same transaction as the work it guards: the work and
    the record commit together or not at all, so a job run twice does its effect once."""

    idempotency_key = models.CharField(max_length=255, primary_key=True)
    job_type = models.CharField(max_length=255, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    completed_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.idempotency_key


class OutboxState(models.TextChoices):
    PENDING = "pending", "Pending"
    LEASED = "leased", "Leased"
    PUBLISHED = "published", "Published"
    DEAD = "dead", "Dead"


class OutboxMessage(models.Model):
    """A message recorded in the caller's transaction, published later by a relay: no message
    without its write, no write without its message.

    The row id is the message id every destination sees, so a republish after a crash carries the
    same id. Messages with the same `key` are published one at a time in id order.
    """

    topic = models.CharField(max_length=255)
    key = models.CharField(max_length=255, null=True, blank=True)
    payload = models.JSONField(default=dict)

    state = models.CharField(
        max_length=10, choices=OutboxState.choices, default=OutboxState.PENDING
    )
    created_at = models.DateTimeField()
    available_at = models.DateTimeField()  # not claimable before: backoff after a failure
    attempts = models.PositiveIntegerField(default=0)

    lease_token = models.CharField(max_length=64, null=True, blank=True)
    locked_until = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=255, null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    # One entry per failed attempt, shaped like Job.errors.
    errors = models.JSONField(default=list)
    # Set when the message is dead-lettered; a replay and a later death reuse the same letter.
    dead_letter = models.ForeignKey(
        DeadLetter, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        db_table = "jobqueue_outbox"
        indexes = [
            # The relay scans pending rows in id order.
            models.Index(
                fields=["id"], name="jobqueue_outbox_pending_idx", condition=Q(state="pending")
            ),
            # Per-key ordering: "is there an earlier unfinished message with my key?"
            models.Index(
                fields=["key", "id"],
                name="jobqueue_outbox_key_idx",
                condition=Q(state__in=["pending", "leased"], key__isnull=False),
            ),
            models.Index(
                fields=["locked_until"],
                name="jobqueue_outbox_leased_idx",
                condition=Q(state="leased"),
            ),
            # Retention: prune scans published rows by age only.
            models.Index(
                fields=["published_at"],
                name="jobqueue_outbox_published_idx",
                condition=Q(state="published"),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state="leased", lease_token__isnull=False, locked_until__isnull=False)
                | ~Q(state="leased"),
                name="jobqueue_outbox_leased_has_lease",
            ),
        ]

    def __str__(self):
        return f"OutboxMessage {self.pk} {self.topic} [{self.state}]"

    @property
    def message_id(self) -> str:
        return str(self.pk)


class PausedQueue(models.Model):
    """A queue no worker claims from until it is resumed (jobs already running finish). A row
    per paused queue: every claim skips the queues listed here, so a pause takes effect at the
    next claim of every worker on every host."""

    queue_name = models.CharField(max_length=100, unique=True)
    paused_at = models.DateTimeField()
    paused_by = models.CharField(max_length=150)
    reason = models.TextField()

    class Meta:
        permissions = [("pause_queue", "Can pause and resume queues (audited)")]

    def __str__(self):
        return f"{self.queue_name} paused by {self.paused_by}"


# How the audit's verbs read where they are not just capitalised.
AUDIT_VERBS = {
    "run_now": "Run now",
    "run": "Run now",
    "halted": "Halted by its canary",
    "edit_replay": "Edit and replay",
}


class AuditQuerySet(models.QuerySet):
    """The audit log is append-only: rows are added by jobqueue.store.audit.record, and the ORM
    refuses to change or delete them (the hash chain would tell anyway: `manage.py audit
    verify`)."""

    def update(self, **kwargs):
        raise AppendOnly("the audit log is append-only: its rows are never updated")

    def delete(self):
        raise AppendOnly("the audit log is append-only: its rows are never deleted")

    def bulk_update(self, objs, fields, batch_size=None):
        raise AppendOnly("the audit log is append-only: its rows are never updated")


class AppendOnly(Exception):
    """A change to a row of the append-only audit log."""


class AuditEntry(models.Model):
    """One thing an operator did, through any channel: who, through what, what, on which
    targets, why, with which parameters (masked as payloads are), its outcome, when.

    Written only by jobqueue.store.audit.record, in the transaction of the change it records.
    Each row carries the hash of its own content and of the row before it, and AuditChain holds
    the newest, so an edited, removed or inserted row breaks the chain (`audit verify`)."""

    class Channel(models.TextChoices):
        CONSOLE = "console", "Console"
        CLI = "cli", "Command line"
        API = "api", "API"
        CODE = "code", "Python code"  # a direct call of a store or service function
        SYSTEM = "system", "Redrive itself"  # e.g. a replay's canary halting it
        # Moved in from the tables each kind of action had before (migration 0021), which did
        # not record the channel.
        UNRECORDED = "unrecorded", "Not recorded"

    seq = models.BigIntegerField(unique=True)  # 1, 2, 3, ... without gaps in one database
    at = models.DateTimeField()
    actor = models.CharField(max_length=150)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    token = models.CharField(max_length=64, blank=True, default="")  # the API token that acted
    action = models.CharField(max_length=40)  # "<kind>.<verb>": queue.pause, job.cancel, ...
    target_kind = models.CharField(max_length=20)  # queue, job, schedule, letter, run, ...
    # The targets' ids or names; a bulk action's chunk lists each (at most a chunk's worth).
    targets = models.JSONField(default=list)
    reason = models.TextField(blank=True, default="")
    params = models.JSONField(default=dict)
    outcome = models.CharField(max_length=20, default="done")
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = AuditQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["-at", "-id"], name="jobqueue_audit_at_idx"),
            models.Index(fields=["actor", "-id"], name="jobqueue_audit_actor_idx"),
            models.Index(fields=["action", "-id"], name="jobqueue_audit_action_idx"),
        ]

    def __str__(self):
        return f"{self.action} by {self.actor} via {self.channel}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnly("the audit log is append-only: its rows are never updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnly("the audit log is append-only: its rows are never deleted")

    @property
    def label(self) -> str:
        """The action as a person reads it ("Run now" for job.run_now)."""
        verb = self.action.partition(".")[2] or self.action
        return AUDIT_VERBS.get(verb, verb.replace("_", " ").capitalize())


class AuditTarget(models.Model):
    """Which audit entries name a target: the lookup behind each target's own history (a job's,
    a queue's, a schedule's page). Derived from AuditEntry.targets, which the chain covers."""

    entry = models.ForeignKey(AuditEntry, on_delete=models.DO_NOTHING, related_name="+")
    kind = models.CharField(max_length=20)
    ref = models.CharField(max_length=255)

    class Meta:
        indexes = [models.Index(fields=["kind", "ref", "-entry"], name="jobqueue_audittarget_idx")]

    def __str__(self):
        return f"{self.kind} {self.ref} in entry {self.entry_id}"


class AuditChain(models.Model):
    """The newest link of a database's audit chain: locked by each append (so appends are one
    line), and what `audit verify` checks the last row against (a removed newest row)."""

    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64)

    def __str__(self):
        return f"audit chain at #{self.seq}"


class Schedule(models.Model):
    """A periodic job: `cron` in `timezone`, each tick enqueued once whatever number of workers
    on whatever number of hosts look (jobqueue.schedules). Declared in code (@periodic); this
    row is the declaration as last synced plus what running it needs: the next tick, the last
    job, and whether an operator paused it."""

    class CatchUp(models.TextChoices):
        NONE = "none", "None (only a tick on time)"
        LATEST = "latest", "The latest missed tick"
        ALL = "all", "Every missed tick (bounded)"

    name = models.CharField(max_length=200, unique=True)
    task_path = models.CharField(max_length=255)
    cron = models.CharField(max_length=120)
    timezone = models.CharField(max_length=64, default="UTC")
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    overlap = models.BooleanField(default=True)  # False: skip a tick while the last run is live
    catch_up = models.CharField(max_length=6, choices=CatchUp.choices, default=CatchUp.LATEST)
    catch_up_limit = models.PositiveIntegerField(default=10)
    # False once a sync no longer finds it in code: kept (with its history), never ticked.
    declared = models.BooleanField(default=True)
    next_run_at = models.DateTimeField()
    last_tick_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, blank=True)
    pause_reason = models.TextField(blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        permissions = [("manage_schedule", "Can pause, resume and run schedules (audited)")]
        indexes = [
            models.Index(
                fields=["next_run_at"],
                name="jobqueue_schedule_due_idx",
                condition=models.Q(paused_at__isnull=True, declared=True),
            )
        ]

    def __str__(self):
        return f"{self.name} ({self.cron})"


class ScheduleRun(models.Model):
    """What happened to one tick of a schedule. The unique (schedule, tick) constraint is what
    makes a tick's job exactly one: a second worker's insert for the same tick fails and its
    transaction (its job included) rolls back. A manual run (an operator's "run now") is not a
    tick and is not held to it."""

    class Outcome(models.TextChoices):
        ENQUEUED = "enqueued", "Enqueued"
        SKIPPED = "skipped", "Skipped: the last run was still live"
        MISSED = "missed", "Missed (catch-up)"
        MANUAL = "manual", "Run now by an operator"
        # The task could not be loaded or refused the schedule's arguments: the tick is
        # recorded (and logged at ERROR) rather than retried every second.
        ERROR = "error", "Could not enqueue"

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    tick = models.DateTimeField()
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    note = models.TextField(blank=True)
    at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "tick"],
                condition=~models.Q(outcome="manual"),
                name="jobqueue_schedulerun_one_per_tick",
            )
        ]
        indexes = [
            models.Index(fields=["schedule", "-at"], name="jobqueue_schedulerun_at_idx"),
            # The ticks that did not become a job, newest first (console, health): few among
            # a per-second schedule's 86,400 a day.
            models.Index(
                fields=["-at", "-id"],
                name="jobqueue_schedulerun_unrun_idx",
                condition=~Q(outcome="enqueued"),
            ),
        ]

    def __str__(self):
        return f"{self.schedule_id} {self.tick:%Y-%m-%d %H:%M:%S} {self.outcome}"


class UniqueKey(models.Model):
    """A unique job's hold on its key (jobqueue.store.jobs): while the job it names is in one
    of `states` ("ready": due, "scheduled": waiting for its time or a retry, "running"), or
    until `expires_at`, an enqueue with the same key returns that job instead of making one.
    The primary key is what makes two concurrent enqueues one job."""

    key = models.CharField(max_length=255, primary_key=True)
    job_id = models.BigIntegerField()  # not a foreign key: the hold may outlive a pruned job
    states = models.CharField(max_length=40)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.key} held by job {self.job_id}"


class RateBucket(models.Model):
    """The token bucket of a rate-limited queue (REDRIVE["RATE_LIMITS"]), shared by every
    worker: a claim locks it, refills it for the time passed, takes a token per job it leases
    and writes it back in the same transaction (jobqueue.store.jobs.claim)."""

    queue_name = models.CharField(max_length=100, primary_key=True)
    tokens = models.FloatField()
    updated_at = models.DateTimeField()

    def __str__(self):
        return f"{self.queue_name}: {self.tokens:.1f} tokens"


class WorkflowState(models.TextChoices):
    RUNNING = "running", "Running"
    SLEEPING = "sleeping", "Sleeping"
    WAITING = "waiting", "Waiting for a signal"
    DONE = "done", "Done"
    DEAD = "dead", "Dead at a step"


class Workflow(models.Model):
    """A task whose body calls steps (jobqueue.workflows): what its steps stored, so a retry, a
    crash, a sleep or a replay resumes at the first unfinished step.

    Its id is the id of the job first enqueued for it (what `enqueue` returned): the handle code
    signals it by. A replay of its dead letter is a new job carrying the same workflow.
    """

    id = models.BigIntegerField(primary_key=True)
    task_path = models.CharField(max_length=255)
    # The job carrying it now (the first, or the latest replay of its dead letter).
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(
        max_length=10, choices=WorkflowState.choices, default=WorkflowState.RUNNING
    )
    step = models.CharField(max_length=200, blank=True)  # the step it is at, or died at
    wake_at = models.DateTimeField(null=True, blank=True)  # sleeping or waiting: until when
    waiting_for = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["-updated_at", "-id"], name="jobqueue_workflow_upd_idx")]

    def __str__(self):
        return f"Workflow {self.pk} {self.task_path} [{self.state}]"


class WorkflowStep(models.Model):
    """One step of a workflow: a call (`step`), a durable sleep, a wait for a signal, or a
    batch. Written once done; a failed attempt, a sleep's wake-up time and a batch's checkpoint
    are written as they happen."""

    class Kind(models.TextChoices):
        CALL = "call", "Step"
        SLEEP = "sleep", "Sleep"
        WAIT = "wait", "Wait for a signal"
        BATCH = "batch", "Batch"

    class State(models.TextChoices):
        PENDING = "pending", "Pending"  # started (a batch part way, a sleep or a wait)
        FAILED = "failed", "Failed (will retry)"
        DEAD = "dead", "Dead"
        DONE = "done", "Done"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=5, choices=Kind.choices)
    state = models.CharField(max_length=7, choices=State.choices)
    attempts = models.PositiveIntegerField(default=0)
    result = models.JSONField(null=True, blank=True)  # a batch's progress while it runs
    errors = models.JSONField(default=list)  # one entry per failed attempt
    wake_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "name"], name="jobqueue_workflowstep_one_per_name"
            )
        ]

    def __str__(self):
        return f"{self.workflow_id}/{self.name} [{self.state}]"


class WorkflowSignal(models.Model):
    """An event sent to a workflow (jobqueue.workflows.signal): kept until the workflow's
    `wait_for` of that name reads it; one per name, so sending it twice is one event."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="signals")
    name = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    sent_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "name"], name="jobqueue_workflowsignal_one_per_name"
            )
        ]

    def __str__(self):
        return f"{self.workflow_id}:{self.name}"


class Deploy(models.Model):
    """A deploy of the project's code: recorded by a deploy pipeline (`manage.py deploy mark`)
    or by the first worker that starts with a new code version (jobqueue.store.deploys). The
    console draws each on its charts and filters "since the last deploy".

    Here, not in the console's app: workers record them, and the engine never imports the
    console. `seq` numbers them 1, 2, 3, ... in one database: two workers that start with the
    same new version at once both write the next number, and the unique constraint keeps one."""

    class Source(models.TextChoices):
        COMMAND = "command", "manage.py deploy mark"
        WORKER = "worker", "A worker started with a new version"
        CODE = "code", "Python code"

    seq = models.BigIntegerField(unique=True)
    version = models.CharField(max_length=100)
    at = models.DateTimeField()
    note = models.TextField(blank=True, default="")
    source = models.CharField(max_length=10, choices=Source.choices)
    recorded_by = models.CharField(max_length=150)  # the --by name, or the worker's id

    class Meta:
        indexes = [models.Index(fields=["at"], name="jobqueue_deploy_at_idx")]

    def __str__(self):
        return f"deploy {self.version} at {self.at:%Y-%m-%d %H:%M}"
