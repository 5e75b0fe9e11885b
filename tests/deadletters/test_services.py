from collections import Counter

import pytest
from django.db import IntegrityError

from deadletters import services
from deadletters.models import ReplayItem, ReplayRun, RunState
from jobqueue import store
from jobqueue.models import DeadLetter, DeadLetterState, Job, JobState
from jobqueue.worker import Worker
from tests.factories import DeadLetterFactory, JobFactory

from .conftest import user_with_role

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_batches(settings):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 3}


def start(operator, letters, *, action="replay", reason="API fixed", **kwargs):
    selection = services.freeze_selection(
        operator=operator, action=action, ids=[dl.pk for dl in letters]
    )
    return services.start_run(operator=operator, selection=selection, reason=reason, **kwargs)


def test_small_run_replays_in_the_request_with_ledger(operator):
    letters = DeadLetterFactory.create_batch(3)
    run = start(operator, letters)
    assert run.state == RunState.FINISHED
    assert (run.requested, run.done, run.skipped, run.batches) == (3, 3, 0, 1)
    for letter in letters:
        letter.refresh_from_db()
        assert letter.state == DeadLetterState.REPLAYING
        job = Job.objects.get(replayed_from=letter)
        # The replay keeps the job's identity.
        assert (job.task_path, job.args, job.idempotency_key) == (
            letter.task_path,
            letter.args,
            letter.idempotency_key,
        )
        item = ReplayItem.objects.get(run=run, dead_letter=letter)
        assert (item.outcome, item.job_id, item.job_outcome) == ("replayed", job.pk, "pending")


def test_reason_is_required(operator):
    letter = DeadLetterFactory()
    selection = services.freeze_selection(operator=operator, action="replay", ids=[letter.pk])
    with pytest.raises(services.RefusedError, match="reason"):
        services.start_run(operator=operator, selection=selection, reason="   ")
    assert not ReplayRun.objects.exists()
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.PENDING


def test_selection_is_confirmed_once_and_only_by_its_operator(operator):
    letter = DeadLetterFactory()
    selection = services.freeze_selection(operator=operator, action="replay", ids=[letter.pk])
    other = user_with_role("operator", "someone-else")
    with pytest.raises(services.RefusedError, match="another operator"):
        services.start_run(operator=other, selection=selection, reason="x")
    services.start_run(operator=operator, selection=selection, reason="x")
    with pytest.raises(services.RefusedError, match="already been confirmed"):
        services.start_run(operator=operator, selection=selection, reason="x")


def test_a_selection_confirmed_twice_at_once_is_one_run_and_a_refusal(operator, monkeypatch):
    """A double click: the second confirmation passes the first "already confirmed?" look
    while the first is still working out the job types, and commits first (here: run inside
    that step). The one that comes second is refused, not a server error, and nothing of it
    is written."""
    letter = DeadLetterFactory()
    selection = services.freeze_selection(operator=operator, action="replay", ids=[letter.pk])
    job_types, seen = services.runs._job_types, []

    def job_types_with_a_second_click(ids, *, using):
        if not seen:
            seen.append(None)  # the second click's own look at the job types goes through
            seen[0] = services.start_run(operator=operator, selection=selection, reason="2nd")
        return job_types(ids, using=using)

    monkeypatch.setattr(services.runs, "_job_types", job_types_with_a_second_click)
    with pytest.raises(services.RefusedError, match="already been confirmed"):
        services.start_run(operator=operator, selection=selection, reason="1st")
    [run] = ReplayRun.objects.all()
    assert run == seen[0] and run.reason == "2nd"
    assert ReplayItem.objects.filter(dead_letter=letter).count() == 1


def test_frozen_selection_ignores_items_that_die_after_the_preview(operator):
    previewed = DeadLetterFactory.create_batch(2, task_path="a")
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in previewed]
    )
    late = DeadLetterFactory(task_path="a")  # matches the same filter, died after the preview
    run = services.start_run(operator=operator, selection=selection, reason="fixed")
    assert run.requested == 2
    late.refresh_from_db()
    assert late.state == DeadLetterState.PENDING
    assert set(run.items.values_list("dead_letter_id", flat=True)) == {dl.pk for dl in previewed}


