"""The demo's schedule (demo.periodic): what its tally returns, the row `manage.py demo` syncs
and the tick that becomes its job; and that no worker declares it on its own (every runworker
imports demo.tasks, so a declaration there would tick in the test suite's workers)."""

import json
import os
import subprocess
import sys

import pytest

from demo import periodic, services
from demo.models import Payment, Receipt, Wallet
from demo.tasks import tally_receipts
from jobqueue import schedules
from jobqueue.models import Job, Schedule
from tests.conftest import BASE_DIR

pytestmark = pytest.mark.django_db


def test_the_tally_counts_the_payments_still_missing_their_receipt():
    first, _, third = services.seed(payments=3)
    Receipt.objects.create(idempotency_key=services.receipt_key(first.pk), payment=first)
    Receipt.objects.create(idempotency_key=services.receipt_key(third.pk), payment=third)
    assert tally_receipts.call() == {"payments": 3, "receipted": 2, "missing": 1}


def test_a_second_seed_adds_payments_and_tops_up_the_wallet():
    services.seed(payments=2)
    Wallet.objects.update(balance_cents=100)  # nearly emptied by earlier runs' payments
    assert len(services.seed(payments=3)) == 3
    assert Payment.objects.count() == 5


def test_declared_and_synced_the_schedule_ticks_into_a_tally_job(monkeypatch):
    monkeypatch.setattr(schedules, "_registry", {})
    periodic.declare()
    periodic.declare()  # a second declaration of the same schedule is the same one
    assert schedules.sync()["created"] == [periodic.RECEIPT_TALLY]
    row = Schedule.objects.get(name=periodic.RECEIPT_TALLY)
    assert (row.task_path, row.cron, row.overlap) == (
        "demo.tasks.tally_receipts",
        "* * * * * */30",
        False,
    )
    assert row.next_run_at.second in (0, 30)
    assert schedules.enqueue_due(now=row.next_run_at) == 1
    assert list(Job.objects.values_list("task_path", flat=True)) == ["demo.tasks.tally_receipts"]


def test_a_worker_does_not_declare_the_demo_schedule_itself():
    # What runworker's sync writes: every app's tasks module imported, demo.tasks among them.
    script = (
        "import json, django; django.setup(); import demo.tasks; "
        "from jobqueue import schedules; print(json.dumps(sorted(schedules.declared())))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    declared = json.loads(out)
    assert isinstance(declared, list) and periodic.RECEIPT_TALLY not in declared
