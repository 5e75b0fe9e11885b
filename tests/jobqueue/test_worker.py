"""The worker loop in-process (handler threads use their own connections, so data commits)."""

import logging
import threading
from datetime import timedelta

import pytest
from django.db import OperationalError, connection, connections
from django.tasks import TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone

from jobqueue import store
from jobqueue.models import DeadLetter, Execution, Job, JobState
from jobqueue.settler import Settler
from jobqueue.worker import MAX_PREFETCH, Finished, Worker
from tests import tasks
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class Clock:
    """Real time plus an offset the test moves forward, so backoff waits take no time."""

    def __init__(self):
        self.offset = timedelta()

    def __call__(self):
        return timezone.now() + self.offset

    def advance(self, **kw):
        self.offset += timedelta(**kw)


def in_thread(worker) -> threading.Thread:
    """The worker running in a thread of its own, which closes its connection when it ends
    (not left for the test's teardown)."""

    def run():
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def burst(**kw):
    kw.setdefault("poll_interval", 0.05)
    return Worker(burst=True, **kw).run()


def test_runs_a_job_and_stores_its_result_with_signals():
    seen = []

    def on_started(sender, task_result, **kwargs):
        seen.append(("started", task_result.status))

    def on_finished(sender, task_result, **kwargs):
        seen.append(("finished", task_result.status))

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        result = tasks.add.enqueue(2, 3)
        assert burst() == 0
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5 and result.attempts == 1
    assert seen == [("started", "RUNNING"), ("finished", "SUCCESSFUL")]


def test_unknown_task_is_dead_lettered_and_the_worker_keeps_running():
    store.enqueue(store.NewJob(task_path="tests.tasks.was_renamed"))
    store.enqueue(store.NewJob(task_path="tests.tasks.not_a_task"))
    good = tasks.noop.enqueue(1)
    burst(concurrency=2)
    letters = DeadLetter.objects.order_by("pk")
    assert [d.error_class for d in letters] == ["jobqueue.errors.UnknownTask"] * 2
    assert all(d.attempts == 1 for d in letters)
    assert Job.objects.get(pk=good.id).state == JobState.DONE


@pytest.mark.parametrize(
    "path", ["tests.broken_tasks.on_import.task", "tests.broken_tasks.exits.task"]
)
def test_a_task_module_that_fails_while_imported_dead_letters_its_job_not_the_worker(path):
    """Its own error (or a SystemExit) while imported: the job is dead at once with the reason,
    and the worker goes on (it crashed on every claim of the job, which never died)."""
    store.enqueue(store.NewJob(task_path=path))
    good = tasks.noop.enqueue(1)
    assert burst() == 0
    letter = DeadLetter.objects.get()
    assert letter.error_class == "jobqueue.errors.UnknownTask" and letter.attempts == 1
    assert "failed" in letter.last_error and path in letter.last_error
    assert Job.objects.get(pk=good.id).state == JobState.DONE


def test_a_row_whose_payload_python_cannot_read_is_dead_lettered_not_a_failed_claim():
    """Written by hand (enqueue refuses it): an integer longer than Python reads from text. The
    claim that leased it must not fail (every claim would, the job never settled)."""
    job, _ = store.enqueue(store.NewJob(task_path="tests.tasks.add", args=[1, 2]))
    with connection.cursor() as cursor:
        literal = "'[' || '" + "9" * 5000 + "' || ', 2]'"
        cast = "::jsonb" if connection.vendor == "postgresql" else ""
        cursor.execute(f"UPDATE jobqueue_job SET args = ({literal}){cast} WHERE id = %s", [job.pk])
    good = tasks.noop.enqueue(1)
    assert burst() == 0
    letter = DeadLetter.objects.get()
    assert letter.error_class == "jobqueue.errors.InvalidPayload" and letter.attempts == 1
    assert Job.objects.get(pk=good.id).state == JobState.DONE


def test_payload_that_does_not_fit_the_task_is_permanent():
    store.enqueue(store.NewJob(task_path="tests.tasks.add", args=[1, 2, 3]))
    burst()
    letter = DeadLetter.objects.get()
    assert letter.error_class == "jobqueue.errors.InvalidPayload" and letter.attempts == 1


