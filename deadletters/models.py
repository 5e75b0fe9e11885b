"""The console's records: frozen selections, replay runs and their ledger, the overview's
counters, payload edits. What operators did, from every channel, is the one audit log
(jobqueue.AuditEntry); these rows are what its entries name.

Append-only by contract: rows are created by deadletters.services and only a run's progress
fields move forward while it executes; no view, admin action or command edits or deletes them.
"""

from django.conf import settings
from django.db import models

from jobqueue.models import DeadLetter, Job
from jobqueue.store import sources


class Action(models.TextChoices):
    REPLAY = "replay", "Replay"
    DISCARD = "discard", "Discard"


# What a selection's action reads as: a letters one's (Action), a jobs one's.
SELECTION_ACTIONS = {**dict(Action.choices), "run_now": "Run now", "cancel": "Cancel"}


class Selection(models.Model):
    """The exact ids an operator previewed for a bulk action, of dead letters (replay, discard:
    a run carries them out) or of queued jobs (run now, cancel: carried out in chunks when
    confirmed); confirming acts on these and no others, in their database, once."""

    class Kind(models.TextChoices):
        LETTERS = "letters", "Dead letters"
        JOBS = "jobs", "Jobs"

    operator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.LETTERS)
    # Letters: Action (replay, discard); jobs: run_now or cancel (jobqueue.store.job_actions).
    action = models.CharField(max_length=10)
    filter = models.JSONField(default=dict, blank=True)
    ids = models.JSONField(default=list)
    # The queue database the ids are rows of (a TASKS backend's OPTIONS["DATABASE"]): ids
    # repeat across databases, and confirming acts in theirs (deadletters.databases).
    database = models.CharField(max_length=100, default="default")
    created_at = models.DateTimeField()
    # A jobs selection once carried out (a letters selection's record is its run).
    applied_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    changed = models.PositiveIntegerField(default=0)

    def __str__(self):
        return f"Selection {self.pk} ({len(self.ids)} {self.kind})"

    @property
    def action_label(self) -> str:
        return SELECTION_ACTIONS.get(self.action, self.action)


class RunState(models.TextChoices):
    # Over REDRIVE["APPROVAL_THRESHOLD"] items: waits for a second user's approval.
    AWAITING = "awaiting", "Awaiting approval"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    # Its canary died again past the allowed share: stopped by itself until an operator resumes.
    HALTED = "halted", "Halted by canary"
    CANCELLED = "cancelled", "Cancelled"
    FINISHED = "finished", "Finished"


class CanaryState(models.TextChoices):
    NONE = "", "No canary"
    WATCHING = "watching", "Canary replayed, waiting for its jobs"
    PASSED = "passed", "Canary passed"
    HALTED = "halted", "Canary failed: run halted"
    OVERRIDDEN = "overridden", "Canary failed: resumed by an operator"


ACTIVE_STATES = (RunState.QUEUED, RunState.RUNNING)


