from django.db import migrations

from deadletters import counters


def create(apps, schema_editor):
    # Installed by 0010 instead: the counters module always holds the newest trigger SQL, which
    # needs the columns 0010 adds. A database that ran this before then is reinstalled there.
    return


def drop(apps, schema_editor):
    for sql in counters.drop_statements(schema_editor.connection.vendor):
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("deadletters", "0002_counts"),
        ("jobqueue", "0001_initial"),
    ]

    operations = [migrations.RunPython(create, drop)]
