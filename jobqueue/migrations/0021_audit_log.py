"""One audit log (jobqueue.AuditEntry, hash-chained) in place of the three tables each kind of
operator action had: QueueAction, JobAction and ScheduleAction. Every row is moved in, oldest
first, as an entry of the chain: nothing is lost. A job action's rows of one chunk (one
operator, one action, one reason, one moment) become one entry naming its jobs."""

from itertools import groupby

import django.db.models.deletion
from django.db import migrations, models

CHUNK = 500


def _old_actions(apps, db):
    """(at, action, target kind, targets, actor, reason, params) of every old row."""
    QueueAction = apps.get_model("jobqueue", "QueueAction")
    JobAction = apps.get_model("jobqueue", "JobAction")
    ScheduleAction = apps.get_model("jobqueue", "ScheduleAction")
    rows = []
    for a in QueueAction.objects.using(db).order_by("at", "id").iterator():
        rows.append(
            (a.at, 0, a.id, f"queue.{a.action}", "queue", [a.queue_name], a.actor, a.reason, {})
        )
    for a in ScheduleAction.objects.using(db).order_by("at", "id").iterator():
        params = {"job": a.job_id} if a.job_id is not None else {}
        rows.append(
            (
                a.at,
                1,
                a.id,
                f"schedule.{a.action}",
                "schedule",
                [a.schedule_name],
                a.actor,
                a.reason,
                params,
            )
        )
    jobs = JobAction.objects.using(db).order_by("at", "action", "actor", "reason", "id").iterator()
    for (at, action, actor, reason), group in groupby(
        jobs, key=lambda a: (a.at, a.action, a.actor, a.reason)
    ):
        ids = [a.job_id for a in group]
        for start in range(0, len(ids), CHUNK):
            rows.append(
                (
                    at,
                    2,
                    ids[start],
                    f"job.{action}",
                    "job",
                    ids[start : start + CHUNK],
                    actor,
                    reason,
                    {},
                )
            )
    rows.sort(key=lambda r: r[:3])
    return rows


def move_in(apps, schema_editor):
    from jobqueue.store.audit import GENESIS, entry_hash

    db = schema_editor.connection.alias
    AuditEntry = apps.get_model("jobqueue", "AuditEntry")
    AuditTarget = apps.get_model("jobqueue", "AuditTarget")
    AuditChain = apps.get_model("jobqueue", "AuditChain")
    seq, prev = 0, GENESIS
    for at, _, _, action, kind, targets, actor, reason, params in _old_actions(apps, db):
        seq += 1
        entry = AuditEntry(
            seq=seq,
            at=at,
            actor=actor,
            channel="unrecorded",
            token="",
            action=action,
            target_kind=kind,
            targets=[str(t) for t in targets],
            reason=reason,
            params=params,
            outcome="done",
            prev_hash=prev,
        )
        entry.hash = prev = entry_hash(entry)
        entry.save(using=db)
        AuditTarget.objects.using(db).bulk_create(
            AuditTarget(entry=entry, kind=kind, ref=ref) for ref in entry.targets
        )
    AuditChain.objects.using(db).create(pk=1, seq=seq, hash=prev)


class Migration(migrations.Migration):
    dependencies = [("jobqueue", "0020_unique_holds_cover_retrying")]

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
        migrations.RunPython(move_in, migrations.RunPython.noop),
        migrations.DeleteModel(name="JobAction"),
        migrations.DeleteModel(name="QueueAction"),
        migrations.DeleteModel(name="ScheduleAction"),
    ]
