"""Redrive's queue tables as 0.1.0 ships them: the 28 migrations of its development squashed
into one (`replaces`), so a new database is made in one step and one already migrated through
them carries on. tests/test_migrations.py checks that both ways give the same schema.

The ORM's models, then what it cannot declare, on PostgreSQL only: the trigram index the
"text in the last error" filter reads, and the dead letters' stored tsvector columns the search
reads (deadletters/search.py names them in SQL; SQLite searches without an index).
"""

import django.db.models.deletion
import django.db.models.functions.comparison
from django.db import migrations, models

VALUES = '\'["string", "numeric"]\'::jsonb'
ERROR = "to_tsvector('simple'::regconfig, last_error)"
ALL = (
    f"{ERROR} || jsonb_to_tsvector('simple'::regconfig, args, {VALUES})"
    f" || jsonb_to_tsvector('simple'::regconfig, kwargs, {VALUES})"
)
POSTGRESQL = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX jobqueue_dl_last_error_trgm "
    "ON jobqueue_deadletter USING gin (upper(last_error::text) gin_trgm_ops)",
    f"""ALTER TABLE jobqueue_deadletter
        ADD COLUMN search_error tsvector GENERATED ALWAYS AS ({ERROR}) STORED,
        ADD COLUMN search_all tsvector GENERATED ALWAYS AS ({ALL}) STORED""",
    "CREATE INDEX jobqueue_dl_search_idx ON jobqueue_deadletter USING gin (search_all)",
    "CREATE INDEX jobqueue_dl_error_search_idx ON jobqueue_deadletter USING gin (search_error)",
]


