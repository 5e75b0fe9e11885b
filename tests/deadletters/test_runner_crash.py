from pathlib import Path

import pytest
from django.db.models import Q

from deadletters import services
from deadletters.models import ReplayItem, ReplayRun, RunState
from jobqueue.models import DeadLetter, Job, JobState
from tests.conftest import wait_until
from tests.factories import DeadLetterFactory

from .conftest import user_with_role

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_run_resumes_after_its_worker_is_killed_and_replays_nothing_twice(workers, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 5}
    operator = user_with_role("operator")
    letters = DeadLetterFactory.create_batch(30, task_path="tests.tasks.noop", args=[1])
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    # 20 items/s: each runner job replays what is due and leaves a continuation for the next
    # item's time, so the worker is killed between or inside these short jobs.
    run = services.start_run(operator=operator, selection=selection, reason="crash", rate=20)

    first = workers.start("--queue", "deadletters", "--lease", "1", "--poll", "0.05")
    wait_until(lambda: ReplayRun.objects.get(pk=run.pk).batches >= 2, message="two batches")
    first.kill()
    first.wait()
    run.refresh_from_db()
    assert run.state == RunState.RUNNING and 2 <= run.processed < 30

    # A runner job the kill interrupted is swept back to ready once its lease lapses.
    second = workers.start("--lease", "5", "--poll", "0.05")

    ours = Job.objects.filter(
        Q(task_path="deadletters.tasks.carry_out_run") | Q(replayed_from__isnull=False)
    )

    def finished_and_replayed():
        return (
            ReplayRun.objects.filter(pk=run.pk, state=RunState.FINISHED).exists()
            and not ours.exclude(state=JobState.DONE).exists()
        )

    wait_until(finished_and_replayed, timeout=120, message="the run and its replays to finish")
    assert second.poll() is None, Path(second.log_path).read_text()

    run.refresh_from_db()
    assert (run.state, run.processed, run.done, run.skipped) == (RunState.FINISHED, 30, 30, 0)
    assert ReplayItem.objects.filter(run=run).count() == 30
    assert set(ReplayItem.objects.values_list("dead_letter_id", flat=True)) == {
        dl.pk for dl in letters
    }
    assert set(DeadLetter.objects.values_list("state", "replays")) == {("replayed", 1)}
    assert Job.objects.filter(replayed_from__isnull=False).count() == 30
    # One runner job per ticket (generation): the chain never forked into two runners.
    tickets = list(
        Job.objects.filter(task_path="deadletters.tasks.carry_out_run").values_list(
            "args", flat=True
        )
    )
    assert len(tickets) == len({tuple(t) for t in tickets}) >= 2