def test_double_replay_is_refused(operator):
    letter = DeadLetterFactory()
    start(operator, [letter])
    second = start(operator, [letter])
    assert (second.done, second.skipped) == (0, 1)
    assert second.items.get().skip_reason == "an earlier replay is still pending"
    assert Job.objects.filter(replayed_from=letter).count() == 1


def test_poison_limit_needs_the_permission(operator, admin_operator, settings):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_REPLAYS": 3}
    poison = DeadLetterFactory(replays=3)
    run = start(operator, [poison])
    assert (run.done, run.skipped) == (0, 1)
    assert run.items.get().skip_reason == "replayed 3 times already (poison limit)"
    poison.refresh_from_db()
    assert poison.state == DeadLetterState.PENDING
    bypass = start(admin_operator, [poison], allow_poisoned=True)
    assert bypass.done == 1
    poison.refresh_from_db()
    assert poison.replays == 4


def test_discard_keeps_the_row(operator):
    letter = DeadLetterFactory()
    run = start(operator, [letter], action="discard", reason="customer refunded by hand")
    assert run.done == 1
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.DISCARDED and letter.discarded_at
    assert run.items.get().outcome == "discarded"
    assert DeadLetter.objects.filter(pk=letter.pk).exists()


def test_big_run_goes_to_the_background_and_batches_stay_bounded(operator, small_batches):
    letters = DeadLetterFactory.create_batch(8)
    run = start(operator, letters)
    assert run.state == RunState.QUEUED and run.processed == 0
    runner = Job.objects.get(task_path="deadletters.tasks.carry_out_run")
    assert runner.queue_name == "deadletters"
    assert runner.args == [run.pk, run.generation]
    services.carry_out(run.pk, run.generation)
    run.refresh_from_db()
    assert run.state == RunState.FINISHED
    assert (run.processed, run.done, run.batches) == (8, 8, 3)
    assert Counter(run.items.values_list("batch", flat=True)) == {1: 3, 2: 3, 3: 2}


def test_resumed_run_replays_nothing_twice(operator, small_batches, monkeypatch):
    letters = DeadLetterFactory.create_batch(8)
    run = start(operator, letters)
    # The first runner commits one batch, then dies in the middle of the second.
    services.process_batch(run.pk, generation=run.generation)
    real_replay = store.replay

    def dies_mid_batch(ids, **kwargs):
        real_replay(ids, **kwargs)
        raise SystemExit("worker killed")

    monkeypatch.setattr(store, "replay", dies_mid_batch)
    with pytest.raises(SystemExit):
        services.process_batch(run.pk, generation=run.generation)
    monkeypatch.setattr(store, "replay", real_replay)
    # The job is retried by the queue: same runner, same generation.
    services.carry_out(run.pk, run.generation)
    run.refresh_from_db()
    assert (run.state, run.processed, run.done, run.skipped) == (RunState.FINISHED, 8, 8, 0)
    assert sorted(run.items.values_list("dead_letter_id", flat=True)) == sorted(
        dl.pk for dl in letters
    )
    for letter in letters:
        letter.refresh_from_db()
        assert letter.replays == 1
        assert Job.objects.filter(replayed_from=letter).count() == 1


def test_audit_and_replay_commit_together(operator, monkeypatch):
    letters = DeadLetterFactory.create_batch(3)
    real_replay = store.replay

    def fails_after_replaying(ids, **kwargs):
        real_replay(ids, **kwargs)
        raise RuntimeError("database went away mid-batch")

    monkeypatch.setattr(store, "replay", fails_after_replaying)
    with pytest.raises(RuntimeError):
        start(operator, letters)
    assert not ReplayRun.objects.exists()
    assert not ReplayItem.objects.exists()
    assert not Job.objects.filter(replayed_from__isnull=False).exists()
    assert set(DeadLetter.objects.values_list("state", "replays")) == {("pending", 0)}


def test_failed_ledger_write_rolls_back_the_replay(operator, small_batches, monkeypatch):
    letters = DeadLetterFactory.create_batch(5)
    run = start(operator, letters)

    def ledger_fails(*args, **kwargs):
        raise IntegrityError("ledger insert failed")

    monkeypatch.setattr(ReplayItem.objects, "bulk_create", ledger_fails)
    with pytest.raises(IntegrityError):
        services.process_batch(run.pk)
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {"pending"}
    assert not Job.objects.filter(replayed_from__isnull=False).exists()
    run.refresh_from_db()
    assert run.processed == 0


