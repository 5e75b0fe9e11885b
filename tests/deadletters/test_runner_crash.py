from pathlib import Path

import pytest
from django.utils import timezone

from deadletters import services
from deadletters.models import ReplayItem, ReplayRun, RunState
from jobqueue.models import DeadLetter, Job, JobState
from tests.conftest import wait_until
from tests.factories import DeadLetterFactory

from .conftest import user_with_role

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_run_resumes_after_its_worker_is_killed_and_replays_nothing_twice(workers, settings):
    settings.DEADLETTERS_REPLAY_BATCH_SIZE = 5
    operator = user_with_role("operator")
    letters = DeadLetterFactory.create_batch(30, task_path="tests.tasks.noop", args=[1])
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    # 5 items a batch at 20 items/s: a batch every quarter second, time to kill in between.
    run = services.start_run(operator=operator, selection=selection, reason="crash", rate=20)
    runner = Job.objects.get(task_path="deadletters.tasks.carry_out_run")

    first = workers.start("--queue", "deadletters", "--lease", "1", "--poll", "0.05")
    wait_until(lambda: ReplayRun.objects.get(pk=run.pk).batches >= 2, message="two batches")
    first.kill()
    first.wait()
    run.refresh_from_db()
    assert run.state == RunState.RUNNING and 10 <= run.processed < 30

    wait_until(
        lambda: Job.objects.get(pk=runner.pk).locked_until < timezone.now(),
        message="the dead worker's lease to lapse",
    )
    second = workers.run("--burst", "--lease", "5", "--poll", "0.05", timeout=120)
    assert second.returncode == 0, Path(second.log_path).read_text()

    run.refresh_from_db()
    assert (run.state, run.processed, run.done, run.skipped) == (RunState.FINISHED, 30, 30, 0)
    assert ReplayItem.objects.filter(run=run).count() == 30
    assert set(ReplayItem.objects.values_list("dead_letter_id", flat=True)) == {
        dl.pk for dl in letters
    }
    assert set(DeadLetter.objects.values_list("state", "replays")) == {("replayed", 1)}
    assert Job.objects.filter(replayed_from__isnull=False).count() == 30
    runner.refresh_from_db()
    assert runner.state == JobState.DONE and runner.attempts == 2