@pytest.mark.parametrize("field, value", [("args", 5), ("args", {"a": 1}), ("kwargs", [1])])
def test_a_row_whose_payload_has_the_wrong_shape_is_permanent(field, value):
    job, _ = store.enqueue(store.NewJob(task_path="tests.tasks.add", args=[1, 2]))
    Job.objects.filter(pk=job.pk).update(**{field: value})  # written by hand, not by enqueue
    burst()
    letter = DeadLetter.objects.get()
    assert letter.error_class == "jobqueue.errors.InvalidPayload" and letter.attempts == 1


def test_permanent_error_dead_letters_at_once():
    tasks.permanent.enqueue("bad card number")
    burst()
    letter = DeadLetter.objects.get()
    assert letter.attempts == 1 and letter.last_error == "bad card number"
    assert "PermanentError: bad card number" in letter.traceback
    # How long the attempt ran is kept with its error (the job page shows it).
    [entry] = Job.objects.get(pk=letter.job_id).errors
    assert isinstance(entry["duration_ms"], float) and 0 <= entry["duration_ms"] < 10_000


def test_transient_failures_retry_with_backoff_then_dead_letter():
    clock = Clock()
    result = tasks.always_fails.enqueue("receipt dependency unavailable")
    runs = 0
    while Job.objects.get(pk=result.id).state != JobState.DEAD:
        runs += 1
        assert runs <= 3, "job should be dead after max_attempts=3 runs"
        job = Job.objects.get(pk=result.id)
        assert job.attempts == runs - 1
        burst(clock=clock)
        clock.advance(hours=1)
    letter = DeadLetter.objects.get()
    assert letter.attempts == 3 and letter.error_class == "builtins.ConnectionError"
    assert [e["attempt"] for e in letter.errors] == [1, 2, 3]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.errors) == 3


def test_rate_limited_job_waits_the_providers_delay():
    before = timezone.now()
    result = tasks.rate_limited.enqueue(120)
    burst()
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.READY and job.attempts == 1
    assert (
        before + timedelta(seconds=120) <= job.run_after <= timezone.now() + timedelta(seconds=120)
    )


def test_handler_over_its_timeout_is_failed_and_not_trusted():
    tasks.too_slow.enqueue()
    burst()
    letter = DeadLetter.objects.get()
    assert letter.error_class == "jobqueue.errors.JobTimeout"


@pytest.mark.parametrize("seconds", [1e12, "inf", 10**30])  # RateLimited takes float()
def test_a_retry_after_beyond_any_date_still_stores_the_retry(seconds):
    """RateLimited(retry_after=...) is the dependency's word, whatever it is: the retry waits
    at most MAX_RETRY_DELAY (a date out of range killed the settler on every run)."""
    from jobqueue.settler import MAX_RETRY_DELAY

    result = tasks.rate_limited.enqueue(seconds)
    good = tasks.noop.enqueue(1)
    assert burst() == 0
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.READY and job.attempts == 1
    assert job.errors[-1]["exception_class_path"] == "jobqueue.errors.RateLimited"
    assert job.run_after <= timezone.now() + timedelta(seconds=MAX_RETRY_DELAY)
    assert Job.objects.get(pk=good.id).state == JobState.DONE


@pytest.mark.parametrize("kind", ["cause", "str"])
def test_an_exception_that_breaks_formatting_is_still_stored(kind):
    """Its __cause__ raises, or its __str__ raises KeyboardInterrupt: the failure is stored
    (the handler or settler thread died, the job stayed leased, a burst never ended)."""
    result = tasks.raises_unformattable.enqueue(kind)
    good = tasks.noop.enqueue(1)
    assert burst() == 0
    letter = DeadLetter.objects.get(job_id=result.id)
    assert letter.error_class.endswith(("_CauseRaises", "_StrInterrupts"))
    assert Job.objects.get(pk=good.id).state == JobState.DONE


def test_a_task_that_leaves_a_transaction_open_is_failed_and_its_writes_undone():
    """set_autocommit(False) and no commit: its write is rolled back, the job fails (and runs
    again), and the jobs after it on that thread run and commit as usual (on SQLite the open
    transaction held the write lock and stopped the settler; on PostgreSQL the next jobs would
    have run inside it)."""
    result = tasks.leaves_a_transaction_open.enqueue("k")
    after = [tasks.effect.enqueue(f"after-{n}") for n in range(3)]
    assert burst(concurrency=1) == 0
    job = Job.objects.get(pk=result.id)
    assert (job.state, job.attempts) == (JobState.READY, 1)  # to run again, after its backoff
    assert job.errors[-1]["exception_class_path"] == "jobqueue.errors.TransactionLeftOpen"
    assert not Execution.objects.filter(idempotency_key="uncommitted:k").exists()
    assert {Job.objects.get(pk=r.id).state for r in after} == {JobState.DONE}
    assert Execution.objects.filter(idempotency_key__startswith="effect:after-").count() == 3


