"""One frozen selection for dead letters and jobs: deadletters.JobSelection's rows move into
deadletters.Selection (kind "jobs"), which gains what a jobs selection kept (when it was applied,
why, how many changed); `dead_letter_ids` is now `ids`."""

from django.db import migrations, models


def move_in(apps, schema_editor):
    db = schema_editor.connection.alias
    Selection = apps.get_model("deadletters", "Selection")
    JobSelection = apps.get_model("deadletters", "JobSelection")
    for old in JobSelection.objects.using(db).order_by("id").iterator():
        Selection.objects.using(db).create(
            operator_id=old.operator_id,
            kind="jobs",
            action=old.action,
            filter=old.filter,
            ids=old.job_ids,
            database=old.database,
            created_at=old.created_at,
            applied_at=old.applied_at,
            reason=old.reason,
            changed=old.changed,
        )


class Migration(migrations.Migration):
    dependencies = [("deadletters", "0014_run_events_in_the_audit_log")]

    operations = [
        migrations.RenameField("selection", "dead_letter_ids", "ids"),
        migrations.AddField(
            "selection",
            "kind",
            models.CharField(
                choices=[("letters", "Dead letters"), ("jobs", "Jobs")],
                default="letters",
                max_length=10,
            ),
        ),
        migrations.AlterField("selection", "action", models.CharField(max_length=10)),
        migrations.AddField("selection", "applied_at", models.DateTimeField(blank=True, null=True)),
        migrations.AddField("selection", "reason", models.TextField(blank=True)),
        migrations.AddField("selection", "changed", models.PositiveIntegerField(default=0)),
        migrations.RunPython(move_in, migrations.RunPython.noop),
        migrations.DeleteModel(name="JobSelection"),
    ]
