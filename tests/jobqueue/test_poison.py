"""Values a database cannot store: refused at enqueue the same way on both databases, and a
poison return value or error fails its own job while every other job is acknowledged."""

import pytest
from django.db import DataError, connection
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTask

from jobqueue import outbox, store
from jobqueue.errors import InvalidArguments
from jobqueue.models import DeadLetter, Job, JobState, OutboxMessage
from jobqueue.store import dialects
from jobqueue.worker import Finished, Worker
from tests.jobqueue import contract_tasks as t

pytestmark = pytest.mark.django_db

NUL_PAYLOADS = [
    pytest.param(("a\x00b",), {}, "args[0]", id="arg"),
    pytest.param((), {"a": "x\x00y"}, "kwargs['a']", id="kwarg"),
    pytest.param((), {"a\x00": 1}, "a key of kwargs", id="key"),
    pytest.param(([{"deep": ["ok", "\x00"]}],), {}, "args[0][0]['deep'][1]", id="nested"),
    pytest.param((), {"outer": {"in\x00ner": 1}}, "a key of kwargs['outer']", id="nested-key"),
]


@pytest.mark.parametrize("args, kwargs, where", NUL_PAYLOADS)
def test_nul_anywhere_in_a_payload_is_refused_at_enqueue(args, kwargs, where):
    with pytest.raises(InvalidArguments) as caught:
        t.echo.enqueue(*args, **kwargs)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, InvalidTask)
    assert f"{where} contains NUL" in str(caught.value)
    with pytest.raises(InvalidArguments, match="contains NUL"):
        task_backends["default"].enqueue_many(t.echo, [((1,), {}), (args, kwargs)])
    with pytest.raises(InvalidArguments, match="contains NUL"):
        t.echo.using(idempotency_key="k").enqueue(*args, **kwargs)
    assert not Job.objects.exists()


def test_a_lone_surrogate_is_refused_at_enqueue():
    with pytest.raises(InvalidArguments, match=r"kwargs\['a'\] contains a lone surrogate"):
        t.echo.enqueue(a="bytes \udcff from a device")
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "value",
    ["\\u0000", "C:\\udata\\new", "\\\\u0000", "snow ☃ and 😀", {"\\u0000": ["\\ud800"]}],
)
def test_text_that_only_looks_like_an_escape_is_stored_exactly(value):
    result = t.echo.enqueue(value)
    assert Job.objects.get(pk=result.id).args == [value]


@pytest.mark.parametrize(
    "using, message",
    [
        ({"queue_name": "q" * 101}, "queue_name must be at most 100 characters"),
        ({"idempotency_key": "k" * 256}, "idempotency_key must be at most 255 characters"),
        ({"idempotency_key": "a\x00b"}, "idempotency_key must not contain NUL"),
        ({"queue_name": "a\x00b"}, "queue_name must not contain NUL"),
    ],
)
def test_task_options_that_do_not_fit_their_column_are_refused(using, message):
    with pytest.raises(InvalidTask, match=message):
        t.echo.using(**using).enqueue(1)
    assert not Job.objects.exists()


def test_outbox_refuses_nul_in_a_message_too():
    with pytest.raises(TypeError, match=r"payload\['a'\]\['b'\] contains NUL"):
        outbox.publish("order.created", {"a": {"b": "x\x00"}})
    with pytest.raises(ValueError, match="key must not contain NUL"):
        outbox.publish("order.created", {}, key="a\x00b")
    assert not OutboxMessage.objects.exists()


# --- the worker -------------------------------------------------------------------------------


@pytest.fixture
def run_worker(monkeypatch, transactional_db):
    """An in-process worker until the queue is empty; a database error stops it at once (and
    fails the test) instead of being retried forever."""
    troubles = []

    def trouble(self, exc):
        troubles.append(exc)
        self.stop()

    monkeypatch.setattr(Worker, "_database_trouble", trouble)

    def run(**kw):
        Worker(burst=True, poll_interval=0.05, **kw).run()
        assert troubles == []

    return run


