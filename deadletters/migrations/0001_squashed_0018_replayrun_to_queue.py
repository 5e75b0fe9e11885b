"""The console's tables as 0.1.0 ships them: the 18 migrations of its development squashed
into one (`replaces`); tests/test_migrations.py checks that both ways give the same schema.
Then the triggers that keep the pending and hourly counts (deadletters.counters holds their
SQL, per database)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def install_count_triggers(apps, schema_editor):
    from deadletters import counters

    counters.reinstall(schema_editor.connection)


def drop_count_triggers(apps, schema_editor):
    from deadletters import counters

    for sql in counters.drop_statements(schema_editor.connection.vendor):
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    initial = True
    replaces = [
        ("deadletters", "0001_audit_log"),
        ("deadletters", "0002_counts"),
        ("deadletters", "0003_count_triggers"),
        ("deadletters", "0004_pending_count_queue"),
        ("deadletters", "0005_replayitem_external_id"),
        ("deadletters", "0006_run_events"),
        ("deadletters", "0007_replayrun_next_item_at"),
        ("deadletters", "0008_reveal"),
        ("deadletters", "0009_job_selection"),
        ("deadletters", "0010_counts_by_fingerprint"),
        ("deadletters", "0011_triage"),
        ("deadletters", "0012_selection_database"),
        ("deadletters", "0013_job_selection_database"),
        ("deadletters", "0014_run_events_in_the_audit_log"),
        ("deadletters", "0015_one_selection"),
        ("deadletters", "0016_reveals_exports_edits_in_the_audit_log"),
        ("deadletters", "0017_api_tokens_and_idempotent_requests"),
        ("deadletters", "0018_replayrun_to_queue"),
    ]

    dependencies = [
        ("jobqueue", "0001_squashed_0028_workerrecord_last_claim_at"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100)),
                ("prefix", models.CharField(max_length=16, unique=True)),
                ("secret_hash", models.CharField(max_length=64)),
                ("scopes", models.CharField(max_length=20)),
                ("created_at", models.DateTimeField()),
                ("expires_at", models.DateTimeField()),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [("revoke_any_apitoken", "Can revoke any user's API token")],
            },
        ),
        migrations.CreateModel(
            name="HourlyCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("task_path", models.CharField(max_length=255)),
                ("fingerprint", models.CharField(default="", max_length=16)),
                ("hour", models.DateTimeField()),
                ("dead_lettered", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("hour", "task_path", "fingerprint"),
                        name="deadletters_hourly_fp_uniq",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="PendingCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("task_path", models.CharField(max_length=255)),
                ("queue_name", models.CharField(default="default", max_length=100)),
                ("error_class", models.CharField(max_length=255)),
                ("fingerprint", models.CharField(default="", max_length=16)),
                ("pending", models.BigIntegerField(default=0)),
                ("died_again", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("task_path", "queue_name", "error_class", "fingerprint"),
                        name="deadletters_pendingcount_fp_uniq",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Selection",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[("letters", "Dead letters"), ("jobs", "Jobs")],
                        default="letters",
                        max_length=10,
                    ),
                ),
                ("action", models.CharField(max_length=10)),
                ("filter", models.JSONField(blank=True, default=dict)),
                ("ids", models.JSONField(default=list)),
                ("database", models.CharField(default="default", max_length=100)),
                ("created_at", models.DateTimeField()),
                ("applied_at", models.DateTimeField(blank=True, null=True)),
                ("reason", models.TextField(blank=True)),
                ("changed", models.PositiveIntegerField(default=0)),
                (
                    "operator",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="ReplayRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        choices=[("replay", "Replay"), ("discard", "Discard")],
                        default="replay",
                        max_length=10,
                    ),
                ),
                ("operator_name", models.CharField(max_length=150)),
                ("reason", models.TextField()),
                ("filter", models.JSONField(blank=True, default=dict)),
                ("job_types", models.JSONField(blank=True, default=list)),
                ("allow_poisoned", models.BooleanField(default=False)),
                ("to_queue", models.CharField(blank=True, default="", max_length=100)),
                ("batch_size", models.PositiveIntegerField()),
                (
                    "rate",
                    models.FloatField(default=0, help_text="items per second; 0 is unlimited"),
                ),
                ("next_item_at", models.DateTimeField(blank=True, null=True)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("awaiting", "Awaiting approval"),
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("paused", "Paused"),
                            ("halted", "Halted by canary"),
                            ("cancelled", "Cancelled"),
                            ("finished", "Finished"),
                        ],
                        default="queued",
                        max_length=10,
                    ),
                ),
                ("requested", models.PositiveIntegerField()),
                ("processed", models.PositiveIntegerField(default=0)),
                ("done", models.PositiveIntegerField(default=0)),
                ("skipped", models.PositiveIntegerField(default=0)),
                ("batches", models.PositiveIntegerField(default=0)),
                ("generation", models.PositiveIntegerField(default=0)),
                ("stopped_by", models.CharField(blank=True, default="", max_length=150)),
                ("canary_size", models.PositiveIntegerField(default=0)),
                ("canary_max_dead_share", models.FloatField(default=0.2)),
                ("canary_timeout", models.FloatField(default=300.0)),
                (
                    "canary_state",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "No canary"),
                            ("watching", "Canary replayed, waiting for its jobs"),
                            ("passed", "Canary passed"),
                            ("halted", "Canary failed: run halted"),
                            ("overridden", "Canary failed: resumed by an operator"),
                        ],
                        default="",
                        max_length=10,
                    ),
                ),
                ("canary_done", models.PositiveIntegerField(default=0)),
                ("canary_dead", models.PositiveIntegerField(default=0)),
                ("canary_started_at", models.DateTimeField(blank=True, null=True)),
                ("approved_by", models.CharField(blank=True, default="", max_length=150)),
                ("approved_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("updated_at", models.DateTimeField()),
                (
                    "operator",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "selection",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="run",
                        to="deadletters.selection",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    ("view_deadletter", "Can browse dead letters"),
                    ("replay_deadletter", "Can replay dead letters"),
                    ("discard_deadletter", "Can discard dead letters"),
                    ("replay_poisoned", "Can replay items past the poison limit"),
                    ("edit_deadletter", "Can edit a dead letter's payload and replay it (audited)"),
                    ("export_deadletter", "Can export dead letters (audited)"),
                    ("view_secrets", "Can see dead-letter payloads unmasked (audited)"),
                ],
            },
        ),
        migrations.CreateModel(
            name="IdempotentRequest",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=255)),
                ("fingerprint", models.CharField(max_length=64)),
                ("status", models.PositiveSmallIntegerField()),
                ("body", models.JSONField(default=dict)),
                ("created_at", models.DateTimeField()),
                (
                    "token",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="deadletters.apitoken",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["created_at"], name="deadletters_idem_at_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("token", "key"), name="deadletters_idem_key_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="PayloadEdit",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("operator_name", models.CharField(max_length=150)),
                ("reason", models.TextField()),
                ("old_args", models.JSONField(default=list)),
                ("old_kwargs", models.JSONField(default=dict)),
                ("new_args", models.JSONField(default=list)),
                ("new_kwargs", models.JSONField(default=dict)),
                ("at", models.DateTimeField()),
                (
                    "dead_letter",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="jobqueue.deadletter",
                    ),
                ),
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
                    "operator",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-at", "-id"],
                "indexes": [
                    models.Index(fields=["dead_letter", "at"], name="deadletters_edit_letter_idx")
                ],
            },
        ),
        migrations.CreateModel(
            name="ReplayItem",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("task_path", models.CharField(max_length=255)),
                (
                    "outcome",
                    models.CharField(
                        choices=[
                            ("replayed", "Replayed"),
                            ("discarded", "Discarded"),
                            ("skipped", "Skipped"),
                        ],
                        max_length=10,
                    ),
                ),
                ("skip_reason", models.CharField(blank=True, default="", max_length=255)),
                ("external_id", models.CharField(blank=True, default="", max_length=64)),
                ("batch", models.PositiveIntegerField()),
                ("at", models.DateTimeField()),
                (
                    "dead_letter",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="audit_items",
                        to="jobqueue.deadletter",
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="jobqueue.job",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="items",
                        to="deadletters.replayrun",
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
                "indexes": [
                    models.Index(fields=["dead_letter", "id"], name="deadletters_item_letter_idx"),
                    models.Index(fields=["task_path", "run"], name="deadletters_item_type_idx"),
                ],
            },
        ),
        migrations.AddIndex(
            model_name="replayrun",
            index=models.Index(fields=["created_at", "id"], name="deadletters_run_time_idx"),
        ),
        migrations.AddIndex(
            model_name="replayrun",
            index=models.Index(
                fields=["operator_name", "created_at"], name="deadletters_run_operator_idx"
            ),
        ),
        migrations.RunPython(install_count_triggers, drop_count_triggers),
    ]
