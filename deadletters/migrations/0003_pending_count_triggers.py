from django.db import migrations

from deadletters import pending_counts


def create(apps, schema_editor):
    pending_counts.ensure(schema_editor.connection)


def drop(apps, schema_editor):
    connection = schema_editor.connection
    drops = (
        pending_counts.POSTGRESQL_DROP
        if connection.vendor == "postgresql"
        else pending_counts.SQLITE_DROP
    )
    for sql in drops:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("deadletters", "0002_pending_counts"),
        ("jobqueue", "0001_initial"),
    ]

    operations = [migrations.RunPython(create, drop)]
