"""The bridge without a cluster: results go through django-q2's own monitor (save + signal),
built the way its worker builds them."""

import io
import json
import traceback
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.humanhash import uuid
from django_q.models import Failure, OrmQ, Task
from django_q.monitor import monitor
from django_q.queues import Queue
from django_q.signing import SignedPackage

from deadletters import services
from deadletters.models import ReplayItem, ReplayRun
from jobqueue.models import DeadLetter, DeadLetterState
from jobqueue.store.sources import django_q2_letters as q2_store
from tests.deadletters.conftest import user_with_role

from .tasks import ReceiptDown

pytestmark = pytest.mark.django_db

FUNC = "tests.q2bridge.tasks.always_fails"


def package(func=FUNC, args=(7,), kwargs=None, **extra):
    tag = uuid()
    return {
        "id": tag[1],
        "name": tag[0],
        "func": func,
        "args": args,
        "kwargs": kwargs or {},
        "started": timezone.now(),
        **extra,
    }


def result(task, *, success=False, exc=None):
    """The task as django-q2's worker hands it to the monitor after one attempt."""
    task = dict(task)
    if success:
        task["result"] = "ok"
    else:
        try:
            raise exc or ReceiptDown(f"receipt API down for order {task['args'][0]}")
        except Exception as e:  # noqa: BLE001 - the worker's own format
            task["result"] = f"{e} : {traceback.format_exc()}"
    task["success"] = success
    task["stopped"] = timezone.now()
    task["sync"] = True  # in this process: django-q2 then keeps the test's connection open
    return task


def save(*results):
    """Run django-q2's monitor over these results: save_task, then post_execute."""
    queue = Queue()
    for r in results:
        queue.put(r)
    queue.put("STOP")
    monitor(queue, get_broker())
    queue.close()
    queue.join_thread()


def test_only_the_terminal_failure_becomes_one_dead_letter(bridge_on):
    task = package(kwargs={"note": "x"})
    save(result(task), result(task))
    assert Task.objects.get(id=task["id"]).attempt_count == 2
    assert not DeadLetter.objects.exists()  # a retry is still coming

    save(result(task))  # attempt 3 of 3
    letter = DeadLetter.objects.get()
    assert (letter.source, letter.task_path, letter.idempotency_key) == (
        "django_q2",
        FUNC,
        task["id"],
    )
    assert (letter.state, letter.attempts, letter.max_attempts) == ("pending", 3, 3)
    assert letter.last_error == "receipt API down for order 7"
    assert letter.error_class == "tests.q2bridge.tasks.ReceiptDown"
    assert letter.traceback.startswith("Traceback (most recent call last):")
    assert "raise exc or ReceiptDown" in letter.traceback
    assert (letter.args, letter.kwargs) == ([7], {"note": "x"})
    assert letter.first_failed_at == Task.objects.get(id=task["id"]).started
    assert letter.first_failed_at <= letter.dead_lettered_at
    assert letter.errors[0]["attempt"] == 3

    save(result(task))  # the same failure saved again (django-q2 redelivered it)
    assert DeadLetter.objects.count() == 1


def test_acknowledged_failure_is_terminal_at_once(bridge_on):
    task = package(ack_failure=True)
    save(result(task))
    letter = DeadLetter.objects.get()
    assert letter.attempts == 1
    assert letter.first_failed_at == Task.objects.get(id=task["id"]).stopped


def test_success_after_a_failure_never_appears(bridge_on):
    task = package(func="tests.q2bridge.tasks.fails_once")
    save(result(task), result(task, success=True))
    assert Task.objects.get(id=task["id"]).success
    assert not DeadLetter.objects.exists()


def test_bridge_off_records_nothing(bridge_on, settings):
    settings.REDRIVE = {**settings.REDRIVE, "SOURCES": ["jobqueue"]}
    task = package(ack_failure=True)
    save(result(task))
    assert Failure.objects.filter(id=task["id"]).exists()
    assert not DeadLetter.objects.exists()


def test_arguments_are_json_where_exact_and_marked_summaries_elsewhere(bridge_on):
    when = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    task = package(
        args=(7, (1, "a"), when),
        kwargs={"amount": Decimal("9.50"), "ok": {"n": None}, "ids": {1: "x"}},
        ack_failure=True,
    )
    save(result(task))
    letter = DeadLetter.objects.get()
    assert letter.args[:2] == [7, [1, "a"]]
    assert letter.args[2] == {
        "$not_json": "datetime.datetime",
        "summary": repr(when),
    }
    assert letter.kwargs["amount"] == {"$not_json": "decimal.Decimal", "summary": "Decimal('9.50')"}
    assert letter.kwargs["ok"] == {"n": None}
    assert letter.kwargs["ids"]["$not_json"] == "builtins.dict"  # int keys: not exact JSON
    assert q2_store.has_summary(letter.payload)


