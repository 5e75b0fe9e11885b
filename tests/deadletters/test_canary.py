"""Canary replays (issue 18): a replay run replays its first K items alone, waits for their jobs
(done, or dead again) without holding a worker slot, and halts itself when more than the allowed
share died again, unfinished ones counting as failures at the timeout; an operator may resume a
halted run deliberately. Time is an injected clock, except with the real worker at the end."""

import re
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core import checks
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deadletters import services
from deadletters.models import (
    CanaryState,
    ReplayItem,
    ReplayRun,
    RunState,
    Selection,
)
from deadletters.tasks import carry_out_run
from jobqueue.models import DeadLetter, Job, JobState
from tests.audit import run_events
from tests.cli import run as run_command
from tests.conftest import wait_until
from tests.factories import DeadLetterFactory

from .conftest import logged_in, user_with_role
from .test_pacing import FakeClock

pytestmark = pytest.mark.django_db

RUNNER = "deadletters.tasks.carry_out_run"
PREVIEW = reverse("deadletters:preview")


def start(operator, letters, *, canary, clock=None, **options):
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    return services.start_run(
        operator=operator,
        selection=selection,
        reason="canary first",
        canary_size=canary,
        now=clock() if clock else None,
        **options,
    )


def ready_runners():
    return Job.objects.filter(task_path=RUNNER, state=JobState.READY)


def work_runner_jobs(clock, *, most=1000):
    """Carry out the runner jobs as one worker slot would, each at its run_after, the clock
    jumping to that time instead of anyone waiting."""
    worked = 0
    while worked < most and (job := ready_runners().order_by("run_after", "id").first()):
        clock.now = max(clock.now, job.run_after)
        services.run_due(*job.args, clock=clock)
        Job.objects.filter(pk=job.pk).update(state=JobState.DONE)
        worked += 1
    assert worked < 1000, "the runner chain does not end"
    return worked


def canary_jobs(run) -> list[int]:
    return list(run.items.order_by("id").values_list("job_id", flat=True)[: run.canary_size])


def settle(job_ids, state):
    """What a worker leaves of the replay jobs: done, or dead again."""
    Job.objects.filter(pk__in=job_ids).update(state=state)


def ids(letters):
    return [dl.pk for dl in letters]


def untouched(letters):
    """Not replayed at all: still pending, no ledger row, no job."""
    assert set(DeadLetter.objects.filter(pk__in=ids(letters)).values_list("state", "replays")) == {
        ("pending", 0)
    }
    assert not ReplayItem.objects.filter(dead_letter_id__in=ids(letters)).exists()
    assert not Job.objects.filter(replayed_from__in=ids(letters)).exists()


# --- the runner, with an injected clock ------------------------------------------------------