def postgresql_search(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in POSTGRESQL:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    initial = True
    replaces = [
        ("jobqueue", "0001_initial"),
        ("jobqueue", "0002_worker_registry"),
        ("jobqueue", "0003_deadletter_error_search"),
        ("jobqueue", "0004_outbox"),
        ("jobqueue", "0005_deadletter_django_q2"),
        ("jobqueue", "0006_deadletter_filter_indexes"),
        ("jobqueue", "0007_lean_job_indexes"),
        ("jobqueue", "0008_queue_pause"),
        ("jobqueue", "0009_job_actions"),
        ("jobqueue", "0010_lookup_indexes"),
        ("jobqueue", "0011_schedules_unique_and_ordered_jobs"),
        ("jobqueue", "0012_rate_buckets"),
        ("jobqueue", "0013_concurrency_keys"),
        ("jobqueue", "0014_ordering_index_by_position"),
        ("jobqueue", "0015_unrun_ticks_index"),
        ("jobqueue", "0016_workflows"),
        ("jobqueue", "0017_deadletter_fingerprint"),
        ("jobqueue", "0018_deadletter_search_index"),
        ("jobqueue", "0019_deadletter_broker_messages"),
        ("jobqueue", "0020_unique_holds_cover_retrying"),
        ("jobqueue", "0021_audit_log"),
        ("jobqueue", "0022_deadletter_message_digest"),
        ("jobqueue", "0023_worker_command"),
        ("jobqueue", "0024_job_timing"),
        ("jobqueue", "0025_deploy"),
        ("jobqueue", "0026_leader_lease"),
        ("jobqueue", "0027_deadletter_search_columns"),
        ("jobqueue", "0028_workerrecord_last_claim_at"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="AuditChain",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seq", models.BigIntegerField(default=0)),
                ("hash", models.CharField(max_length=64)),
            ],
        ),
        migrations.CreateModel(
            name="DeadLetter",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("source", models.CharField(default="jobqueue", max_length=30)),
                ("original_job_id", models.BigIntegerField(blank=True, null=True)),
                ("task_path", models.CharField(max_length=255)),
                ("queue_name", models.CharField(default="default", max_length=100)),
                ("priority", models.SmallIntegerField(default=0)),
                ("backend", models.CharField(default="default", max_length=100)),
                ("args", models.JSONField(default=list)),
                ("kwargs", models.JSONField(default=dict)),
                ("idempotency_key", models.CharField(blank=True, max_length=255, null=True)),
                ("max_attempts", models.PositiveIntegerField(default=5)),
                ("attempts", models.PositiveIntegerField()),
                ("last_error", models.TextField()),
                ("error_class", models.CharField(blank=True, default="", max_length=255)),
                ("traceback", models.TextField(blank=True, default="")),
                ("errors", models.JSONField(default=list)),
                ("fingerprint", models.CharField(blank=True, default="", max_length=16)),
                ("first_failed_at", models.DateTimeField()),
                ("dead_lettered_at", models.DateTimeField()),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("replaying", "Replay pending"),
                            ("replayed", "Replayed"),
                            ("discarded", "Discarded"),
                        ],
                        default="pending",
                        max_length=10,
                    ),
                ),
                ("replays", models.PositiveIntegerField(default=0)),
                ("last_replayed_at", models.DateTimeField(blank=True, null=True)),
                ("discarded_at", models.DateTimeField(blank=True, null=True)),
                ("replay_ref", models.CharField(blank=True, max_length=32, null=True)),
                ("message_digest", models.CharField(blank=True, default="", max_length=64)),
            ],
        ),
        migrations.CreateModel(
            name="Execution",
            fields=[
                (
                    "idempotency_key",
                    models.CharField(max_length=255, primary_key=True, serialize=False),
                ),
                ("job_type", models.CharField(blank=True, default="", max_length=255)),
                ("result", models.JSONField(blank=True, null=True)),
                ("completed_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.CreateModel(
            name="LeaderLease",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("holder", models.CharField(max_length=255)),
                ("expires_at", models.DateTimeField()),
                ("acquired_at", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="PausedQueue",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("queue_name", models.CharField(max_length=100, unique=True)),
                ("paused_at", models.DateTimeField()),
                ("paused_by", models.CharField(max_length=150)),
                ("reason", models.TextField()),
            ],
            options={
                "permissions": [("pause_queue", "Can pause and resume queues (audited)")],
            },
        ),
        migrations.CreateModel(
            name="RateBucket",
            fields=[
                ("queue_name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("tokens", models.FloatField()),
                ("updated_at", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="UniqueKey",
            fields=[
                ("key", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("job_id", models.BigIntegerField()),
                ("states", models.CharField(max_length=40)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="WorkerRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("worker_id", models.CharField(max_length=255, unique=True)),
                ("host", models.CharField(max_length=255)),
                ("pid", models.PositiveIntegerField()),
                ("queues", models.JSONField(default=list)),
                ("concurrency", models.PositiveIntegerField(default=1)),
                ("started_at", models.DateTimeField()),
                ("last_heartbeat_at", models.DateTimeField()),
                ("jobs_succeeded", models.PositiveIntegerField(default=0)),
                ("jobs_failed", models.PositiveIntegerField(default=0)),
                ("current_job_ids", models.JSONField(default=list)),
                ("last_claim_at", models.DateTimeField(blank=True, null=True)),
                ("command", models.CharField(blank=True, default="", max_length=10)),
                ("commanded_by", models.CharField(blank=True, default="", max_length=150)),
            ],
            options={
                "permissions": [("control_worker", "Can quiet and stop workers (audited)")],
            },
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seq", models.BigIntegerField(unique=True)),
                ("at", models.DateTimeField()),
                ("actor", models.CharField(max_length=150)),
                (
                    "channel",
                    models.CharField(
                        choices=[
                            ("console", "Console"),
                            ("cli", "Command line"),
                            ("api", "API"),
                            ("code", "Python code"),
                            ("system", "Redrive itself"),
                            ("unrecorded", "Not recorded"),
                        ],
                        max_length=10,
                    ),
                ),
                ("token", models.CharField(blank=True, default="", max_length=64)),
                ("action", models.CharField(max_length=40)),
                ("target_kind", models.CharField(max_length=20)),
                ("targets", models.JSONField(default=list)),
                ("reason", models.TextField(blank=True, default="")),
                ("params", models.JSONField(default=dict)),
                ("outcome", models.CharField(default="done", max_length=20)),
                ("prev_hash", models.CharField(max_length=64)),
                ("hash", models.CharField(max_length=64)),
            ],
            options={
                "indexes": [
                    models.Index(fields=["-at", "-id"], name="jobqueue_audit_at_idx"),
                    models.Index(fields=["actor", "-id"], name="jobqueue_audit_actor_idx"),
                    models.Index(fields=["action", "-id"], name="jobqueue_audit_action_idx"),
                ],
            },
        ),
        migrations.CreateModel(
            name="Deploy",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seq", models.BigIntegerField(unique=True)),
                ("version", models.CharField(max_length=100)),
                ("at", models.DateTimeField()),
                ("note", models.TextField(blank=True, default="")),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("command", "manage.py deploy mark"),
                            ("worker", "A worker started with a new version"),
                            ("code", "Python code"),
                        ],
                        max_length=10,
                    ),
                ),
                ("recorded_by", models.CharField(max_length=150)),
            ],
            options={
                "indexes": [models.Index(fields=["at"], name="jobqueue_deploy_at_idx")],
            },
        ),
        migrations.CreateModel(
            name="Job",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("task_path", models.CharField(max_length=255)),
                ("queue_name", models.CharField(default="default", max_length=100)),
                ("priority", models.SmallIntegerField(default=0)),
                ("backend", models.CharField(default="default", max_length=100)),
                ("args", models.JSONField(default=list)),
                ("kwargs", models.JSONField(default=dict)),
                ("idempotency_key", models.CharField(blank=True, max_length=255, null=True)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("ready", "Ready"),
                            ("running", "Running"),
                            ("done", "Done"),
                            ("dead", "Dead"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="ready",
                        max_length=10,
                    ),
                ),
                ("run_after", models.DateTimeField()),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("max_attempts", models.PositiveIntegerField(default=5)),
                ("lease_token", models.CharField(blank=True, max_length=64, null=True)),
                ("locked_until", models.DateTimeField(blank=True, null=True)),
                ("locked_by", models.CharField(blank=True, max_length=255, null=True)),
                ("worker_ids", models.JSONField(default=list)),
                ("enqueued_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("last_attempted_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("errors", models.JSONField(default=list)),
                ("return_value", models.JSONField(blank=True, null=True)),
                ("ordering_key", models.CharField(blank=True, max_length=255, null=True)),
                ("ordering_position", models.BigIntegerField(blank=True, null=True)),
                (
                    "ordering_on_dead",
                    models.CharField(
                        blank=True,
                        choices=[("block", "Block"), ("skip", "Skip")],
                        max_length=5,
                        null=True,
                    ),
                ),
                ("concurrency_key", models.CharField(blank=True, max_length=255, null=True)),
                ("concurrency_limit", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "replayed_from",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="replay_jobs",
                        to="jobqueue.deadletter",
                    ),
                ),
            ],
            options={
                "permissions": [("act_on_job", "Can run queued jobs now or cancel them (audited)")],
            },
        ),
        migrations.AddField(
            model_name="deadletter",
            name="job",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="jobqueue.job",
            ),
        ),
        migrations.AddField(
            model_name="deadletter",
            name="replay_job",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="jobqueue.job",
            ),
        ),
        migrations.CreateModel(
            name="JobCounter",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("minute", models.DateTimeField()),
                ("queue_name", models.CharField(max_length=100)),
                ("task_path", models.CharField(max_length=255)),
                ("succeeded", models.PositiveIntegerField(default=0)),
                ("failed", models.PositiveIntegerField(default=0)),
                ("dead", models.PositiveIntegerField(default=0)),
                ("last_success_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "indexes": [models.Index(fields=["minute"], name="jobqueue_counter_minute_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("minute", "queue_name", "task_path"), name="jobqueue_counter_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="JobTiming",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("span", models.PositiveSmallIntegerField(default=1)),
                ("minute", models.DateTimeField()),
                ("queue_name", models.CharField(max_length=100)),
                ("task_path", models.CharField(max_length=255)),
                (
                    "kind",
                    models.CharField(
                        choices=[("run", "Run time"), ("wait", "Queue wait")], max_length=4
                    ),
                ),
                ("bucket", models.PositiveSmallIntegerField()),
                ("count", models.PositiveIntegerField(default=0)),
                ("seconds", models.FloatField(default=0.0)),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["task_path", "span", "minute"], name="jobqueue_timing_task_idx"
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("span", "minute", "queue_name", "task_path", "kind", "bucket"),
                        name="jobqueue_timing_uniq",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="OutboxMessage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("topic", models.CharField(max_length=255)),
                ("key", models.CharField(blank=True, max_length=255, null=True)),
                ("payload", models.JSONField(default=dict)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("leased", "Leased"),
                            ("published", "Published"),
                            ("dead", "Dead"),
                        ],
                        default="pending",
                        max_length=10,
                    ),
                ),
                ("created_at", models.DateTimeField()),
                ("available_at", models.DateTimeField()),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("lease_token", models.CharField(blank=True, max_length=64, null=True)),
                ("locked_until", models.DateTimeField(blank=True, null=True)),
                ("locked_by", models.CharField(blank=True, max_length=255, null=True)),
                ("last_attempted_at", models.DateTimeField(blank=True, null=True)),
                ("published_at", models.DateTimeField(blank=True, null=True)),
                ("errors", models.JSONField(default=list)),
                (
                    "dead_letter",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="jobqueue.deadletter",
                    ),
                ),
            ],
            options={
                "db_table": "jobqueue_outbox",
            },
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200, unique=True)),
                ("task_path", models.CharField(max_length=255)),
                ("cron", models.CharField(max_length=120)),
                ("timezone", models.CharField(default="UTC", max_length=64)),
                ("args", models.JSONField(default=list)),
                ("kwargs", models.JSONField(default=dict)),
                ("overlap", models.BooleanField(default=True)),
                (
                    "catch_up",
                    models.CharField(
                        choices=[
                            ("none", "None (only a tick on time)"),
                            ("latest", "The latest missed tick"),
                            ("all", "Every missed tick (bounded)"),
                        ],
                        default="latest",
                        max_length=6,
                    ),
                ),
                ("catch_up_limit", models.PositiveIntegerField(default=10)),
                ("declared", models.BooleanField(default=True)),
                ("next_run_at", models.DateTimeField()),
                ("last_tick_at", models.DateTimeField(blank=True, null=True)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("paused_by", models.CharField(blank=True, max_length=150)),
                ("pause_reason", models.TextField(blank=True)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                (
                    "last_job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="jobqueue.job",
                    ),
                ),
            ],
            options={
                "permissions": [
                    ("manage_schedule", "Can pause, resume and run schedules (audited)")
                ],
            },
        ),
        migrations.CreateModel(
            name="ScheduleRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tick", models.DateTimeField()),
                (
                    "outcome",
                    models.CharField(
                        choices=[
                            ("enqueued", "Enqueued"),
                            ("skipped", "Skipped: the last run was still live"),
                            ("missed", "Missed (catch-up)"),
                            ("manual", "Run now by an operator"),
                            ("error", "Could not enqueue"),
                        ],
                        max_length=8,
                    ),
                ),
                ("note", models.TextField(blank=True)),
                ("at", models.DateTimeField()),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="jobqueue.job",
                    ),
                ),
                (
                    "schedule",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="jobqueue.schedule",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Workflow",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("task_path", models.CharField(max_length=255)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("running", "Running"),
                            ("sleeping", "Sleeping"),
                            ("waiting", "Waiting for a signal"),
                            ("done", "Done"),
                            ("dead", "Dead at a step"),
                        ],
                        default="running",
                        max_length=10,
                    ),
                ),
                ("step", models.CharField(blank=True, max_length=200)),
                ("wake_at", models.DateTimeField(blank=True, null=True)),
                ("waiting_for", models.CharField(blank=True, max_length=200)),
                ("started_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="jobqueue.job",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="WorkflowSignal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                ("payload", models.JSONField(blank=True, null=True)),
                ("sent_at", models.DateTimeField()),
                (
                    "workflow",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="signals",
                        to="jobqueue.workflow",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="WorkflowStep",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("call", "Step"),
                            ("sleep", "Sleep"),
                            ("wait", "Wait for a signal"),
                            ("batch", "Batch"),
                        ],
                        max_length=5,
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("failed", "Failed (will retry)"),
                            ("dead", "Dead"),
                            ("done", "Done"),
                        ],
                        max_length=7,
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("result", models.JSONField(blank=True, null=True)),
                ("errors", models.JSONField(default=list)),
                ("wake_at", models.DateTimeField(blank=True, null=True)),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "workflow",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="jobqueue.workflow",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="AuditTarget",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("kind", models.CharField(max_length=20)),
                ("ref", models.CharField(max_length=255)),
                (
                    "entry",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="jobqueue.auditentry",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["kind", "ref", "-entry"], name="jobqueue_audittarget_idx")
                ],
            },
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", True), ("state", "ready")),
                fields=["-priority", "run_after", "id"],
                name="jobqueue_job_ready_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", True), ("state", "ready")),
                fields=["queue_name", "-priority", "run_after", "id"],
                name="jobqueue_job_ready_queue_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", False), ("state", "ready")),
                fields=["concurrency_key", "-priority", "run_after", "id"],
                name="jobqueue_job_ready_key_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", False), ("state", "running")),
                fields=["concurrency_key"],
                name="jobqueue_job_running_key_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "running")),
                fields=["locked_until"],
                name="jobqueue_job_leased_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "dead")), fields=["id"], name="jobqueue_job_dead_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("replayed_from__isnull", False)),
                fields=["replayed_from"],
                name="jobqueue_job_replayed_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("idempotency_key__isnull", False)),
                fields=["idempotency_key"],
                name="jobqueue_job_key_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("ordering_key"),
                django.db.models.functions.comparison.Coalesce(
                    "ordering_position", "id", output_field=models.BigIntegerField()
                ),
                condition=models.Q(
                    ("ordering_key__isnull", False), ("state__in", ["ready", "running", "dead"])
                ),
                name="jobqueue_job_ordering_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("idempotency_key__isnull", False), models.Q(("state", "dead"), _negated=True)
                ),
                fields=("idempotency_key",),
                name="jobqueue_job_live_key_uniq",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("lease_token__isnull", False),
                        ("locked_until__isnull", False),
                        ("state", "running"),
                    ),
                    models.Q(("state", "running"), _negated=True),
                    _connector="OR",
                ),
                name="jobqueue_job_running_has_lease",
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                condition=models.Q(("replay_ref__isnull", False)),
                fields=["replay_ref"],
                name="jobqueue_dl_replay_ref_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                condition=models.Q(("state", "pending")),
                fields=["task_path", "dead_lettered_at"],
                name="jobqueue_dl_pending_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(fields=["dead_lettered_at", "id"], name="jobqueue_dl_time_idx"),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(fields=["original_job_id"], name="jobqueue_dl_original_job_idx"),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                fields=["task_path", "dead_lettered_at", "id"], name="jobqueue_dl_type_time_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                fields=["state", "dead_lettered_at", "id"], name="jobqueue_dl_state_time_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                fields=["error_class", "dead_lettered_at", "id"], name="jobqueue_dl_error_time_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                fields=["queue_name", "dead_lettered_at", "id"], name="jobqueue_dl_queue_time_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                fields=["fingerprint", "dead_lettered_at", "id"], name="jobqueue_dl_fp_time_idx"
            ),
        ),
        migrations.AddConstraint(
            model_name="deadletter",
            constraint=models.UniqueConstraint(
                condition=models.Q(("source", "django_q2")),
                fields=("idempotency_key",),
                name="jobqueue_dl_django_q2_task_uniq",
            ),
        ),
        migrations.AddConstraint(
            model_name="deadletter",
            constraint=models.UniqueConstraint(
                condition=models.Q(("source__in", ["rabbitmq", "sqs"])),
                fields=("source", "idempotency_key"),
                name="jobqueue_dl_broker_message_uniq",
            ),
        ),
        migrations.AddIndex(
            model_name="outboxmessage",
            index=models.Index(
                condition=models.Q(("state", "pending")),
                fields=["id"],
                name="jobqueue_outbox_pending_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="outboxmessage",
            index=models.Index(
                condition=models.Q(("key__isnull", False), ("state__in", ["pending", "leased"])),
                fields=["key", "id"],
                name="jobqueue_outbox_key_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="outboxmessage",
            index=models.Index(
                condition=models.Q(("state", "leased")),
                fields=["locked_until"],
                name="jobqueue_outbox_leased_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="outboxmessage",
            index=models.Index(
                condition=models.Q(("state", "published")),
                fields=["published_at"],
                name="jobqueue_outbox_published_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="outboxmessage",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("lease_token__isnull", False),
                        ("locked_until__isnull", False),
                        ("state", "leased"),
                    ),
                    models.Q(("state", "leased"), _negated=True),
                    _connector="OR",
                ),
                name="jobqueue_outbox_leased_has_lease",
            ),
        ),
        migrations.AddIndex(
            model_name="schedule",
            index=models.Index(
                condition=models.Q(("declared", True), ("paused_at__isnull", True)),
                fields=["next_run_at"],
                name="jobqueue_schedule_due_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="schedulerun",
            index=models.Index(fields=["schedule", "-at"], name="jobqueue_schedulerun_at_idx"),
        ),
        migrations.AddIndex(
            model_name="schedulerun",
            index=models.Index(
                condition=models.Q(("outcome", "enqueued"), _negated=True),
                fields=["-at", "-id"],
                name="jobqueue_schedulerun_unrun_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="schedulerun",
            constraint=models.UniqueConstraint(
                condition=models.Q(("outcome", "manual"), _negated=True),
                fields=("schedule", "tick"),
                name="jobqueue_schedulerun_one_per_tick",
            ),
        ),
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(fields=["-updated_at", "-id"], name="jobqueue_workflow_upd_idx"),
        ),
        migrations.AddConstraint(
            model_name="workflowsignal",
            constraint=models.UniqueConstraint(
                fields=("workflow", "name"), name="jobqueue_workflowsignal_one_per_name"
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowstep",
            constraint=models.UniqueConstraint(
                fields=("workflow", "name"), name="jobqueue_workflowstep_one_per_name"
            ),
        ),
        migrations.RunPython(postgresql_search, migrations.RunPython.noop),
    ]