def test_parse_result_keeps_a_multiline_message_and_a_builtin_class():
    try:
        raise ValueError("line one\nline two")
    except ValueError as e:
        text = f"{e} : {traceback.format_exc()}"
    message, error_class, tb = q2_store.parse_result(text)
    assert (message, error_class) == ("line one\nline two", "ValueError")
    assert tb.startswith("Traceback") and tb.rstrip().endswith("line two")
    assert q2_store.parse_result("Function x is not defined") == (
        "Function x is not defined",
        "",
        "",
    )


def dead_letter(**extra):
    task = package(ack_failure=True, **extra)
    save(result(task))
    return DeadLetter.objects.get(idempotency_key=task["id"])


def replay(letters, operator):
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    return services.start_run(operator=operator, selection=selection, reason="receipt API back")


def queued_task(task_id):
    """The package the ORM broker holds for `task_id` (signed by django-q2 itself)."""
    for row in OrmQ.objects.all():
        pack = SignedPackage.loads(row.payload)
        if pack["id"] == task_id:
            return pack
    return None


def test_replay_enqueues_from_the_failure_row_and_follows_the_outcome(bridge_on):
    operator = user_with_role("operator")
    letter = dead_letter(kwargs={"note": "x"})
    run = replay([letter], operator)
    letter.refresh_from_db()
    item = ReplayItem.objects.get(run=run)
    assert (letter.state, letter.replays, item.outcome) == ("replaying", 1, "replayed")
    assert item.external_id == letter.replay_ref
    assert item.job_id is None and item.job_outcome == "pending"
    pack = queued_task(letter.replay_ref)
    assert (pack["func"], pack["args"], pack["kwargs"]) == (FUNC, (7,), {"note": "x"})
    assert Failure.objects.filter(id=letter.idempotency_key).exists()  # kept

    # A second replay while the first is pending is refused.
    again = replay([letter], operator)
    assert ReplayItem.objects.get(run=again).skip_reason == "an earlier replay is still pending"

    save(result(pack, success=True))
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYED
    assert ReplayItem.objects.get(run=run).job_outcome == "done"


def test_replay_that_dies_again_returns_the_same_letter_to_pending(bridge_on, burials):
    operator = user_with_role("operator")
    letter = dead_letter()
    run = replay([letter], operator)
    letter.refresh_from_db()
    pack = queued_task(letter.replay_ref)
    save(result(pack), result(pack))
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYING  # attempt 2 of 3: a retry is coming
    save(result(pack), result(pack))  # terminal, then saved once more
    burials.returned(letter)
    letter.refresh_from_db()
    assert (letter.state, letter.replays, letter.attempts) == ("pending", 1, 3)
    assert [e["attempt"] for e in letter.errors] == [1, 3]
    assert DeadLetter.objects.count() == 1
    assert ReplayItem.objects.get(run=run).job_outcome == "failed again"


def test_replay_of_a_pruned_failure_is_refused_and_the_letter_stays_readable(bridge_on):
    operator = user_with_role("operator")
    letter = dead_letter()
    Failure.objects.filter(id=letter.idempotency_key).delete()
    run = replay([letter], operator)
    item = ReplayItem.objects.get(run=run)
    assert (item.outcome, item.skip_reason) == ("skipped", q2_store.SKIP_GONE)
    letter.refresh_from_db()
    assert (letter.state, letter.replays) == ("pending", 0)
    assert not OrmQ.objects.exists()


def test_replay_refuses_keywords_that_async_task_would_take_for_itself(bridge_on):
    operator = user_with_role("operator")
    letter = dead_letter()
    Task.objects.filter(id=letter.idempotency_key).update(
        kwargs={"timeout": 5}  # possible only through q_options; would become an option
    )
    run = replay([letter], operator)
    assert "timeout" in ReplayItem.objects.get(run=run).skip_reason
    assert not OrmQ.objects.exists()


def test_cli_replays_through_the_same_service_and_shows_the_django_q2_task(bridge_on):
    operator = user_with_role("operator")
    letter = dead_letter()
    call_command(
        "deadletters", "replay", str(letter.pk), "--reason", "ledger back",
        "--operator", operator.username, stdout=io.StringIO(),
    )  # fmt: skip
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYING
    assert ReplayRun.objects.get().operator_name == operator.username
    out = io.StringIO()
    call_command("deadletters", "show", str(letter.pk), "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["source"] == "django_q2"
    assert shown["history"][0]["made"] == {"what": "django-q2 task", "reference": letter.replay_ref}
    assert shown["history"][0]["replay_outcome"] == "pending"


def test_replay_is_refused_without_the_orm_broker(bridge_on, monkeypatch):
    from django_q.conf import Conf

    operator = user_with_role("operator")
    letter = dead_letter()
    monkeypatch.setattr(Conf, "ORM", None)  # e.g. Redis: enqueued before our commit
    run = replay([letter], operator)
    assert ReplayItem.objects.get(run=run).skip_reason == q2_store.SKIP_BROKER
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.PENDING
