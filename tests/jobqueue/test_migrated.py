"""The long-running commands refuse an unmigrated queue instead of failing on a missing table."""

import pytest
from django.core.management.base import CommandError
from django.db.migrations.recorder import MigrationRecorder

from jobqueue.management.cli import ensure_migrated

pytestmark = pytest.mark.django_db


def test_a_migrated_queue_starts():
    ensure_migrated()


def test_a_queue_migration_missing_from_the_database_is_named():
    MigrationRecorder.Migration.objects.filter(
        app="jobqueue", name="0007_lean_job_indexes"
    ).delete()
    with pytest.raises(CommandError, match=r"jobqueue\.0007_lean_job_indexes.*manage.py migrate"):
        ensure_migrated()
