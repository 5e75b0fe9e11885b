"""Migrate an empty database one of two ways and print its schema (tests/test_migrations.py).

    python -m tests.migration_schema steps|squash

`squash`: as `manage.py migrate` does on a new database (each app's squashed migration).
`steps`: through every migration the squashes replace, one by one, as a database made during
development was. DATABASE_URL names the empty database.

The schema is what the database itself says, not what the migrations meant: each table's
columns (type, nullability, default, generated expression), its constraints and indexes with
their columns and kinds, and on PostgreSQL each index's definition and each trigger; on SQLite
each index's and trigger's SQL. Column order is left out: a column added later sits last in a
table made step by step, in model order in one made at once, and nothing reads by position.
"""

import json
import os
import sys

import django

OURS = ("jobqueue_", "deadletters_")


def migrate(mode: str) -> None:
    from django.core.management import call_command
    from django.core.management.sql import emit_post_migrate_signal
    from django.db import connection

    if mode == "squash":
        call_command("migrate", verbosity=0)
        return
    from tests import development_migrations

    executor = development_migrations.executor()
    # The targets are every leaf but the squashes: the plan runs the old chains.
    targets = development_migrations.latest()
    executor.migrate(targets)
    # What `migrate` does after its plan, as for the squash: the counters' triggers are
    # (re)installed there, since SQLite drops a table's triggers when a migration remakes it.
    emit_post_migrate_signal(verbosity=0, interactive=False, db=connection.alias)


def _constraints(cursor, connection, table: str) -> list:
    found = connection.introspection.get_constraints(cursor, table)
    kept = []
    for name, info in found.items():
        entry = {k: v for k, v in info.items() if k != "definition"}
        # SQLite names a constraint it was not given a name for by its position in the table's
        # SQL, which column order changes: such a one is known by what it is.
        entry["name"] = None if name.startswith("__") else name
        kept.append(json.dumps(entry, sort_keys=True, default=str))
    return sorted(kept)


def schema() -> dict:
    from django.db import connection

    introspection = connection.introspection
    out: dict = {"vendor": connection.vendor, "tables": {}}
    with connection.cursor() as cursor:
        tables = sorted(t for t in introspection.table_names(cursor) if t.startswith(OURS))
        for table in tables:
            columns = {
                c.name: {
                    "type": str(c.type_code),
                    "null": bool(c.null_ok),
                    "default": str(c.default) if c.default is not None else None,
                }
                for c in introspection.get_table_description(cursor, table)
            }
            out["tables"][table] = {
                "columns": columns,
                "constraints": _constraints(cursor, connection, table),
            }
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT table_name, column_name, data_type, is_generated, generation_expression "
                "FROM information_schema.columns WHERE table_name = ANY(%s)",
                [tables],
            )
            out["columns"] = sorted(map(list, cursor.fetchall()))
            cursor.execute(
                "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s)",
                [tables],
            )
            out["indexes"] = sorted(map(list, cursor.fetchall()))
            cursor.execute(
                "SELECT event_object_table, trigger_name, action_timing, event_manipulation, "
                "action_statement FROM information_schema.triggers "
                "WHERE event_object_table = ANY(%s)",
                [tables],
            )
            out["triggers"] = sorted(map(list, cursor.fetchall()))
            cursor.execute(
                "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
                "JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = current_schema() AND p.prokind = 'f'"
            )
            out["functions"] = sorted(map(list, cursor.fetchall()))
            cursor.execute("SELECT extname FROM pg_extension ORDER BY extname")
            out["extensions"] = [row[0] for row in cursor.fetchall()]
        else:
            cursor.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master "
                "WHERE type IN ('index', 'trigger') AND sql IS NOT NULL"
            )
            out["objects"] = sorted(
                map(list, (row for row in cursor.fetchall() if row[2].startswith(OURS)))
            )
    return out


def main(mode: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    migrate(mode)
    json.dump(schema(), sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