class ReplayRun(models.Model):
    """One confirmed replay or discard of a frozen selection, carried out batch by batch."""

    action = models.CharField(max_length=10, choices=Action.choices, default=Action.REPLAY)
    selection = models.OneToOneField(Selection, on_delete=models.PROTECT, related_name="run")
    operator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    # Kept as text too, so the record reads the same after the account is renamed.
    operator_name = models.CharField(max_length=150)
    reason = models.TextField()
    filter = models.JSONField(default=dict, blank=True)
    job_types = models.JSONField(default=list, blank=True)
    allow_poisoned = models.BooleanField(default=False)
    # A replay's destination: the queue its jobs go to; empty, each letter's own queue.
    to_queue = models.CharField(max_length=100, blank=True, default="")
    batch_size = models.PositiveIntegerField()
    rate = models.FloatField(default=0, help_text="items per second; 0 is unlimited")
    # The rate's schedule: when the next item may go. Kept on the run, not in a runner's
    # memory, because a paced run is carried out by a chain of short worker jobs.
    next_item_at = models.DateTimeField(null=True, blank=True)

    state = models.CharField(max_length=10, choices=RunState.choices, default=RunState.QUEUED)
    requested = models.PositiveIntegerField()
    processed = models.PositiveIntegerField(default=0)  # position reached in the selection
    done = models.PositiveIntegerField(default=0)  # replayed (or discarded)
    skipped = models.PositiveIntegerField(default=0)
    batches = models.PositiveIntegerField(default=0)
    # The runner's ticket, bumped on resume and when a paced runner hands over to its
    # continuation: a runner whose generation is stale stops, so one runner drives a run.
    generation = models.PositiveIntegerField(default=0)
    stopped_by = models.CharField(max_length=150, blank=True, default="")

    # Canary (replay runs only): the first `canary_size` items are replayed alone; the run waits
    # up to `canary_timeout` seconds for their jobs to finish and halts itself if more than
    # `canary_max_dead_share` of them died again.
    canary_size = models.PositiveIntegerField(default=0)
    canary_max_dead_share = models.FloatField(default=0.2)
    canary_timeout = models.FloatField(default=300.0)
    canary_state = models.CharField(
        max_length=10, choices=CanaryState.choices, blank=True, default=CanaryState.NONE
    )
    canary_done = models.PositiveIntegerField(default=0)  # canary jobs that succeeded
    canary_dead = models.PositiveIntegerField(default=0)  # canary jobs that died again
    canary_started_at = models.DateTimeField(null=True, blank=True)

    # Two-person rule: a run over the approval threshold waits (state "awaiting") until a
    # second user with the same permission approves it.
    approved_by = models.CharField(max_length=150, blank=True, default="")
    approved_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["created_at", "id"], name="deadletters_run_time_idx"),
            models.Index(
                fields=["operator_name", "created_at"], name="deadletters_run_operator_idx"
            ),
        ]
        permissions = [
            ("view_deadletter", "Can browse dead letters"),
            ("replay_deadletter", "Can replay dead letters"),
            ("discard_deadletter", "Can discard dead letters"),
            ("replay_poisoned", "Can replay items past the poison limit"),
            ("edit_deadletter", "Can edit a dead letter's payload and replay it (audited)"),
            ("export_deadletter", "Can export dead letters (audited)"),
            # Held here since reveals are entries of the audit log (it was deadletters.Reveal's).
            ("view_secrets", "Can see dead-letter payloads unmasked (audited)"),
        ]

    def __str__(self):
        return f"{self.get_action_display()} run {self.pk} [{self.state}]"

    @property
    def is_active(self):
        return self.state in ACTIVE_STATES

    @property
    def stalled(self):
        from datetime import timedelta

        from django.utils import timezone

        from jobqueue.conf import setting

        quiet = timezone.now() - self.updated_at
        return self.is_active and quiet > timedelta(seconds=setting("STALL_SECONDS"))

    @property
    def percent(self):
        return 100 if not self.requested else round(100 * self.processed / self.requested)


class RunControl(models.TextChoices):
    PAUSED = "paused", "Paused"
    RESUMED = "resumed", "Resumed"
    CANCELLED = "cancelled", "Cancelled"
    APPROVED = "approved", "Approved"
    HALTED = "halted", "Halted by its canary"


class Outcome(models.TextChoices):
    REPLAYED = "replayed", "Replayed"
    DISCARDED = "discarded", "Discarded"
    SKIPPED = "skipped", "Skipped"


class ReplayItem(models.Model):
    """The ledger: one row per selected item a run handled, written in that batch's transaction."""

    run = models.ForeignKey(ReplayRun, on_delete=models.PROTECT, related_name="items")
    # No database constraint: the ledger outlives pruned queue rows and never blocks their writes.
    dead_letter = models.ForeignKey(
        DeadLetter,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the (dead_letter, id) index below serves it
        related_name="audit_items",
    )
    task_path = models.CharField(max_length=255)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    skip_reason = models.CharField(max_length=255, blank=True, default="")
    # A replay that made no job of ours: the django-q2 task id it enqueued.
    external_id = models.CharField(max_length=64, blank=True, default="")
    batch = models.PositiveIntegerField()
    at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["dead_letter", "id"], name="deadletters_item_letter_idx"),
            models.Index(fields=["task_path", "run"], name="deadletters_item_type_idx"),
        ]

    def __str__(self):
        return f"{self.outcome} dead letter {self.dead_letter_id} in run {self.run_id}"

    @property
    def job_outcome(self):
        """What became of the replay: pending, done or dead again (None if not replayed); a job
        that finished is "done", as its state (jobqueue.models.JobStatus) and its page say."""
        if self.external_id:
            return self.external_outcome
        if self.job_id is None:
            return None
        try:
            job = self.job
        except Job.DoesNotExist:
            return "job pruned"
        if job is None:  # preloaded from its queue database (selectors._preload_jobs): gone
            return "job pruned"
        return JOB_OUTCOMES.get(job.state, job.state)

    @property
    def made_elsewhere(self):
        """What a replay that made no job of ours produced, as the letter's source names it
        (jobqueue.store.sources.Made), or None. `letter_source` may be preloaded by the
        selector."""
        if not self.external_id:
            return None
        source = getattr(self, "letter_source", None)
        if source is None:
            source = (
                DeadLetter.objects.filter(pk=self.dead_letter_id)
                .values_list("source", flat=True)
                .first()
            )
        return sources.made(source, self.external_id)

    @property
    def external_outcome(self):
        """A django-q2 or outbox replay's outcome, read from its dead letter: the letter follows
        its latest replay (replaying → replayed, or pending again), and a later replay means this
        one died.
        `letter_state` may be preloaded as (state, replay_ref) by the selector."""
        state_ref = getattr(self, "letter_state", None)
        if state_ref is None:
            state_ref = (
                DeadLetter.objects.filter(pk=self.dead_letter_id)
                .values_list("state", "replay_ref")
                .first()
            )
        if state_ref is None:
            return "dead letter gone"
        state, ref = state_ref
        if ref != self.external_id:
            return "failed again"
        return EXTERNAL_OUTCOMES[state]


