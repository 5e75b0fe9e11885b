from django.db import migrations

from deadletters import counters


def create(apps, schema_editor):
    counters.ensure(schema_editor.connection)


def drop(apps, schema_editor):
    for sql in counters.drop_statements(schema_editor.connection.vendor):
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("deadletters", "0002_counts"),
        ("jobqueue", "0001_initial"),
    ]

    operations = [migrations.RunPython(create, drop)]
