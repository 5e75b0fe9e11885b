"""Replay pacing: the rate holds per item, a waiting run holds no worker slot, pause and cancel
take effect between batches and on a waiting run, and rate and batch size are checked
everywhere they enter (form, service, settings at start-up). Time is an injected clock."""

import math
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.core import checks
from django.urls import reverse
from django.utils import timezone

from deadletters import services
from deadletters.models import ReplayRun, RunState, Selection
from deadletters.tasks import carry_out_run
from jobqueue.models import DeadLetter, Job, JobState
from jobqueue.worker import Worker
from tests.conftest import Processes
from tests.factories import DeadLetterFactory

from .conftest import user_with_role

pytestmark = pytest.mark.django_db

RUNNER = "deadletters.tasks.carry_out_run"
BAD_RATES = [1e-300, 0.0001, 0.09, math.nan, math.inf, -math.inf, -1.0, 10_001.0]
BAD_BATCH_SIZES = [0, -1, 1001, "100", 2.5, True]
RATE_RANGE = r"replay rate must be 0 \(unlimited\) or between 0.1 and 10000 items per second"


class FakeClock:
    """timezone.now for the services; `sleep` moves it on instead of waiting."""

    def __init__(self):
        self.now = timezone.now().replace(microsecond=0) + timedelta(days=1)
        self.start = self.now
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds)

    def at(self, seconds):
        return self.start + timedelta(seconds=seconds)


def start(operator, n, *, rate=None, background=True, batch_size=3, settings=None):
    if settings is not None:
        settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": batch_size}
    letters = DeadLetterFactory.create_batch(n)
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    return services.start_run(
        operator=operator, selection=selection, reason="paced", rate=rate, background=background
    )


def ready_runners():
    return Job.objects.filter(task_path=RUNNER, state=JobState.READY)


def work_runner_jobs(clock, *, late=0.0, most=1000):
    """Carry out the runs' runner jobs as a worker with one slot would, each `late` seconds
    after its run_after, the clock jumping to that time instead of anyone waiting."""
    worked = 0
    while worked < most and (job := ready_runners().order_by("run_after", "id").first()):
        clock.now = max(clock.now, job.run_after + timedelta(seconds=late))
        services.run_due(*job.args, clock=clock)
        Job.objects.filter(pk=job.pk).update(state=JobState.DONE)
        worked += 1
    assert worked < 1000, "the runner chain does not end"
    return worked


def item_seconds(run, clock):
    return [(at - clock.start).total_seconds() for at in run.items.values_list("at", flat=True)]


def test_rate_is_applied_per_item_not_per_batch(operator, settings):
    # The report: at 8 items/s the first 100 items went out within 3 s, then the runner waited.
    run = start(operator, 100, rate=8.0, batch_size=50, settings=settings)
    clock = FakeClock()
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert (run.state, run.done) == (RunState.FINISHED, 100)
    # Item n goes at start + n/8 s: 100 items take 12.375 s of schedule.
    assert item_seconds(run, clock) == [n / 8 for n in range(100)]
    # The caller's own process (the CLI) keeps the same schedule, waiting in its own sleep.
    cli_run = start(operator, 24, rate=8.0, background=False, batch_size=10, settings=settings)
    cli_clock = FakeClock()
    services.carry_out(cli_run.pk, cli_run.generation, sleep=cli_clock.sleep, clock=cli_clock)
    cli_run.refresh_from_db()
    assert item_seconds(cli_run, cli_clock) == [n / 8 for n in range(24)]
    assert cli_clock.sleeps == [1 / 8] * 23


