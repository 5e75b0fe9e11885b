"""Each app's squashed migration makes the schema its development migrations made, one by one:
on the test run's database engine, two empty databases are migrated the two ways in their own
processes (tests/migration_schema.py) and what the databases then hold is compared."""

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from tests.conftest import database_url

pytestmark = pytest.mark.slow
BASE_DIR = Path(__file__).resolve().parent.parent


def empty_databases(tmp_path) -> tuple[list[str], Callable[[], None]]:
    """Two empty databases of the test database's engine, and how to drop them."""
    if connection.vendor == "sqlite":
        return [f"sqlite:///{tmp_path / 'steps.db'}", f"sqlite:///{tmp_path / 'squash.db'}"], (
            lambda: None
        )
    import psycopg

    server = database_url(connection).rsplit("/", 1)[0]
    names = [f"redrive_migrations_{uuid.uuid4().hex[:12]}_{way}" for way in ("steps", "squash")]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')

    def drop():
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return [f"{server}/{name}" for name in names], drop


def test_the_squashed_migrations_make_the_schema_the_migrations_they_replace_made(tmp_path):
    urls, drop = empty_databases(tmp_path)
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.migration_schema", way],
                cwd=BASE_DIR,
                env={**os.environ, "DATABASE_URL": url},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for way, url in zip(("steps", "squash"), urls, strict=True)
        ]
        outputs = [proc.communicate(timeout=240) for proc in procs]
    finally:
        drop()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    steps, squash = (json.loads(out) for out, _ in outputs)
    assert steps["vendor"] == connection.vendor
    # Not two empty answers: every model's table, with its columns and constraints.
    assert {"jobqueue_job", "jobqueue_deadletter", "deadletters_replayrun"} <= set(steps["tables"])
    assert "state" in steps["tables"]["jobqueue_job"]["columns"]
    assert squash == steps


def test_each_squash_replaces_every_migration_before_it():
    loader = MigrationLoader(None, ignore_no_migrations=True, replace_migrations=False)
    for app in ("jobqueue", "deadletters"):
        names = sorted(name for label, name in loader.disk_migrations if label == app)
        [squash] = [name for name in names if "_squashed_" in name]
        replaced = [name for label, name in loader.disk_migrations[(app, squash)].replaces]
        last = squash.split("_squashed_", 1)[1]
        assert replaced == [n for n in names if n != squash and n <= last], app
        assert last in names  # the chain it replaces is still here, for the test above