def test_a_canary_that_dies_again_halts_the_run_until_an_operator_resumes_it(operator, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 4}
    clock = FakeClock()
    letters = DeadLetterFactory.create_batch(10)
    run = start(operator, letters, canary=3, clock=clock)
    assert (run.state, run.canary_size, run.canary_max_dead_share) == (RunState.QUEUED, 3, 0.2)

    work_runner_jobs(clock, most=1)
    run.refresh_from_db()
    # Exactly the first three items went, alone (the batch holds four), in the ledger as usual.
    assert (run.state, run.processed, run.done, run.batches) == (RunState.RUNNING, 3, 3, 1)
    assert list(run.items.values_list("dead_letter_id", flat=True)) == ids(letters[:3])
    assert (run.canary_state, run.canary_started_at) == (CanaryState.WATCHING, clock.start)
    untouched(letters[3:])
    # It waits as a continuation runner a second later, not in the worker slot.
    assert ready_runners().get().run_after == clock.at(1)

    # Their jobs have not run yet: each look leaves the next one a second later.
    assert work_runner_jobs(clock, most=3) == 3
    run.refresh_from_db()
    assert (run.canary_state, run.processed, run.updated_at) == (
        CanaryState.WATCHING,
        3,
        clock.at(3),
    )
    assert ready_runners().get().run_after == clock.at(4)

    jobs = canary_jobs(run)
    settle(jobs[:2], JobState.DEAD)
    settle(jobs[2:], JobState.DONE)
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert (run.state, run.canary_state) == (RunState.HALTED, CanaryState.HALTED)
    assert (run.processed, run.canary_done, run.canary_dead) == (3, 1, 2)
    assert run.stopped_by == "canary" and run.finished_at is None
    [event] = services.run_events(run)
    assert (event.action, event.actor, event.channel, event.at) == (
        "run.halted",
        "canary",
        "system",
        clock.at(4),
    )
    assert event.params == {"canary_done": 1, "canary_dead": 2}
    untouched(letters[3:])
    assert not ready_runners().exists()  # halted: no runner left behind
    assert not run.is_active

    # A halted run is not paused (it is halted); only a deliberate resume goes on.
    assert not services.pause(run, operator=operator)
    resumer = user_with_role("operator", "second")
    assert services.resume(run, operator=resumer, now=clock())
    assert (run.state, run.canary_state) == (RunState.RUNNING, CanaryState.OVERRIDDEN)
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert (run.state, run.processed, run.done, run.skipped) == (RunState.FINISHED, 10, 10, 0)
    assert run.canary_state == CanaryState.OVERRIDDEN
    assert run_events(run) == [("halted", "canary"), ("resumed", "second")]
    # The rest, after the canary, each replayed once; the canary not again.
    assert list(run.items.values_list("dead_letter_id", flat=True)) == ids(letters)
    assert set(
        DeadLetter.objects.filter(pk__in=ids(letters[3:])).values_list("state", "replays")
    ) == {("replaying", 1)}


def test_a_canary_within_the_allowed_share_passes_and_the_rest_is_replayed(operator):
    clock = FakeClock()
    letters = DeadLetterFactory.create_batch(12)
    # No bigger than a batch: the canary goes out in the request, the rest from the runner.
    run = start(operator, letters, canary=5, clock=clock)
    assert (run.state, run.processed, run.canary_state) == (
        RunState.RUNNING,
        5,
        CanaryState.WATCHING,
    )
    untouched(letters[5:])
    jobs = canary_jobs(run)
    settle(jobs[:1], JobState.DEAD)  # one of five: 20 %, not more than the 20 % allowed
    settle(jobs[1:4], JobState.DONE)
    work_runner_jobs(clock, most=2)
    run.refresh_from_db()
    assert (run.canary_state, run.processed) == (CanaryState.WATCHING, 5)  # one still running
    Job.objects.filter(pk=jobs[4]).update(
        state=JobState.RUNNING,
        attempts=1,
        lease_token="lease",
        locked_until=clock.at(60),
        locked_by="test:1",
    )
    work_runner_jobs(clock, most=1)
    assert ReplayRun.objects.get(pk=run.pk).state == RunState.RUNNING
    settle(jobs[4:], JobState.DONE)
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert (run.state, run.canary_state) == (RunState.FINISHED, CanaryState.PASSED)
    assert (run.processed, run.done, run.canary_done, run.canary_dead) == (12, 12, 4, 1)
    assert not run_events(run)
    # The rest went once the canary passed, at its fourth look, and not before.
    decided = clock.at(4)
    assert set(run.items.order_by("id").values_list("at", flat=True)[5:]) == {decided}
    assert DeadLetter.objects.filter(pk__in=ids(letters[5:]), state="replaying").count() == 7