def test_the_outcome_of_a_handler_given_up_on_is_not_taken_for_the_jobs_next_claim(tmp_path):
    """Past its timeout the handler is abandoned and the job claimed again; when the abandoned
    handler returns at last, its outcome belongs to the old claim and is dropped (it was stored
    as the new claim's: the job done with the timed-out attempt's value, the new one's own
    outcome lost)."""
    result = tasks.add.enqueue(1, 2)
    worker = Worker(poll_interval=0.05)
    [first] = store.claim(worker_id=worker.worker_id, queues=None, limit=1, lease_seconds=30)
    worker.held.hold(first)
    worker.held.start(first, None)
    worker.held.abandon(first.pk)  # the timeout: given up on, its failure stored elsewhere
    Job.objects.filter(pk=first.pk).update(state=JobState.READY, lease_token=None,
                                           locked_until=None, locked_by=None)  # fmt: skip
    [second] = store.claim(worker_id=worker.worker_id, queues=None, limit=1, lease_seconds=30)
    worker.held.hold(second)
    worker.held.start(second, None)
    worker.finished.put(Finished(first, duration=3.5, value="late"))
    worker.settler.settle()
    assert Job.objects.get(pk=result.id).state == JobState.RUNNING  # the new claim runs on
    assert worker.held[second.pk].job is second
    worker.finished.put(Finished(second, duration=0.1, value=3))
    worker.settler.settle()
    job = Job.objects.get(pk=result.id)
    assert (job.state, job.return_value) == (JobState.DONE, 3)


def test_a_return_value_the_database_refuses_fails_alone_and_its_batch_is_stored():
    """PostgreSQL refuses it with a DataError, SQLite's JSON check with an IntegrityError: either
    way the batch's statement fails, and is stored one job at a time (it was retried whole, for
    ever, on SQLite)."""
    bad = tasks.returns_json_the_database_refuses.enqueue()
    good = [tasks.noop.enqueue(n) for n in range(3)]
    assert burst(concurrency=1, prefetch=10) == 0
    letter = DeadLetter.objects.get(job_id=bad.id)
    assert letter.attempts == 1  # permanent: the task ran, its value is what cannot be kept
    assert {Job.objects.get(pk=r.id).state for r in good} == {JobState.DONE}


def test_a_return_value_over_the_payload_limit_fails_its_job_at_once_and_stores_none(settings):
    """A 100 MB return value was stored, and each view of its job's page cost ~600 MB."""
    settings.REDRIVE = {**settings.REDRIVE, "MAX_PAYLOAD_BYTES": 1_000}
    big, fits = tasks.returns_text.enqueue(2_000), tasks.returns_text.enqueue(998)
    assert burst(concurrency=1) == 0
    letter = DeadLetter.objects.get(job_id=big.id)
    assert (letter.attempts, letter.error_class) == (1, "jobqueue.errors.UnstorableValue")
    assert "the return value is 2002 bytes, over the 1000-byte limit" in letter.last_error
    assert Job.objects.get(pk=big.id).return_value is None
    assert Job.objects.get(pk=fits.id).return_value == "x" * 998


def test_task_with_context_sees_its_attempt():
    result = tasks.with_context.enqueue(5)
    burst()
    result.refresh()
    assert result.return_value == {"attempt": 1, "x": 5}


def test_heartbeat_keeps_a_long_job_leased(tmp_path):
    gate = tmp_path / "gate"
    result = tasks.wait_for_file.enqueue(str(gate), key="long")
    # A lease long enough that a loaded machine's scheduling pauses (a parallel suite on two
    # cores) do not outlast it: the heartbeat renews it every third of it.
    worker = Worker(burst=True, lease_seconds=1.5, poll_interval=0.05)

    thread = in_thread(worker)
    try:
        wait_until(lambda: (tmp_path / "gate.started").exists(), message="handler start")
        first = Job.objects.get(pk=result.id).locked_until
        # Renewed past its first lease's end: the job has outlived the lease it was claimed with.
        wait_until(
            lambda: Job.objects.get(pk=result.id).locked_until >= first + timedelta(seconds=1.6),
            message="lease renewals",
        )
        assert store.claim(worker_id="other", queues=None, limit=1, lease_seconds=1) == []
    finally:
        gate.write_text("go")
        thread.join(timeout=30)
    job = Job.objects.get(pk=result.id)
    assert job.state == JobState.DONE and job.attempts == 1
    assert worker.stats.leases_lost == 0
    assert Execution.objects.filter(idempotency_key="effect:long").count() == 1