def test_a_late_runner_catches_up_at_most_a_second_and_batches_stay_bounded(operator, settings):
    run = start(operator, 60, rate=8.0, batch_size=5, settings=settings)
    clock = FakeClock()
    # Every continuation starts a second after its time (a busy worker polling every second).
    work_runner_jobs(clock, late=1.0)
    run.refresh_from_db()
    assert (run.state, run.done) == (RunState.FINISHED, 60)
    seconds = item_seconds(run, clock)
    # Never more than a second's worth of items in any second, however late the runner came.
    assert max(sum(1 for t in seconds if s <= t < s + 1) for s in seconds) <= 8
    assert seconds[-1] >= 59 / 8
    # A late runner takes what fell due, still in batches no bigger than the batch size.
    assert max(Counter(run.items.values_list("batch", flat=True)).values()) == 5


def test_a_batch_under_a_low_rate_holds_what_the_bucket_allows(operator, settings):
    run = start(operator, 10, rate=0.5, batch_size=5, settings=settings)
    clock = FakeClock()
    assert services.process_batch(run.pk, now=clock()).handled == 1
    # Not yet due: nothing goes, and the answer says when the next item may.
    result = services.process_batch(run.pk, now=clock.at(1.9))
    assert (result.handled, result.more, result.due_at) == (0, True, clock.at(2))
    assert services.process_batch(run.pk, now=clock.at(2)).handled == 1
    # Ten idle seconds later the bucket holds one item, not five (a second's worth at 0.5/s).
    assert services.process_batch(run.pk, now=clock.at(12)).handled == 1
    run.refresh_from_db()
    assert (run.processed, run.batches) == (3, 3)


def test_a_paced_runner_never_sleeps_in_its_worker_slot(operator, settings, monkeypatch):
    def no_sleeping(seconds):
        raise AssertionError(f"the runner slept {seconds} s in a worker slot")

    monkeypatch.setattr(time, "sleep", no_sleeping)
    run = start(operator, 6, rate=8.0, settings=settings)
    before = timezone.now()
    carry_out_run.call(run.pk, run.generation)
    after = timezone.now()
    run.refresh_from_db()
    # One item went; the next is due in 1/8 s, so the runner left its continuation and returned.
    assert (run.state, run.processed) == (RunState.RUNNING, 1)
    continuation = ready_runners().get(args=[run.pk, run.generation])
    assert run.generation == 1  # the continuation's ticket: this runner, if retried, stops
    step = timedelta(seconds=1 / 8)
    assert before + step <= continuation.run_after <= after + step


def test_a_run_confirmed_with_an_absurd_rate_before_the_check_paces_instead_of_overflowing(
    operator, settings
):
    # 1e-300 items/s made the runner fail with OverflowError after each batch, forever.
    run = start(operator, 6, rate=8.0, settings=settings)
    ReplayRun.objects.filter(pk=run.pk).update(rate=1e-300)
    before = timezone.now()
    carry_out_run.call(run.pk, run.generation)
    run.refresh_from_db()
    assert run.processed == 1
    # Paced at the slowest sane rate (0.1 items/s): the next item in ten seconds.
    wait = ready_runners().get(args=[run.pk, run.generation]).run_after - before
    assert timedelta(seconds=10) <= wait < timedelta(seconds=11)


def test_a_runner_retried_after_handing_over_to_its_continuation_does_nothing(operator, settings):
    # A worker killed after the runner's transaction committed, before it acknowledged the
    # job: the queue runs that job again, beside the continuation the transaction enqueued.
    run = start(operator, 6, rate=8.0, settings=settings)
    clock = FakeClock()
    first_ticket = run.generation
    services.run_due(run.pk, first_ticket, clock=clock)
    clock.now = clock.at(5)
    result = services.run_due(run.pk, first_ticket, clock=clock)  # the retry
    assert (result.handled, result.more) == (0, False)
    run.refresh_from_db()
    assert (run.processed, run.generation) == (1, first_ticket + 1)
    assert list(ready_runners().values_list("args", flat=True)) == [
        [run.pk, first_ticket],  # the original job, never marked done in this test
        [run.pk, first_ticket + 1],  # the one continuation
    ]