def test_at_the_timeout_unfinished_canary_jobs_count_as_failures(operator):
    clock = FakeClock()
    letters = DeadLetterFactory.create_batch(6)
    run = start(
        operator, letters, canary=3, clock=clock, canary_max_dead_share=0.5, canary_timeout=10
    )
    jobs = canary_jobs(run)
    settle(jobs[:1], JobState.DONE)  # the other two never finish (no worker serves them)
    work_runner_jobs(clock, most=9)
    run.refresh_from_db()
    assert (run.state, run.canary_state, run.canary_done) == (
        RunState.RUNNING,
        CanaryState.WATCHING,
        1,
    )
    work_runner_jobs(clock)
    run.refresh_from_db()
    # Two of three unfinished at the deadline: 67 % failed, more than the 50 % allowed.
    assert (run.state, run.canary_state) == (RunState.HALTED, CanaryState.HALTED)
    assert (run.canary_done, run.canary_dead) == (1, 0)
    assert [e.at for e in services.run_events(run)] == [clock.at(10)]
    assert services.canary_as_judged(run).unfinished == 2
    untouched(letters[3:])


def test_at_the_timeout_a_canary_whose_unfinished_share_is_allowed_passes(operator):
    clock = FakeClock()
    letters = DeadLetterFactory.create_batch(7)
    run = start(operator, letters, canary=5, clock=clock, canary_timeout=3)
    settle(canary_jobs(run)[:4], JobState.DONE)  # one of five unfinished: 20 %, allowed
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert (run.state, run.canary_state, run.processed) == (
        RunState.FINISHED,
        CanaryState.PASSED,
        7,
    )
    assert run.items.order_by("id").values_list("at", flat=True)[6] == clock.at(3)


def test_a_cancelled_canary_job_fails_and_a_skipped_canary_item_is_not_judged(operator):
    """A replay job an operator cancelled failed; a canary item skipped (poisoned, already
    replayed) made no replay and is judged by nobody."""
    clock = FakeClock()
    poisoned = DeadLetterFactory(replays=3)
    letters = [poisoned, *DeadLetterFactory.create_batch(4)]
    run = start(operator, letters, canary=3, clock=clock, canary_max_dead_share=0.4)
    assert (run.processed, run.done, run.skipped) == (3, 2, 1)
    replayed = [job for job in canary_jobs(run) if job]
    settle(replayed[:1], JobState.CANCELLED)
    settle(replayed[1:], JobState.DONE)
    work_runner_jobs(clock)
    run.refresh_from_db()
    # One failure of two replays: 50 % > 40 %.
    assert (run.state, run.canary_done, run.canary_dead) == (RunState.HALTED, 1, 1)


def test_a_watching_canary_never_sleeps_in_a_worker_slot(operator, settings, monkeypatch):
    def no_sleeping(seconds):
        raise AssertionError(f"the runner slept {seconds} s in a worker slot")

    monkeypatch.setattr(time, "sleep", no_sleeping)
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 2}
    run = start(operator, DeadLetterFactory.create_batch(6), canary=2)
    before = timezone.now()
    carry_out_run.call(run.pk, run.generation)
    run.refresh_from_db()
    assert (run.processed, run.canary_state) == (2, CanaryState.WATCHING)
    look = ready_runners().get(args=[run.pk, run.generation])
    assert before + timedelta(seconds=1) <= look.run_after <= timezone.now() + timedelta(seconds=1)
    # The look: nothing finished, so it leaves the next look and returns at once.
    carry_out_run.call(*look.args)
    run.refresh_from_db()
    assert (run.processed, run.canary_state) == (2, CanaryState.WATCHING)
    assert ready_runners().filter(args=[run.pk, run.generation]).exists()
    # A retried older look finds its ticket stale and does nothing.
    assert services.run_due(*look.args).more is False


def test_pause_while_watching_then_resume_watches_on_and_a_halted_run_can_be_cancelled(
    operator,
):
    clock = FakeClock()
    letters = DeadLetterFactory.create_batch(5)
    run = start(operator, letters, canary=2, clock=clock)
    assert services.pause(run, operator=operator)
    clock.now = clock.at(5)
    assert work_runner_jobs(clock) == 1  # the look found the run paused and stopped
    assert services.resume(run, operator=operator, now=clock())
    settle(canary_jobs(run), JobState.DEAD)
    work_runner_jobs(clock)
    run.refresh_from_db()
    assert (run.state, run.canary_dead) == (RunState.HALTED, 2)
    assert services.cancel(run, operator=operator, now=clock())
    run.refresh_from_db()
    assert (run.state, run.canary_state, run.stopped_by) == (
        RunState.CANCELLED,
        CanaryState.HALTED,
        operator.username,
    )
    assert not services.resume(run, operator=operator)
    untouched(letters[2:])