def test_max_jobs_stops_after_that_many():
    for n in range(5):
        tasks.noop.enqueue(n)
    worker = Worker(max_jobs=2, poll_interval=0.05)
    assert worker.run() == 0
    assert Job.objects.filter(state=JobState.DONE).count() == 2
    assert Job.objects.filter(state=JobState.READY).count() == 3


def test_burst_leaves_jobs_scheduled_for_later():
    later = timezone.now() + timedelta(hours=1)
    tasks.noop.using(run_after=later).enqueue()
    tasks.noop.enqueue()
    burst()
    assert sorted(Job.objects.values_list("state", flat=True)) == ["done", "ready"]


def test_postgres_notify_wakes_an_idle_worker_long_before_its_poll():
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite workers poll")
    worker = Worker(poll_interval=60)

    thread = in_thread(worker)
    try:
        wait_until(
            lambda: worker.listener and worker.listener.listening.is_set(),
            message="worker listening",
        )
        result = tasks.noop.enqueue(7)
        wait_until(
            lambda: Job.objects.get(pk=result.id).state == JobState.DONE,
            timeout=10,
            message="job run without waiting for the 60 s poll",
        )
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()


@pytest.mark.parametrize("failing", ["acknowledge", "fail"])
def test_outcomes_survive_a_database_error_while_settling(monkeypatch, failing):
    """The database drops out while a success and a failure wait to be stored: neither is
    forgotten. (A dropped failure once left its job leased, renewed and never run again.)"""
    from django.db import OperationalError

    from jobqueue.worker import Finished

    ok, bad = tasks.noop.enqueue(), tasks.always_fails.enqueue()
    worker = Worker(poll_interval=0.05)
    claimed = {}
    for job in store.claim(worker_id=worker.worker_id, queues=None, limit=2, lease_seconds=30):
        worker.held.hold(job)
        worker.held.start(job, None)
        claimed[job.pk] = job
    worker.finished.put(Finished(claimed[int(ok.id)], 0.01, value=None))
    worker.finished.put(
        Finished(claimed[int(bad.id)], 0.01, error=ConnectionError("gone"), formatted="")
    )
    real = getattr(store, failing)

    def fails_once(*args, **kwargs):
        monkeypatch.setattr(store, failing, real)
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(store, failing, fails_once)
    with pytest.raises(OperationalError):
        worker.settler.settle()
    assert worker.settler.settle() is True
    assert worker.held == {}
    assert Job.objects.get(pk=ok.id).state == JobState.DONE
    failed = Job.objects.get(pk=bad.id)
    assert failed.state == JobState.READY and failed.errors[-1]["message"] == "gone"


def test_jobs_behind_a_handler_stuck_past_its_timeout_still_run(tmp_path):
    """One handler thread, hung in a job Python cannot interrupt: the jobs queued behind it go
    to a fresh thread instead of waiting, leased and renewed, for the hang to end."""
    gate = tmp_path / "gate"
    hung = tasks.hangs_until_file.using(priority=10).enqueue(str(gate))
    quick = [tasks.add.enqueue(n, 1) for n in range(3)]
    worker = Worker(concurrency=1, prefetch=5, poll_interval=0.05)

    thread = in_thread(worker)
    try:
        wait_until(
            lambda: (
                Job.objects.filter(pk__in=[r.id for r in quick], state=JobState.DONE).count() == 3
            ),
            timeout=10,
            message="the quick jobs done while the hung one still hangs",
        )
        assert not gate.exists()
        assert DeadLetter.objects.get(job_id=hung.id).error_class == "jobqueue.errors.JobTimeout"
    finally:
        gate.write_text("go")
        worker.stop()
        thread.join(timeout=30)
    assert worker.stats.timeouts == 1