def test_a_run_of_one_batch_under_a_rate_starts_in_the_request_and_goes_on_in_time(
    operator, settings
):
    run = start(operator, 3, rate=8.0, settings=settings)  # no bigger than a batch
    assert (run.state, run.processed) == (RunState.RUNNING, 1)
    continuation = ready_runners().get()
    assert continuation.args == [run.pk, run.generation]
    clock = FakeClock()
    clock.now = continuation.run_after
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert (run.state, run.done) == (RunState.FINISHED, 3)
    assert [
        (at - run.created_at).total_seconds() for at in run.items.values_list("at", flat=True)
    ] == [0, 0.125, 0.25]


@pytest.mark.parametrize("stop", [services.pause, services.cancel])
def test_a_waiting_runs_continuation_does_nothing_once_paused_or_cancelled(
    operator, settings, stop
):
    run = start(operator, 6, rate=0.5, settings=settings)
    clock = FakeClock()
    work_runner_jobs(clock, most=1)
    assert ready_runners().get().run_after == clock.at(2)  # the next item's time
    assert stop(run, operator=operator)
    clock.now = clock.at(30)
    assert work_runner_jobs(clock) == 1  # the continuation ran...
    run.refresh_from_db()
    assert run.processed == 1  # ...and did nothing, and left no other runner behind
    assert not ready_runners().exists()
    if stop is services.cancel:
        assert not services.resume(run, operator=operator)
        assert run.state == RunState.CANCELLED
        return
    assert services.resume(run, operator=operator)
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert (run.state, run.processed, run.done) == (RunState.FINISHED, 6, 6)
    assert set(DeadLetter.objects.values_list("replays", flat=True)) == {1}


@pytest.mark.parametrize("stop", [services.pause, services.cancel])
def test_pause_or_cancel_between_batches_stops_further_items(operator, settings, monkeypatch, stop):
    run = start(operator, 9, settings=settings)  # unlimited: one runner does every batch
    real = services.runs._process_batch

    def operator_stops_after_the_first_batch(*args, **kwargs):
        result = real(*args, **kwargs)
        stop(ReplayRun.objects.get(pk=run.pk), operator=operator)
        return result

    monkeypatch.setattr(services.runs, "_process_batch", operator_stops_after_the_first_batch)
    assert work_runner_jobs(FakeClock()) == 1  # and that runner left no continuation
    run.refresh_from_db()
    assert (run.processed, run.batches) == (3, 1)
    assert DeadLetter.objects.filter(state="pending").count() == 6


def test_a_command_driving_a_slow_run_sees_a_pause_within_a_second(operator, settings):
    run = start(operator, 6, rate=0.1, background=False, settings=settings)
    clock = FakeClock()

    def sleep_while_the_operator_pauses(seconds):
        clock.sleep(seconds)
        services.pause(ReplayRun.objects.get(pk=run.pk), operator=operator)

    services.carry_out(run.pk, run.generation, sleep=sleep_while_the_operator_pauses, clock=clock)
    run.refresh_from_db()
    assert (run.state, run.processed) == (RunState.PAUSED, 1)
    assert clock.sleeps == [1.0]  # not the ten seconds until the next item


@pytest.mark.django_db(transaction=True)
def test_a_waiting_run_leaves_the_only_worker_slot_to_another_runs_runner(settings):
    operator = user_with_role("operator")
    slow = start(operator, 4, rate=0.1, settings=settings)
    fast = start(operator, 4, settings=settings)
    # Burst: works every due job with one handler, then stops.
    Worker(burst=True, concurrency=1, queues=["deadletters"]).run()
    slow.refresh_from_db()
    fast.refresh_from_db()
    assert (fast.state, fast.done) == (RunState.FINISHED, 4)
    # The slow run did its first item and waits for the next, ten seconds away, as a
    # scheduled job rather than in the slot.
    assert (slow.state, slow.processed) == (RunState.RUNNING, 1)
    waiting = ready_runners().get()
    assert waiting.args == [slow.pk, slow.generation]
    assert waiting.run_after > timezone.now() + timedelta(seconds=5)
    assert not Job.objects.filter(task_path=RUNNER, state=JobState.RUNNING).exists()