def test_a_command_driving_the_run_waits_for_its_canary_in_its_own_process(operator):
    clock = FakeClock()
    letters = DeadLetterFactory.create_batch(6)
    run = start(operator, letters, canary=2, clock=clock, background=False)
    assert not ready_runners().exists()

    def jobs_finish_after_three_seconds(seconds):
        clock.sleep(seconds)
        if clock.now >= clock.at(3):
            settle(canary_jobs(run), JobState.DONE)

    services.carry_out(run.pk, run.generation, sleep=jobs_finish_after_three_seconds, clock=clock)
    run.refresh_from_db()
    assert (run.state, run.canary_state, run.processed) == (
        RunState.FINISHED,
        CanaryState.PASSED,
        6,
    )
    assert clock.sleeps == [1.0, 1.0, 1.0]
    assert not ready_runners().exists()


def test_no_canary_for_discards_for_size_zero_or_for_a_selection_no_larger(operator):
    letters = DeadLetterFactory.create_batch(4)
    assert start(operator, letters[:2], canary=0).canary_size == 0
    whole = start(operator, letters[2:], canary=2)  # every item would be in it
    assert (whole.canary_size, whole.canary_state, whole.state) == (0, "", RunState.FINISHED)
    more = DeadLetterFactory.create_batch(6)
    selection = services.freeze_selection(operator=operator, action="discard", ids=ids(more))
    run = services.start_run(operator=operator, selection=selection, reason="r", canary_size=3)
    assert (run.canary_size, run.state, run.done) == (0, RunState.FINISHED, 6)


# --- validation: service, settings, form, command --------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("canary_size", -1, "canary size must be between 0"),
        ("canary_size", 1001, "canary size must be between 0"),
        ("canary_size", True, "canary size must be a whole number"),
        ("canary_size", "5", "canary size must be a whole number"),
        ("canary_size", 2.5, "canary size must be a whole number"),
        ("canary_max_dead_share", -0.1, "canary dead share must be between 0 and 1"),
        ("canary_max_dead_share", 1.5, "canary dead share must be between 0 and 1"),
        ("canary_max_dead_share", float("nan"), "canary dead share must be between 0 and 1"),
        ("canary_max_dead_share", "x", "canary dead share must be a number"),
        ("canary_timeout", 0, "canary timeout must be more than 0"),
        ("canary_timeout", float("inf"), "canary timeout must be more than 0"),
        ("canary_timeout", 86_401, "canary timeout must be more than 0"),
    ],
)
def test_the_service_refuses_canary_values_out_of_range_and_writes_nothing(
    operator, option, value, message
):
    letters = DeadLetterFactory.create_batch(6)
    selection = services.freeze_selection(operator=operator, action="replay", ids=ids(letters))
    options = {"canary_size": 2, option: value}
    with pytest.raises(services.RefusedError, match=message):
        services.start_run(operator=operator, selection=selection, reason="r", **options)
    assert not ReplayRun.objects.exists()
    assert Selection.objects.filter(pk=selection.pk, run__isnull=True).exists()
    untouched(letters)


@pytest.mark.parametrize(
    ("name", "value", "check_id"),
    [
        ("CANARY_SIZE", -1, "redrive.E016"),
        ("CANARY_SIZE", "5", "redrive.E016"),
        ("CANARY_MAX_DEAD_SHARE", 2, "redrive.E017"),
        ("CANARY_TIMEOUT", 0, "redrive.E018"),
    ],
)
def test_canary_settings_out_of_range_fail_the_system_check(settings, name, value, check_id):
    ours = ("redrive.E016", "redrive.E017", "redrive.E018")
    assert not [e for e in checks.run_checks() if e.id in ours]
    settings.REDRIVE = {**settings.REDRIVE, name: value}
    errors = [e for e in checks.run_checks() if e.id in ours]
    assert [e.id for e in errors] == [check_id]
    assert errors[0].msg.startswith(f'REDRIVE["{name}"]: canary ')


