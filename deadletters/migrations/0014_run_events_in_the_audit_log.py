"""Replay runs' control events (deadletters.RunEvent: paused, resumed, cancelled, approved,
halted by the canary) move into the one audit log (jobqueue.AuditEntry), appended to its chain
oldest first after what is there: nothing is lost. Their channel was not recorded."""

from django.db import migrations

CANARY_ACTOR = "canary"  # deadletters.services.CANARY_ACTOR when these events were written


def move_in(apps, schema_editor):
    from jobqueue.store.audit import GENESIS, entry_hash

    db = schema_editor.connection.alias
    RunEvent = apps.get_model("deadletters", "RunEvent")
    AuditEntry = apps.get_model("jobqueue", "AuditEntry")
    AuditTarget = apps.get_model("jobqueue", "AuditTarget")
    AuditChain = apps.get_model("jobqueue", "AuditChain")
    head = AuditChain.objects.using(db).filter(pk=1).first()
    seq, prev = (head.seq, head.hash) if head else (0, GENESIS)
    for event in RunEvent.objects.using(db).order_by("at", "id").iterator():
        seq += 1
        halted = event.action == "halted"
        entry = AuditEntry(
            seq=seq,
            at=event.at,
            actor=CANARY_ACTOR if halted else event.operator_name,
            channel="system" if halted else "unrecorded",
            token="",
            action=f"run.{event.action}",
            target_kind="run",
            targets=[str(event.run_id)],
            reason="",
            params={},
            outcome="done",
            prev_hash=prev,
        )
        entry.hash = prev = entry_hash(entry)
        entry.save(using=db)
        AuditTarget.objects.using(db).create(entry=entry, kind="run", ref=str(event.run_id))
    AuditChain.objects.using(db).update_or_create(pk=1, defaults={"seq": seq, "hash": prev})


class Migration(migrations.Migration):
    dependencies = [
        ("deadletters", "0013_job_selection_database"),
        ("jobqueue", "0021_audit_log"),
    ]

    operations = [
        migrations.RunPython(move_in, migrations.RunPython.noop),
        migrations.DeleteModel(name="RunEvent"),
    ]