def nothing_written():
    assert not ReplayRun.objects.exists()
    assert not Job.objects.filter(task_path=RUNNER).exists()
    assert not Job.objects.filter(replayed_from__isnull=False).exists()
    assert set(DeadLetter.objects.values_list("state", "replays")) <= {("pending", 0)}


@pytest.mark.parametrize("rate", BAD_RATES)
def test_the_service_refuses_a_rate_out_of_range_and_writes_nothing(operator, rate):
    letters = DeadLetterFactory.create_batch(5)
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    with pytest.raises(services.RefusedError, match=RATE_RANGE):
        services.start_run(operator=operator, selection=selection, reason="r", rate=rate)
    nothing_written()
    assert Selection.objects.filter(pk=selection.pk, run__isnull=True).exists()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [("REPLAY_RATE", rate, "replay rate must be") for rate in BAD_RATES]
    + [("REPLAY_BATCH_SIZE", size, "replay batch size must be") for size in BAD_BATCH_SIZES],
)
def test_the_service_refuses_settings_out_of_range_and_writes_nothing(
    operator, settings, name, value, message
):
    # The start-up check refuses these, but a process started without checks (a WSGI server)
    # must not loop without progress (batch size 0), fail (-1) or overflow (a tiny rate).
    settings.REDRIVE = {**settings.REDRIVE, name: value}
    letters = DeadLetterFactory.create_batch(5)
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    with pytest.raises(services.RefusedError, match=message):
        services.start_run(operator=operator, selection=selection, reason="r")
    nothing_written()


@pytest.mark.parametrize("rate", ["1e-300", "0.0001", "0.09", "nan", "inf", "-1", "10001", "x"])
def test_the_confirm_form_refuses_a_rate_out_of_range(operator_client, rate):
    letter = DeadLetterFactory()
    confirm = operator_client.post(
        reverse("deadletters:preview"), {"action": "replay", "ids": [letter.pk]}
    )["Location"]
    response = operator_client.post(confirm, {"reason": "fixed", "rate": rate})
    assert response.status_code == 400
    content = response.content.decode()
    assert "replay rate must be" in content or "Enter a number." in content
    nothing_written()
    # A sane rate is taken.
    assert operator_client.post(confirm, {"reason": "fixed", "rate": "0.1"}).status_code == 302
    assert ReplayRun.objects.get().rate == 0.1


@pytest.mark.parametrize(
    ("name", "value", "check_id"),
    [("REPLAY_RATE", rate, "redrive.E011") for rate in BAD_RATES]
    + [("REPLAY_BATCH_SIZE", size, "redrive.E012") for size in BAD_BATCH_SIZES],
)
def test_settings_out_of_range_fail_the_system_check(settings, name, value, check_id):
    assert not [e for e in checks.run_checks() if e.id in ("redrive.E011", "redrive.E012")]
    settings.REDRIVE = {**settings.REDRIVE, name: value}
    errors = [e for e in checks.run_checks() if e.id.startswith("redrive.E01")]
    assert [e.id for e in errors] == [check_id]
    assert errors[0].msg.startswith(f'REDRIVE["{name}"]: replay ')


@pytest.mark.django_db(transaction=True)
def test_runworker_refuses_to_start_with_settings_out_of_range(tmp_path):
    env = {"REDRIVE_REPLAY_RATE": "0.0001", "REDRIVE_REPLAY_BATCH_SIZE": "0"}
    proc = Processes(tmp_path).run("--burst", env=env)
    output = Path(proc.log_path).read_text()
    assert proc.returncode == 1, output
    assert '(redrive.E011) REDRIVE["REPLAY_RATE"]: replay rate must be' in output
    assert '(redrive.E012) REDRIVE["REPLAY_BATCH_SIZE"]: replay batch size must be' in output
    assert "Traceback" not in output
    assert "worker_started" not in output