def confirm_url(client, letters, action="replay"):
    return client.post(PREVIEW, {"action": action, "ids": ids(letters)})["Location"]


def test_the_confirm_page_offers_the_canary_with_its_defaults(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "CANARY_SIZE": 4, "CANARY_MAX_DEAD_SHARE": 0.25}
    page = operator_client.get(confirm_url(operator_client, DeadLetterFactory.create_batch(6)))
    content = page.content.decode()
    assert 'name="canary_size" value="4"' in content
    assert 'name="canary_max_dead_share" value="0.25"' in content
    discard = operator_client.get(
        confirm_url(operator_client, DeadLetterFactory.create_batch(2), "discard")
    )
    assert 'name="canary_size"' not in discard.content.decode()


@pytest.mark.parametrize(
    "data",
    [
        {"canary_size": "-1"},
        {"canary_size": "1001"},
        {"canary_size": "x"},
        {"canary_size": "2.5"},
        {"canary_size": "1e3"},
        {"canary_size": "9" * 5000},
        {"canary_max_dead_share": "-0.1"},
        {"canary_max_dead_share": "1.5"},
        {"canary_max_dead_share": "nan"},
        {"canary_max_dead_share": "inf"},
        {"canary_max_dead_share": "x"},
    ],
)
def test_the_confirm_form_refuses_bad_canary_values(operator_client, data):
    letters = DeadLetterFactory.create_batch(6)
    response = operator_client.post(confirm_url(operator_client, letters), {"reason": "r", **data})
    assert response.status_code == 400
    content = response.content.decode()
    # The refusal is the field's own error beside it (the page names the canary fields anyway).
    [field] = data
    errors = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', content)
    assert errors and ("must be" in errors[1] or "Enter a" in errors[1]), content
    assert not ReplayRun.objects.exists()
    untouched(letters)


def test_the_confirm_form_starts_a_run_with_its_canary(operator_client, settings):
    letters = DeadLetterFactory.create_batch(6)
    url = confirm_url(operator_client, letters)
    response = operator_client.post(
        url, {"reason": "r", "canary_size": "2", "canary_max_dead_share": "0.5"}
    )
    assert response.status_code == 302
    run = ReplayRun.objects.get()
    assert (run.canary_size, run.canary_max_dead_share, run.canary_timeout) == (2, 0.5, 300.0)
    assert (run.processed, run.canary_state) == (2, CanaryState.WATCHING)
    # Empty fields are the settings' defaults; 0 is none.
    settings.REDRIVE = {**settings.REDRIVE, "CANARY_SIZE": 3}
    more = DeadLetterFactory.create_batch(6)
    operator_client.post(confirm_url(operator_client, more), {"reason": "r", "canary_size": ""})
    assert (
        ReplayRun.objects.first().canary_size,
        ReplayRun.objects.first().canary_max_dead_share,
    ) == (3, 0.2)
    none = DeadLetterFactory.create_batch(6)
    operator_client.post(confirm_url(operator_client, none), {"reason": "r", "canary_size": "0"})
    assert ReplayRun.objects.first().canary_size == 0
    assert ReplayRun.objects.first().state == RunState.FINISHED


def test_the_run_page_and_the_audit_show_a_halted_run(operator_client, operator):
    clock = FakeClock()
    letters = DeadLetterFactory.create_batch(5)
    run = start(operator, letters, canary=3, clock=clock)
    page = operator_client.get(reverse("deadletters:run", args=[run.pk])).content.decode()
    assert "Canary: the first" in page and "Canary replayed, waiting for its jobs" in page
    assert '<span class="canary-unfinished">3</span> not finished yet' in page
    jobs = canary_jobs(run)
    settle(jobs[:1], JobState.DONE)
    settle(jobs[1:], JobState.DEAD)
    work_runner_jobs(clock)
    page = operator_client.get(reverse("deadletters:run", args=[run.pk])).content.decode()
    assert "Halted by canary" in page
    assert 'class="canary-size">3<' in page
    assert '<span class="canary-done">1</span> done, <span class="canary-dead">2</span>' in page
    assert 'class="canary-threshold">20%<' in page
    assert "2 of its 3 replays died again" in page
    assert "Halted by its canary at" in page  # its audit entry
    assert "Resume despite the canary" in page and ">Cancel<" in page
    audit = operator_client.get(reverse("deadletters:audit")).content.decode()
    assert '<span class="state run-halted">Halted by canary</span>' in audit