EXTERNAL_OUTCOMES = {
    "replaying": "pending",
    "replayed": "done",
    "pending": "failed again",
    "discarded": "failed again",
}
JOB_OUTCOMES = {
    "ready": "pending",
    "running": "pending",
    "done": "done",
    "dead": "dead again",
    # An operator cancelled the replay's job before it ran (jobqueue.store.job_actions).
    "cancelled": "cancelled",
}


class PendingCount(models.Model):
    """Pending dead letters per (job type, error class), kept exact by database triggers.

    Counting 1,000,000 pending rows takes hundreds of milliseconds even from a covering index;
    the overview reads these few rows instead. The triggers (migration 0002) fire on every
    insert, delete and state/replays/type/error change of `jobqueue_deadletter`, in the writer's
    transaction, so the counts commit or roll back with the change itself.
    """

    task_path = models.CharField(max_length=255)
    queue_name = models.CharField(max_length=100, default="default")
    error_class = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=16, default="")
    pending = models.BigIntegerField(default=0)
    died_again = models.BigIntegerField(default=0)  # pending items with replays > 0

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task_path", "queue_name", "error_class", "fingerprint"],
                name="deadletters_pendingcount_fp_uniq",
            )
        ]

    def __str__(self):
        return f"{self.task_path} {self.error_class}: {self.pending}"


class HourlyCount(models.Model):
    """Dead-letterings per job type and hour (UTC), counted by the same triggers.

    An item that dies again after a replay counts again in the hour it died. The overview's
    24-hour chart reads these rows instead of grouping a day of dead letters.
    """

    task_path = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=16, default="")
    hour = models.DateTimeField()
    dead_lettered = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "task_path", "fingerprint"], name="deadletters_hourly_fp_uniq"
            )
        ]

    def __str__(self):
        return f"{self.task_path} {self.hour:%Y-%m-%d %H}h: {self.dead_lettered}"


class PayloadEdit(models.Model):
    """An operator's edit of one dead letter's payload, replayed as edited: the old and new
    payloads as they were (the letter itself keeps its original, and the diff is read from
    here), who, why and the job made. The audit log's entry of the edit (letter.edit_replay)
    names this row."""

    dead_letter = models.ForeignKey(DeadLetter, on_delete=models.PROTECT, related_name="+")
    operator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    operator_name = models.CharField(max_length=150)
    reason = models.TextField()
    old_args = models.JSONField(default=list)
    old_kwargs = models.JSONField(default=dict)
    new_args = models.JSONField(default=list)
    new_kwargs = models.JSONField(default=dict)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["dead_letter", "at"], name="deadletters_edit_letter_idx")]

    def __str__(self):
        return f"edit of letter {self.dead_letter_id} by {self.operator_name}"


class ApiToken(models.Model):
    """A bearer token of the JSON API (deadletters.api), acting as its user with at most its
    scopes: read (every GET) and act (every POST); the user's own permissions still apply.

    The token's text, `rdr_<prefix>_<secret>`, is shown once when it is made; only the
    secret's SHA-256 is kept, and the public prefix finds the row. Created and revoked in the
    console, by `manage.py apitoken` and never edited otherwise (deadletters.tokens)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    scopes = models.CharField(max_length=20)  # "read" or "read,act"
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("revoke_any_apitoken", "Can revoke any user's API token")]

    def __str__(self):
        return f"API token {self.label} ({self.name}) of {self.user}"

    @property
    def label(self) -> str:
        """How the audit log names the token: its public start, never the secret."""
        return f"rdr_{self.prefix}"

    @property
    def scope_list(self) -> list[str]:
        return [s for s in self.scopes.split(",") if s]


class IdempotentRequest(models.Model):
    """The first answer to an API POST sent with an `Idempotency-Key`, per token and key: a
    retry of the same request gets this answer again instead of acting twice; the same key on
    another request is refused. Written in the transaction of the action it answers, so the
    two commit together (deadletters.api.idempotency); kept 24 hours."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # SHA-256 of the method, the path and the body: "the same request".
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["token", "key"], name="deadletters_idem_key_uniq")
        ]
        indexes = [models.Index(fields=["created_at"], name="deadletters_idem_at_idx")]

    def __str__(self):
        return f"{self.key} of token {self.token_id}: {self.status}"
