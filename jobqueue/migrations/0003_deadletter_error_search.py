"""Trigram index for the console's "text in the last error" filter on PostgreSQL.

`last_error__icontains` compiles to UPPER(last_error::text) LIKE UPPER(%s); without this index a
search reads every dead letter (about a second at a million rows). SQLite has no trigram index
and scans, which is fine at the sizes SQLite serves.
"""

from django.db import migrations

CREATE = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS jobqueue_dl_last_error_trgm "
    "ON jobqueue_deadletter USING gin (upper(last_error::text) gin_trgm_ops)",
]
DROP = ["DROP INDEX IF EXISTS jobqueue_dl_last_error_trgm"]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql in CREATE:
            schema_editor.execute(sql)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql in DROP:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("jobqueue", "0002_worker_registry")]

    operations = [migrations.RunPython(forwards, backwards)]