def test_a_finished_job_is_acknowledged_while_its_handler_is_busy_with_the_next(tmp_path):
    """Handlers wake the main thread only at the inbox's low-water mark; it still settles on
    its own clock, so a job done before a long one is not left unacknowledged behind it."""
    gate = tmp_path / "gate"
    quick = tasks.add.using(priority=10).enqueue(1, 2)
    tasks.wait_for_file.using(priority=5).enqueue(str(gate), key="behind")
    rest = [tasks.add.enqueue(n, 1) for n in range(3)]
    worker = Worker(concurrency=1, prefetch=5, poll_interval=5, burst=True)

    thread = in_thread(worker)
    try:
        wait_until(lambda: (tmp_path / "gate.started").exists(), message="the long job started")
        wait_until(
            lambda: Job.objects.get(pk=quick.id).state == JobState.DONE,
            timeout=5,
            message="the quick job acknowledged while the long one runs",
        )
        assert not gate.exists()
        assert Job.objects.filter(pk__in=[r.id for r in rest], state=JobState.DONE).count() == 0
    finally:
        gate.write_text("go")
        thread.join(timeout=30)
    assert Job.objects.filter(state=JobState.DONE).count() == 5


def test_a_lease_lost_before_its_job_started_is_forgotten_at_once():
    """The heartbeat finds prefetched leases gone (swept while the database was away): the
    worker stops holding those jobs, so they neither fill its claim window nor keep --burst up."""

    for n in range(3):
        tasks.noop.enqueue(n)
    worker = Worker(poll_interval=0.05, lease_seconds=30)
    claimed = store.claim(worker_id=worker.worker_id, queues=None, limit=3, lease_seconds=30)
    for job in claimed:
        worker.held.hold(job)
    worker.held.start(claimed[0], None)  # this one is running
    Job.objects.update(lease_token="taken-by-the-sweep-and-another-worker")
    worker._heartbeat_if_due()
    assert list(worker.held) == [claimed[0].pk] and worker.held[claimed[0].pk].lost
    assert worker.stats.leases_lost == 3


def heartbeat_inside_acknowledgement(worker, monkeypatch):
    """Run the worker's heartbeat right after the settler's acknowledgement statement returns
    and before the settler lets go of the jobs: the moment a heartbeat on the main thread can
    land in (CI caught one there, reporting a job it had just acknowledged as lost)."""
    acknowledge = store.acknowledge

    def acknowledge_then_heartbeat(*args, **kwargs):
        acked = acknowledge(*args, **kwargs)
        worker._last_heartbeat = 0.0  # due now
        worker._heartbeat_if_due()
        return acked

    monkeypatch.setattr(store, "acknowledge", acknowledge_then_heartbeat)


def run_claimed(worker, n: int) -> list[Job]:
    """`n` jobs claimed, run and returned: their outcomes wait for the settler."""
    for i in range(n):
        tasks.noop.enqueue(i)
    claimed = store.claim(worker_id=worker.worker_id, queues=None, limit=n, lease_seconds=30)
    for job in claimed:
        worker.held.hold(job)
        worker.held.returned(worker.held.start(job, None))
        worker.finished.put(Finished(job, duration=0.01, value=None))
    return claimed


def settle_claimed(worker, n: int, *, before_settle=lambda: None) -> list[Job]:
    claimed = run_claimed(worker, n)
    before_settle()
    assert worker.settler.settle()
    return claimed


def test_a_heartbeat_while_jobs_are_acknowledged_does_not_call_them_lost(monkeypatch, caplog):
    worker = Worker(poll_interval=0.05, lease_seconds=30)
    heartbeat_inside_acknowledgement(worker, monkeypatch)
    with caplog.at_level(logging.INFO, logger="jobqueue.worker"):
        claimed = settle_claimed(worker, 3)
    assert "event=lease_lost" not in caplog.text
    assert worker.stats.leases_lost == 0 and worker.stats.succeeded == 3
    assert len(worker.held) == 0
    assert {j.state for j in Job.objects.filter(pk__in=[j.pk for j in claimed])} == {JobState.DONE}