def test_resuming_a_halted_run_takes_the_permission_and_the_csrf_token(operator, viewer):
    clock = FakeClock()
    letters = DeadLetterFactory.create_batch(4)
    run = start(operator, letters, canary=2, clock=clock)
    settle(canary_jobs(run), JobState.DEAD)
    work_runner_jobs(clock)
    url = reverse("deadletters:run-control", args=[run.pk, "resume"])
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(url).status_code == 403
    assert logged_in(viewer).post(url).status_code == 403
    assert ReplayRun.objects.get(pk=run.pk).state == RunState.HALTED
    response = logged_in(operator).post(url, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    run.refresh_from_db()
    assert (run.state, run.canary_state) == (RunState.RUNNING, CanaryState.OVERRIDDEN)
    assert run_events(run)[-1] == ("resumed", operator.get_username())
    assert services.run_events(run)[-1].channel == "console"
    assert "Canary failed: resumed by an operator" in response.content.decode()
    audit = logged_in(operator).get(reverse("deadletters:audit")).content.decode()
    assert "Canary failed: resumed by an operator" in audit


@pytest.fixture
def oncall(db):
    return user_with_role("operator", "oncall")


def replay_command(*argv):
    return run_command("deadletters", "replay", *argv, "--reason", "back", "--operator", "oncall")


@pytest.mark.parametrize(
    "argv",
    [
        ["--canary", "-1"],
        ["--canary", "1001"],
        ["--canary", "x"],
        ["--canary", "2.5"],
        ["--canary", ""],
        ["--canary", str(2**63)],
        ["--canary-max-dead-share", "-0.1"],
        ["--canary-max-dead-share", "1.5"],
        ["--canary-max-dead-share", "nan"],
        ["--canary-max-dead-share", "inf"],
        ["--canary-max-dead-share", ""],
    ],
)
def test_the_command_refuses_bad_canary_values(oncall, argv):
    letters = DeadLetterFactory.create_batch(6)
    result = replay_command(*map(str, ids(letters)), *argv)
    assert result.refused_cleanly, result
    assert "must be" in result.err
    assert not ReplayRun.objects.exists()
    untouched(letters)


def test_a_discard_takes_no_canary_option(oncall):
    letter = DeadLetterFactory()
    result = run_command(
        "deadletters", "discard", str(letter.pk), "--canary", "2", "--reason", "r",
        "--operator", "oncall",
    )  # fmt: skip
    assert result.refused_cleanly, result


def test_the_command_halts_when_its_canary_jobs_do_not_finish_in_time(oncall, settings):
    # No worker runs the canary's jobs here: at the (short) timeout they count as failures.
    settings.REDRIVE = {**settings.REDRIVE, "CANARY_TIMEOUT": 0.05}
    letters = DeadLetterFactory.create_batch(5)
    result = replay_command(*map(str, ids(letters)), "--canary", "2")
    assert result.code == 0, result
    run = ReplayRun.objects.get()
    assert (run.state, run.processed, run.canary_size) == (RunState.HALTED, 2, 2)
    assert f"run {run.pk} halted: 2 replayed" in result.out
    assert "canary halted: 0 done, 0 died again of 2" in result.out
    assert "halted by its canary" in result.err
    untouched(letters[2:])
    # --canary 0: none, as before the canary existed.
    more = DeadLetterFactory.create_batch(5)
    result = replay_command(*map(str, ids(more)), "--canary", "0")
    assert result.code == 0 and "finished: 5 replayed" in result.out, result


# --- with real jobs on a real worker ---------------------------------------------------------


def failing_or_fixed(tmp_path, fates):
    """Letters of tests.tasks.effect_then_fails: each replay dies again (PermanentError) while
    its letter's file exists ("dies"), or succeeds ("works")."""
    broken = tmp_path / "still-broken"
    broken.write_text("x")
    fixed = tmp_path / "fixed"  # never created
    return [
        DeadLetterFactory(
            task_path="tests.tasks.effect_then_fails",
            args=[f"canary-{n}", str(broken if fate == "dies" else fixed)],
            kwargs={},
        )
        for n, fate in enumerate(fates)
    ]


def run_state(run):
    return ReplayRun.objects.get(pk=run.pk).state


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_a_real_worker_a_dying_canary_halts_the_run_by_itself(workers, tmp_path):
    operator = user_with_role("operator")
    letters = failing_or_fixed(tmp_path, ["dies", "works", "dies", *["works"] * 5])
    run = start(operator, letters, canary=3)
    assert (run.processed, run.canary_state) == (3, CanaryState.WATCHING)
    worker = workers.start("--poll", "0.05")
    wait_until(lambda: run_state(run) == RunState.HALTED, timeout=60, message="the halt")
    assert worker.poll() is None, Path(worker.log_path).read_text()
    run.refresh_from_db()
    assert (run.canary_state, run.canary_done, run.canary_dead, run.processed) == (
        CanaryState.HALTED,
        1,
        2,
        3,
    )
    assert [verb for verb, _ in run_events(run)] == ["halted"]
    # The canary's letters settled as their jobs did; the rest were never touched.
    states = dict(DeadLetter.objects.values_list("pk", "state"))
    assert [states[dl.pk] for dl in letters[:3]] == ["pending", "replayed", "pending"]
    assert set(
        DeadLetter.objects.filter(pk__in=ids(letters[:3])).values_list("replays", flat=True)
    ) == {1}
    untouched(letters[3:])
    # No runner job is left waiting or running: the halt ended the chain.
    wait_until(
        lambda: not Job.objects.filter(task_path=RUNNER).exclude(state=JobState.DONE).exists(),
        message="the runner chain to end",
    )

    # The operator resumes it deliberately: the rest is replayed and succeeds.
    assert services.resume(run, operator=operator)
    rest = Job.objects.filter(replayed_from__in=ids(letters[3:]))
    wait_until(
        lambda: (
            run_state(run) == RunState.FINISHED
            and rest.count() == 5
            and not rest.exclude(state=JobState.DONE).exists()
        ),
        timeout=60,
        message="the rest replayed and done",
    )
    assert set(
        DeadLetter.objects.filter(pk__in=ids(letters[3:])).values_list("state", flat=True)
    ) == {"replayed"}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_a_real_worker_a_healthy_canary_passes_and_the_run_goes_on(
    workers, tmp_path, settings
):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 3}
    operator = user_with_role("operator")
    letters = failing_or_fixed(tmp_path, ["works"] * 4 + ["dies"] * 2)
    run = start(operator, letters, canary=4)  # larger than a batch: the runner does it all
    assert run.state == RunState.QUEUED
    worker = workers.start("--poll", "0.05")
    wait_until(lambda: run_state(run) == RunState.FINISHED, timeout=60, message="the run's end")
    assert worker.poll() is None, Path(worker.log_path).read_text()
    run.refresh_from_db()
    assert (run.canary_state, run.canary_done, run.canary_dead) == (CanaryState.PASSED, 4, 0)
    assert (run.processed, run.done) == (6, 6)
    assert not run_events(run)
    # The items after the canary went only once every canary job had succeeded.
    canary_done_at = max(
        Job.objects.filter(replayed_from__in=ids(letters[:4])).values_list("finished_at", flat=True)
    )
    assert min(run.items.order_by("id").values_list("at", flat=True)[4:]) >= canary_done_at
