"""The examples of docs/testing.md ("Testing your tasks"), run as they are written there: the
guide shows these functions verbatim, its setup block (imports and the `order` fixture) is this
module's own, and the guide's blocks alone define every name they use
(test_the_guide_shows_only_code_run_here, test_the_guides_code_runs_on_its_own_imports)."""

# --8<-- [start:setup]
from datetime import timedelta

import pytest
from django.test import TestCase

from demo.models import Document, Receipt, Wallet
from demo.services import end_outage, pay, receipt_key, start_outage
from demo.tasks import send_receipt
from jobqueue import testing
from jobqueue.models import JobState


@pytest.fixture
def order(db):
    wallet = Wallet.objects.create(owner="ada", balance_cents=1_000)
    document = Document.objects.create(slug="guide", title="The guide", price_cents=250)
    return {"wallet": wallet, "document": document}


# --8<-- [end:setup]

import importlib  # noqa: E402 - below the guide's block, which is shown as it is
import re  # noqa: E402


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


# --8<-- [start:clock]
def test_the_clock_moves_when_told(redrive):
    before = redrive.clock.now  # an attribute: no parentheses
    redrive.clock.advance(timedelta(minutes=5))
    assert redrive.clock.now - before >= timedelta(minutes=5)
    assert redrive.clock() >= redrive.clock.now - timedelta(seconds=1)


# --8<-- [end:clock]


def guide_blocks() -> list[str]:
    from tests.conftest import BASE_DIR

    return re.findall(r"```python\n(.*?)```", (BASE_DIR / "docs" / "testing.md").read_text(), re.S)


def test_the_guide_shows_only_code_run_here():
    from tests.conftest import BASE_DIR

    here = (BASE_DIR / "tests" / "demo" / "test_testing_guide.py").read_text()
    blocks = guide_blocks()
    assert len(blocks) >= 6
    for block in blocks:
        if block.startswith(("# settings", "# pytest")):
            continue  # configuration, not a test: checked by test_the_guides_settings_work
        assert block in here, f"docs/testing.md shows code no test runs:\n{block}"


def test_the_guides_code_runs_on_its_own_imports():
    """Executed as a module of the guide's blocks alone, in their order: its imports run, and
    every global name a test reads is one the guide defines (or a builtin). A test's arguments
    are pytest fixtures: `redrive` (Redrive's plugin) and `order` (the guide's), besides
    pytest-django's `db`."""
    import ast
    import builtins

    code = "\n\n".join(b for b in guide_blocks() if not b.startswith(("# settings", "# pytest")))
    namespace: dict = {"__name__": "testing_guide"}
    exec(compile(code, "docs/testing.md", "exec"), namespace)  # our own documentation
    fixtures = {"redrive", "order", "db", "self"}
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, ast.FunctionDef):
            continue
        arguments = {a.arg for a in node.args.args}
        assert arguments <= fixtures, f"{node.name} takes {arguments - fixtures}"
        names = [n for n in ast.walk(node) if isinstance(n, ast.Name)]
        local = arguments | {n.id for n in names if isinstance(n.ctx, ast.Store)}
        for name in names:
            assert name.id in local or name.id in namespace or hasattr(builtins, name.id), (
                f"docs/testing.md: {node.name} uses {name.id!r}, which no block imports"
            )
    assert callable(namespace["order"]) and isinstance(namespace["JobState"].DEAD, str)


def test_the_guides_settings_work(settings):
    from django.core.management import call_command

    from jobqueue import checks
    from tests.jobqueue import redrive_options_tasks

    (block,) = [b for b in guide_blocks() if b.startswith("# settings")]
    namespace = {}
    exec(block, namespace)  # our own documentation's settings
    settings.TASKS = namespace["TASKS"]
    module = importlib.reload(redrive_options_tasks)
    assert module.doubled.enqueue(4).return_value == 8
    assert module.charge.enqueue(250).return_value == {"charged": 250}  # queue "payments"
    assert checks.check_tasks_backend() == []
    call_command("check", fail_level="ERROR")
