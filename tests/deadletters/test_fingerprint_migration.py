"""Dead letters written before fingerprints get theirs from the migration, and the overview's
counters are rebuilt per fingerprint."""

import pytest
from django.core.management import call_command
from django.utils import timezone

from deadletters.models import PendingCount
from jobqueue.fingerprints import fingerprint
from jobqueue.models import DeadLetter
from tests import development_migrations

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("jobqueue", "0016_workflows"), ("deadletters", "0009_job_selection")]


def test_the_migration_backfills_fingerprints_and_recounts_by_them():
    executor = development_migrations.executor()
    executor.migrate(BEFORE)
    apps = development_migrations.executor().loader.project_state(BEFORE).apps
    OldLetter = apps.get_model("jobqueue", "DeadLetter")
    now = timezone.now()
    messages = ["order 7 not found", "order 8 not found", "card declined"]
    for n, message in enumerate(messages):
        OldLetter.objects.create(
            task_path="shop.charge",
            attempts=1,
            last_error=message,
            error_class="shop.Refused",
            errors=[{"message": message, "traceback": "", "exception_class_path": "shop.Refused"}],
            first_failed_at=now,
            dead_lettered_at=now,
            state="pending",
            original_job_id=n + 1,
        )
    try:
        call_command("migrate", verbosity=0)
    finally:
        call_command("migrate", verbosity=0)  # whatever happened, leave the schema current
    prints = dict(DeadLetter.objects.values_list("last_error", "fingerprint"))
    assert prints["order 7 not found"] == prints["order 8 not found"] != prints["card declined"]
    assert prints["card declined"] == fingerprint("shop.Refused", "card declined", "")
    counts = dict(PendingCount.objects.values_list("fingerprint", "pending"))
    assert counts == {prints["order 7 not found"]: 2, prints["card declined"]: 1}
