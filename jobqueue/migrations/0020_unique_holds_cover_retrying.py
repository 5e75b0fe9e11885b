"""Unique jobs' holds in the one vocabulary of job states: "scheduled" meant "waiting for its
time or a retry" to a hold, and "first run later" to the jobs browser. It now means the latter
everywhere, and "retrying" is a state of its own, so a hold written with "scheduled" gets
"retrying" beside it: it covers the same jobs as when it was taken."""

from django.db import migrations


def add_retrying(apps, schema_editor):
    UniqueKey = apps.get_model("jobqueue", "UniqueKey")
    db = schema_editor.connection.alias
    for hold in UniqueKey.objects.using(db).filter(states__contains="scheduled").iterator():
        states = hold.states.split(",")
        if "scheduled" in states and "retrying" not in states:
            states.insert(states.index("scheduled") + 1, "retrying")
            UniqueKey.objects.using(db).filter(pk=hold.pk).update(states=",".join(states))


def drop_retrying(apps, schema_editor):
    UniqueKey = apps.get_model("jobqueue", "UniqueKey")
    db = schema_editor.connection.alias
    for hold in UniqueKey.objects.using(db).filter(states__contains="retrying").iterator():
        states = [s for s in hold.states.split(",") if s != "retrying"]
        UniqueKey.objects.using(db).filter(pk=hold.pk).update(states=",".join(states))


class Migration(migrations.Migration):
    dependencies = [("jobqueue", "0019_deadletter_broker_messages")]
    operations = [migrations.RunPython(add_retrying, drop_retrying, elidable=True)]