@pytest.mark.parametrize(
    "poison, text",
    [
        (t.returns_nul, "the return value contains NUL"),
        (t.returns_nul_in_a_key, "a key of the return value contains NUL"),
        (t.returns_lone_surrogate, "the return value['text'] contains a lone surrogate"),
    ],
)
@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_poison_return_value_fails_its_job_alone(run_worker, poison, text, concurrency):
    good = [t.echo.enqueue(n) for n in (1, 2)]
    bad = poison.enqueue()
    good.append(t.echo.enqueue(3))
    run_worker(concurrency=concurrency)
    assert [Job.objects.get(pk=r.id).state for r in good] == [JobState.DONE] * 3
    assert [Job.objects.get(pk=r.id).return_value for r in good] == [1, 2, 3]
    letter = DeadLetter.objects.get()
    assert letter.job_id == int(bad.id) and letter.attempts == 1
    assert letter.error_class == "jobqueue.errors.UnstorableValue"
    assert text in letter.last_error


def test_an_acknowledgement_the_database_refuses_settles_the_rest_of_its_batch(
    monkeypatch, transactional_db
):
    """One batch of four, one of which the database refuses: three acknowledged, the refused one
    failed for good, nothing left to retry."""
    dialect = dialects.of("default")
    real = dialect.acknowledge
    statements = []

    def picky(conn, rows, *, now):
        statements.append(len(rows))
        if any("poison" in text for _, _, text in rows):
            raise DataError("value refused by the database")
        return real(conn, rows, now=now)

    monkeypatch.setattr(dialect, "acknowledge", picky)
    results = [t.echo.enqueue(v) for v in ("a", "poison", "b", "c")]
    worker = Worker(burst=True)
    jobs = store.claim(
        worker_id=worker.worker_id, queues=None, limit=10, lease_seconds=30, using="default"
    )
    for job in jobs:
        worker.held.hold(job)
        worker.held.returned(worker.held.start(job, None))
        worker.finished.put(Finished(job, 0.001, value=job.args[0]))
    assert worker.settler.settle() is True
    assert statements[0] == 4  # the batch, then one statement per job
    assert not worker.held and worker.finished.empty()
    states = {r.args[0]: Job.objects.get(pk=r.id).state for r in results}
    assert states == {"a": "done", "poison": "dead", "b": "done", "c": "done"}
    letter = DeadLetter.objects.get()
    assert letter.error_class == "django.db.utils.DataError" and letter.attempts == 1
    assert worker.stats.succeeded == 3 and worker.stats.dead == 1


def test_postgresql_refusing_a_value_fails_that_job_alone(monkeypatch, run_worker):
    """The same through PostgreSQL's own refusal, with the worker's checks switched off."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite stores NUL; only PostgreSQL refuses it")
    unchecked = lambda value, what="", *rest: store.dumps(value)  # noqa: E731
    monkeypatch.setattr(store, "storable_json", unchecked)
    monkeypatch.setattr(store, "check_value", lambda *a: store.CheckedJSON(unchecked(*a)))
    results = [t.echo.enqueue(n) for n in (1, 2)] + [t.returns_nul.enqueue(), t.echo.enqueue(3)]
    run_worker(concurrency=1)
    states = [Job.objects.get(pk=r.id).state for r in results]
    assert states == [JobState.DONE, JobState.DONE, JobState.DEAD, JobState.DONE]
    letter = DeadLetter.objects.get()
    assert letter.error_class == "django.db.utils.DataError"
    assert "\x00" not in letter.last_error + letter.traceback


@pytest.mark.parametrize(
    "task, error_class, message",
    [
        (t.raises_nul, "builtins.ValueError", "a\\x00b"),
        (t.raises_unprintable, "tests.jobqueue.contract_tasks.Unprintable", "str() failed"),
        (t.raises_a_long_class_path, "characters cut", "boom"),
    ],
)
def test_any_failure_can_be_stored(run_worker, task, error_class, message):
    result = task.enqueue()
    done = t.echo.enqueue(1)
    run_worker(concurrency=1)
    letter = DeadLetter.objects.get()
    assert letter.job_id == int(result.id)
    assert error_class in letter.error_class and len(letter.error_class) <= 255
    assert message in letter.last_error and "\x00" not in letter.traceback
    assert Job.objects.get(pk=done.id).state == JobState.DONE
