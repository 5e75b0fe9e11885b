"""The examples of docs/testing.md ("Testing your tasks"), run as they are written there: the
guide shows these functions verbatim (test_the_guide_shows_only_code_run_here checks)."""

import importlib
import re
from datetime import timedelta

import pytest
from django.test import TestCase

from demo.models import Document, Receipt, Wallet
from demo.services import end_outage, pay, receipt_key, start_outage
from demo.tasks import send_receipt
from jobqueue import testing
from jobqueue.models import JobState
from tests.conftest import BASE_DIR
from tests.jobqueue import redrive_options_tasks


@pytest.fixture
def order(db):
    wallet = Wallet.objects.create(owner="ada", balance_cents=1_000)
    document = Document.objects.create(slug="guide", title="The guide", price_cents=250)
    return {"wallet": wallet, "document": document}


# --8<-- [start:assert]
def test_paying_enqueues_one_receipt(redrive, order):
    payment = pay(**order)
    redrive.assert_enqueued(
        send_receipt,
        args=[payment.pk],
        queue="receipts",
        idempotency_key=receipt_key(payment.pk),
    )
    redrive.refute_enqueued(send_receipt, args=[payment.pk + 1])


# --8<-- [end:assert]


# --8<-- [start:run]
def test_the_receipt_is_sent(redrive, order):
    payment = pay(**order)
    run = redrive.run(queues=["receipts"])
    assert run.succeeded == 1
    assert Receipt.objects.filter(payment=payment).count() == 1


# --8<-- [end:run]


# --8<-- [start:retries]
def test_a_receipt_that_failed_once_is_sent_by_its_retry(redrive, order):
    start_outage("receipts", seconds=3600)
    payment = pay(**order)
    first = redrive.run(queues=["receipts"], advance=False)  # only what is due now: one try
    assert redrive.outcome(first.ran[0]).errors[0]["exception_class_path"] == (
        "builtins.ConnectionError"
    )
    end_outage("receipts")
    retried = redrive.run(queues=["receipts"])  # the clock jumps past the backoff
    assert retried.ran == first.ran and retried.succeeded == 1
    assert Receipt.objects.filter(payment=payment).count() == 1


# --8<-- [end:retries]


# --8<-- [start:dead]
def test_a_long_outage_leaves_a_dead_letter(redrive, order):
    start_outage("receipts", seconds=86_400)
    pay(**order)
    run = redrive.run(queues=["receipts"], until=timedelta(hours=1))
    outcome = redrive.outcome(run.ran[0])
    assert outcome.state == JobState.DEAD
    assert "receipt service is down" in outcome.dead_letter.last_error


# --8<-- [end:dead]


# --8<-- [start:testcase]
class ReceiptTests(TestCase):
    def test_the_receipt_is_sent(self):
        wallet = Wallet.objects.create(owner="ada", balance_cents=1_000)
        document = Document.objects.create(slug="tc", title="TestCase", price_cents=250)
        pay(wallet=wallet, document=document)
        run = testing.run_jobs(queues=["receipts"])
        self.assertEqual(run.succeeded, 1)


# --8<-- [end:testcase]


def test_the_guide_shows_only_code_run_here():
    guide = (BASE_DIR / "docs" / "testing.md").read_text()
    here = (BASE_DIR / "tests" / "demo" / "test_testing_guide.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    assert len(blocks) >= 5
    for block in blocks:
        if block.startswith(("# settings", "# pytest")):
            continue  # configuration, not a test: checked by test_the_guides_settings_work
        assert block in here, f"docs/testing.md shows code no test runs:\n{block}"


def test_the_guides_settings_work(settings):
    guide = (BASE_DIR / "docs" / "testing.md").read_text()
    (block,) = re.findall(r"```python\n(# settings.*?)```", guide, re.S)
    namespace = {}
    exec(block, namespace)  # our own documentation's settings
    settings.TASKS = namespace["TASKS"]
    assert importlib.reload(redrive_options_tasks).doubled.enqueue(4).return_value == 8
