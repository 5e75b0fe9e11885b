"""Full-text search over dead letters' error text and payload values, on PostgreSQL
(deadletters/search.py queries with the same expression). SQLite searches without an index,
bounded to the newest letters."""

from django.db import migrations

INDEX = """
CREATE INDEX IF NOT EXISTS jobqueue_dl_search_idx ON jobqueue_deadletter USING gin (
    (to_tsvector('simple'::regconfig, last_error)
     || jsonb_to_tsvector('simple'::regconfig, args, '["string", "numeric"]'::jsonb)
     || jsonb_to_tsvector('simple'::regconfig, kwargs, '["string", "numeric"]'::jsonb))
)
"""


# The error text alone: what a user who may not see masked payload values searches.
ERROR_INDEX = """
CREATE INDEX IF NOT EXISTS jobqueue_dl_error_search_idx ON jobqueue_deadletter USING gin (
    to_tsvector('simple'::regconfig, last_error)
)
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(INDEX)
        schema_editor.execute(ERROR_INDEX)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS jobqueue_dl_search_idx")
        schema_editor.execute("DROP INDEX IF EXISTS jobqueue_dl_error_search_idx")


class Migration(migrations.Migration):
    dependencies = [("jobqueue", "0017_deadletter_fingerprint")]

    operations = [migrations.RunPython(create, drop)]