def test_a_lease_lost_while_its_outcome_is_stored_is_reported_once_by_the_refused_ack(
    monkeypatch, caplog
):
    """The heartbeat leaves a job being settled to its acknowledgement, which the lease token
    refuses: one lease_lost, during=acknowledge, and the job is no longer held."""
    worker = Worker(poll_interval=0.05, lease_seconds=30)
    heartbeat_inside_acknowledgement(worker, monkeypatch)

    def taken():
        Job.objects.update(lease_token="taken-by-the-sweep-and-another-worker")

    with caplog.at_level(logging.INFO, logger="jobqueue.worker"):
        settle_claimed(worker, 1, before_settle=taken)
    assert caplog.text.count("event=lease_lost") == 1
    assert "during=acknowledge" in caplog.text
    assert worker.stats.leases_lost == 1 and worker.stats.succeeded == 0
    assert len(worker.held) == 0


def test_jobs_whose_outcomes_could_not_be_stored_are_watched_by_the_heartbeat_again(
    monkeypatch, caplog
):
    """The database went away during the acknowledgement: the outcomes go back to be stored
    later, and a lease lost meanwhile is the heartbeat's to report again."""
    worker = Worker(poll_interval=0.05, lease_seconds=30)

    def database_away(*args, **kwargs):
        raise OperationalError("the database went away")

    monkeypatch.setattr(store, "acknowledge", database_away)
    claimed = run_claimed(worker, 2)
    with pytest.raises(OperationalError):
        worker.settler.settle()
    assert worker.finished.qsize() == 2
    assert not any(worker.held[j.pk].settling for j in claimed)
    Job.objects.update(lease_token="taken-by-the-sweep-and-another-worker")
    with caplog.at_level(logging.INFO, logger="jobqueue.worker"):
        worker._heartbeat_if_due()
    assert caplog.text.count("during=heartbeat") == 2
    assert all(worker.held[j.pk].lost for j in claimed)


def test_a_replay_after_the_effect_committed_finishes_without_a_second_effect(tmp_path):
    """Seed 002: the job died after its effect; the replay runs it again, the key holds the
    effect back, and the job ends done with one effect."""
    broken = tmp_path / "broken"
    broken.write_text("")
    result = tasks.effect_then_fails.enqueue("order-9", str(broken))
    burst()
    letter = DeadLetter.objects.get(job_id=result.id)
    assert Execution.objects.filter(idempotency_key="effect:order-9").count() == 1
    broken.unlink()  # the dependency is repaired
    [replayed] = store.replay([letter.pk]).done.values()
    burst()
    assert Job.objects.get(pk=replayed.pk).state == JobState.DONE
    assert Execution.objects.filter(idempotency_key="effect:order-9").count() == 1
    letter.refresh_from_db()
    assert letter.state == "replayed"


def test_two_copies_of_a_job_at_once_do_its_effect_once():
    """Seed 002: two copies run at the same moment on two connections; the key lets one do the
    work and the other waits for it, then sees it done."""
    import jobqueue

    inside, release = threading.Event(), threading.Event()
    firsts: list[bool] = []

    def copy(hold: bool):
        try:
            with jobqueue.once("effect:twin", job_type="tests.twin") as first:
                firsts.append(first)
                if hold:
                    inside.set()
                    release.wait(10)  # still uncommitted while the second copy arrives
        finally:
            connections.close_all()

    first = threading.Thread(target=copy, args=(True,))
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=copy, args=(False,))
    second.start()
    second.join(timeout=0.3)
    assert second.is_alive(), "the second copy should wait on the first one's key"
    release.set()
    first.join(timeout=10)
    second.join(timeout=10)
    assert sorted(firsts) == [False, True]
    assert Execution.objects.filter(idempotency_key="effect:twin").count() == 1


