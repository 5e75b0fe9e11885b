"""The development migrations the squashes replace, for tests that migrate back to one of them
and forward again through the data migration they pin (and for tests/migration_schema.py).

Django's loader hides a squash's replaced migrations once all of them are applied, as they are
in a test database made from the squash: this executor's loader keeps them in the graph (the
squashes too, which nothing depends on), so `migrate([("jobqueue", "0016_workflows")])` goes
back along the old chain."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader


def executor(using=None) -> MigrationExecutor:
    conn = using or connection
    executor = MigrationExecutor(conn)
    executor.loader = MigrationLoader(conn, replace_migrations=False)
    return executor


def latest() -> list[tuple[str, str]]:
    """Every app's last migration along the old chains (the squashes left out)."""
    return [node for node in executor().loader.graph.leaf_nodes() if "_squashed_" not in node[1]]