def test_pause_resume_cancel(operator, small_batches):
    letters = DeadLetterFactory.create_batch(9)
    run = start(operator, letters)
    first_generation = run.generation
    services.process_batch(run.pk, generation=first_generation)
    assert services.pause(run, operator=operator)
    assert run.state == RunState.PAUSED and run.stopped_by == operator.username
    # The paused runner stops without touching anything.
    assert services.process_batch(run.pk, generation=first_generation).handled == 0
    assert services.resume(run, operator=operator)
    assert run.generation == first_generation + 1 and run.state == RunState.RUNNING
    # The old runner cannot come back; the new one (enqueued by resume) carries on.
    assert services.process_batch(run.pk, generation=first_generation).handled == 0
    assert Job.objects.filter(
        task_path="deadletters.tasks.carry_out_run", args=[run.pk, run.generation]
    ).exists()
    services.process_batch(run.pk, generation=run.generation)
    assert services.cancel(run, operator=operator)
    assert run.state == RunState.CANCELLED and run.processed == 6
    assert not services.resume(run, operator=operator)
    assert services.process_batch(run.pk, generation=run.generation).handled == 0
    assert DeadLetter.objects.filter(state="pending").count() == 3


@pytest.mark.django_db(transaction=True)
def test_background_runner_on_a_real_worker(small_batches):
    operator = user_with_role("operator")
    letters = DeadLetterFactory.create_batch(7, task_path="tests.tasks.noop", args=[1])
    run = start(operator, letters)
    assert run.state == RunState.QUEUED
    # Burst: runs the runner, then the replayed noop jobs it enqueued.
    Worker(burst=True, concurrency=2).run()
    run.refresh_from_db()
    assert (run.state, run.done, run.batches) == (RunState.FINISHED, 7, 3)
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {"replayed"}
    assert set(Job.objects.filter(replayed_from__isnull=False).values_list("state", flat=True)) == {
        JobState.DONE
    }
    assert {item.job_outcome for item in run.items.select_related("job")} == {"done"}


def test_previews_nobody_confirmed_expire_after_a_day_and_runs_keep_theirs(operator):
    from datetime import timedelta

    from django.utils import timezone

    from deadletters.models import Selection

    letter = DeadLetterFactory()
    long_ago = timezone.now() - timedelta(days=2)
    abandoned = services.freeze_selection(
        operator=operator, action="replay", ids=[letter.pk], now=long_ago
    )
    confirmed = services.freeze_selection(
        operator=operator, action="replay", ids=[letter.pk], now=long_ago
    )
    services.start_run(operator=operator, selection=confirmed, reason="then")
    fresh = services.freeze_selection(operator=operator, action="replay", ids=[letter.pk])
    assert set(Selection.objects.values_list("pk", flat=True)) == {confirmed.pk, fresh.pk}
    assert not Selection.objects.filter(pk=abandoned.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_batch_chosen_as_a_deadlock_victim_is_tried_again(operator, small_batches, monkeypatch):
    from django.db import OperationalError

    letters = DeadLetterFactory.create_batch(5)
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    run = services.start_run(operator=operator, selection=selection, reason="r", background=False)
    real, calls = services.runs._process_batch, []

    class Deadlock(Exception):
        sqlstate = "40P01"

    def victim_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("deadlock detected") from Deadlock()
        return real(*args, **kwargs)

    monkeypatch.setattr(services.runs, "_process_batch", victim_once)
    assert services.process_batch(run.pk).handled == 3
    assert len(calls) == 2
    run.refresh_from_db()
    assert (run.processed, run.batches) == (3, 1)  # the victim left no trace


def test_confirming_an_expired_preview_is_refused_clearly(operator):
    letter = DeadLetterFactory()
    selection = services.freeze_selection(operator=operator, action="replay", ids=[letter.pk])
    type(selection).objects.filter(pk=selection.pk).delete()  # expired meanwhile
    with pytest.raises(services.RefusedError, match="expired"):
        services.start_run(operator=operator, selection=selection, reason="r")


def test_a_ledger_item_whose_replay_job_was_cancelled_says_so():
    from deadletters.models import ReplayItem
    from jobqueue.models import JobState

    item = ReplayItem(job=JobFactory(state=JobState.CANCELLED))
    assert item.job_outcome == "cancelled"