@pytest.mark.parametrize(
    "value, text",
    [
        (42, "42"),
        ("plain.value", "plain.value"),
        ("", '""'),
        ("two words", '"two words"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a=b", '"a=b"'),
        ("line\nbreak", '"line\\nbreak"'),
    ],
)
def test_log_values_are_quoted_only_when_logfmt_needs_it(value, text):
    from jobqueue.logfmt import logfmt

    assert logfmt(value) == text


def test_a_stale_copy_of_a_reclaimed_job_is_not_run_a_second_time():
    """Lease lost before the job started, then claimed again by the same worker: the inbox
    holds the old claim's copy and the new one, and only the held claim runs."""

    result = tasks.add.enqueue(1, 2)
    worker = Worker(poll_interval=0.05)
    [old] = store.claim(worker_id=worker.worker_id, queues=None, limit=1, lease_seconds=30)
    new = Job.objects.get(pk=result.id)  # the later claim's own copy of the row
    worker.held.hold(new)
    for item in (old, new, None):
        worker.inbox.put(item)
    worker._handler_loop()
    outcomes = []
    while not worker.finished.empty():
        outcomes.append(worker.finished.get())
    assert [o.value for o in outcomes] == [3]


def test_a_worker_with_more_stuck_handlers_than_threads_exits_for_a_restart(tmp_path):
    gate = tmp_path / "gate"
    for _ in range(2):
        tasks.hangs_until_file.enqueue(str(gate))
    worker = Worker(concurrency=1, prefetch=0, poll_interval=0.05)
    try:
        assert worker.run() == 1  # two handlers abandoned, one thread allowed: restart me
    finally:
        gate.write_text("go")
    assert worker.stats.timeouts == 2
    assert DeadLetter.objects.filter(error_class="jobqueue.errors.JobTimeout").count() == 2


def test_a_settler_that_dies_stops_the_worker_for_a_restart(monkeypatch, caplog):
    """A bug in the settler (not a database error: those back off) would leave outcomes
    unstored and leases renewed forever; the worker stops and exits non-zero instead."""

    def broken(self):
        raise RuntimeError("settler bug")

    monkeypatch.setattr(Settler, "settle", broken)
    tasks.noop.enqueue(1)
    worker = Worker(poll_interval=0.05, grace=0.5)
    assert worker.run() == 1
    assert "event=settler_died" in caplog.text
    # Its lease was handed back or will expire: the job is not lost, only not acknowledged.
    assert Job.objects.get().state in (JobState.READY, JobState.RUNNING)


def test_a_prefetched_job_whose_lease_ran_out_before_a_handler_was_free_is_not_started(caplog):
    """Cut off from the database, the heartbeat cannot extend the leases of jobs waiting in
    the inbox; when a handler frees up they may be another worker's already. Not started."""
    result = tasks.add.enqueue(1, 2)
    clock = Clock()
    worker = Worker(poll_interval=0.05, clock=clock)
    [job] = store.claim(
        worker_id=worker.worker_id, queues=None, limit=1, lease_seconds=30, now=clock()
    )
    worker.held.hold(job)
    clock.advance(seconds=31)
    for item in (job, None):
        worker.inbox.put(item)
    with caplog.at_level(logging.WARNING, logger="jobqueue.worker"):
        worker._handler_loop()
    assert worker.finished.empty()
    assert len(worker.held) == 0
    assert "event=lease_lost" in caplog.text and "during=start" in caplog.text
    assert Job.objects.get(pk=result.id).attempts == 1  # its claim; never run here


def test_the_claim_window_follows_job_durations_from_the_first_jobs():
    """About a quarter second of work per handler, learned as jobs return: a worker just
    started reaches its full window within a claim or two of quick jobs, and holds nothing
    beyond its running job once jobs take a second."""
    worker = Worker(concurrency=1)
    assert worker._prefetch_window() == 5  # the 50 ms prior
    for _ in range(6):  # its first claim's jobs
        worker._learn_duration(0.0001)
    assert worker._prefetch_window() >= 30  # was 9: the prior outweighed them ten to one
    for _ in range(60):
        worker._learn_duration(0.0001)
    assert worker._prefetch_window() == MAX_PREFETCH
    for _ in range(60):
        worker._learn_duration(1.0)
    assert worker._prefetch_window() == 0


def test_a_handler_teaches_the_window_as_its_job_returns_before_the_settler_stores_it():
    tasks.noop.enqueue(1)
    worker = Worker(concurrency=1)
    [job] = store.claim(worker_id=worker.worker_id, queues=None, limit=1, lease_seconds=30)
    worker.held.hold(job)
    for item in (job, None):
        worker.inbox.put(item)
    worker._handler_loop()
    assert worker._durations_seen == 1 and worker._prefetch_window() > 5
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING  # not settled yet


def test_a_step_claims_before_its_housekeeping(monkeypatch):
    """A worker just started has its handlers busy before it writes its record (and looks for
    due ticks and brokers' letters): those round trips no longer delay its first job."""
    tasks.noop.enqueue(1)
    worker = Worker(concurrency=1, burst=True)
    states = []
    monkeypatch.setattr(store, "record_worker", lambda **_: states.append(Job.objects.get().state))
    assert worker._step()
    assert states == [JobState.RUNNING]
