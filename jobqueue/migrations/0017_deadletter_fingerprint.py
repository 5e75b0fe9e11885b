"""Error fingerprints on dead letters (jobqueue.fingerprints), existing letters backfilled."""

from django.db import migrations, models

CHUNK = 2_000


def backfill(apps, schema_editor):
    """Fingerprint the letters written before fingerprints, a chunk at a time, from the same
    fields a new letter's is computed from (its last error entry)."""
    from jobqueue.fingerprints import fingerprint

    DeadLetter = apps.get_model("jobqueue", "DeadLetter")
    using = schema_editor.connection.alias
    letters = DeadLetter.objects.using(using).filter(fingerprint="").order_by("pk")
    last = 0
    while chunk := list(
        letters.filter(pk__gt=last).only("pk", "error_class", "last_error", "traceback", "errors")[
            :CHUNK
        ]
    ):
        for letter in chunk:
            entry = letter.errors[-1] if isinstance(letter.errors, list) and letter.errors else {}
            entry = entry if isinstance(entry, dict) else {}
            letter.fingerprint = fingerprint(
                letter.error_class,
                str(entry.get("message") or letter.last_error),
                str(entry.get("traceback") or letter.traceback),
            )
        DeadLetter.objects.using(using).bulk_update(chunk, ["fingerprint"])
        last = chunk[-1].pk


class Migration(migrations.Migration):
    dependencies = [
        ("jobqueue", "0016_workflows"),
    ]

    operations = [
        migrations.AddField(
            model_name="deadletter",
            name="fingerprint",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(
                fields=["fingerprint", "dead_lettered_at", "id"], name="jobqueue_dl_fp_time_idx"
            ),
        ),
    ]
