"""Run now and cancel on queued jobs: only jobs that have not started change, each audited."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from jobqueue import store
from jobqueue.models import AuditEntry, Job, JobState
from tests.audit import audited
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_run_now_makes_scheduled_and_retrying_jobs_due_and_leaves_the_rest():
    now = timezone.now()
    scheduled = JobFactory(run_after=now + timedelta(hours=1))
    retrying = JobFactory(run_after=now + timedelta(minutes=5), attempts=2)
    due = JobFactory(run_after=now - timedelta(seconds=1))
    running = JobFactory(running=True)
    changed = store.job_actions.run_now(
        [scheduled.pk, retrying.pk, due.pk, running.pk, 10**12], actor="ana", reason="go", now=now
    )
    assert sorted(changed) == sorted([scheduled.pk, retrying.pk])
    assert Job.objects.get(pk=scheduled.pk).run_after == now
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
    claimed = store.claim(worker_id="w", queues=None, limit=10, lease_seconds=30, now=now)
    assert {j.pk for j in claimed} == {scheduled.pk, retrying.pk, due.pk}
    assert set(audited("job")) == {
        ("run_now", str(scheduled.pk), "ana", "go"),
        ("run_now", str(retrying.pk), "ana", "go"),
    }


def test_cancel_never_touches_a_running_or_finished_job_and_a_cancelled_one_is_never_claimed():
    waiting = JobFactory()
    running = JobFactory(running=True)
    done = JobFactory(done=True)
    changed = store.job_actions.cancel(
        [waiting.pk, running.pk, done.pk], actor="ana", reason="campaign off"
    )
    assert changed == [waiting.pk]
    job = Job.objects.get(pk=waiting.pk)
    assert job.state == JobState.CANCELLED and job.finished_at is not None
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
    assert store.claim(worker_id="w", queues=None, limit=10, lease_seconds=30) == []
    assert store.job_actions.cancel([waiting.pk], actor="ana", reason="again") == []
    assert len(audited("job")) == 1


def test_a_cancelled_jobs_key_stays_taken():
    job, _ = store.enqueue(store.NewJob(task_path="tests.tasks.noop", idempotency_key="mail:1"))
    store.job_actions.cancel([job.pk], actor="ana", reason="duplicate campaign")
    again, created = store.enqueue(
        store.NewJob(task_path="tests.tasks.noop", idempotency_key="mail:1")
    )
    assert not created and again.pk == job.pk and again.state == JobState.CANCELLED


@pytest.mark.parametrize("actor, reason", [("ana", ""), ("ana", "  "), ("", "why"), (None, "x")])
def test_an_action_without_an_operator_or_a_reason_is_refused(actor, reason):
    job = JobFactory()
    with pytest.raises(ValueError):
        store.job_actions.cancel([job.pk], actor=actor, reason=reason)
    assert Job.objects.get(pk=job.pk).state == JobState.READY
    assert not audited("job")


def test_a_big_selection_is_done_in_chunks(monkeypatch):
    monkeypatch.setattr(store.job_actions, "CHUNK", 3)
    jobs = [JobFactory().pk for _ in range(8)]
    assert sorted(store.job_actions.cancel(jobs, actor="ana", reason="x")) == jobs
    assert len(audited("job")) == 8


def test_prune_removes_old_done_and_cancelled_jobs_and_keeps_everything_else():
    from tests.cli import run
    from tests.factories import DeadLetterFactory

    old = timezone.now() - timedelta(days=30)
    gone = [
        JobFactory(done=True, finished_at=old).pk,
        JobFactory(state=JobState.CANCELLED, finished_at=old).pk,
    ]
    letter = DeadLetterFactory()
    replay = JobFactory(done=True, finished_at=old, replayed_from=letter)
    letter.replay_job = replay
    letter.save()
    gone.append(replay.pk)
    kept = [
        JobFactory(done=True).pk,  # recent
        JobFactory(run_after=old).pk,  # waiting, however old
        JobFactory(running=True).pk,
        letter.job_id,  # dead, with its letter
    ]
    result = run("prune", "--jobs-older-than", "14")
    assert result.code == 0 and "pruned 3 finished job(s)" in result.out
    assert not Job.objects.filter(pk__in=gone).exists()
    assert Job.objects.filter(pk__in=kept).count() == 4
    letter.refresh_from_db()
    assert letter.replay_job_id is None and letter.job_id == kept[-1]


def test_prune_walks_many_chunks_and_clears_every_link_to_a_pruned_job(monkeypatch):
    """Chunk after chunk (keyset), each row of any app that points at a pruned job has its
    link cleared (its on_delete), as Django's delete would, without loading the jobs."""
    from deadletters.models import PayloadEdit
    from jobqueue.models import Schedule
    from tests.factories import DeadLetterFactory, UserFactory

    monkeypatch.setattr(store.jobs, "PRUNE_CHUNK", 2)
    old = timezone.now() - timedelta(days=30)
    gone = [JobFactory(done=True, finished_at=old) for _ in range(5)]
    recent = JobFactory(done=True)
    letter = DeadLetterFactory()
    edit = PayloadEdit.objects.create(
        dead_letter=letter, operator=UserFactory(), operator_name="ana", reason="fix",
        job=gone[0], at=old,
    )  # fmt: skip
    schedule = Schedule.objects.create(
        name="nightly", task_path="tests.tasks.noop", cron="0 3 * * *", next_run_at=old,
        created_at=old, updated_at=old, last_job=gone[3],
    )  # fmt: skip
    letter.replay_job = gone[4]
    letter.save()

    pruned = store.prune_finished_jobs(older_than=timedelta(days=14))

    assert pruned == 5
    assert not Job.objects.filter(pk__in=[j.pk for j in gone]).exists()
    assert Job.objects.filter(pk=recent.pk).exists()
    edit.refresh_from_db()
    schedule.refresh_from_db()
    letter.refresh_from_db()
    assert (edit.job_id, schedule.last_job_id, letter.replay_job_id) == (None, None, None)
    assert letter.job_id is not None  # its own dead job stays


def test_the_jobs_command_runs_now_and_cancels_as_the_console_does_audited_as_cli():
    from deadletters.roles import assign
    from tests.cli import row_counts, run
    from tests.factories import UserFactory

    assign(UserFactory(username="ops"), "operator")
    UserFactory(username="nobody")
    later = timezone.now() + timedelta(hours=1)
    waiting, other = JobFactory(run_after=later), JobFactory(run_after=later)
    running = JobFactory(running=True)
    before = row_counts()
    refused = run("jobs", "cancel", str(waiting.pk), "--operator", "nobody", "--reason", "r")
    assert refused.refused_cleanly
    assert "Not allowed: this needs the permission deadletters.view_deadletter." in refused.err
    assert run("jobs", "cancel", "0", "--operator", "ops", "--reason", "r").refused_cleanly
    assert row_counts() == before

    # `act jobs.cancel --ids ...` then `act confirm`, in one command: the registry's messages.
    done = run(
        "jobs", "cancel", str(waiting.pk), str(running.pk), "--operator", "ops", "--reason", "off"
    )
    assert done.code == 0 and done.out.strip() == "1 job cancelled; 1 skipped (no longer waiting)."
    moved = run("jobs", "run-now", str(other.pk), "--operator", "ops", "--reason", "vip", "--json")
    assert moved.code == 0
    outcome = json.loads(moved.out)
    assert outcome == {
        "changed": True,
        "message": "1 job made due now.",
        "selection": outcome["selection"],
        "changed_ids": [other.pk],
        "skipped": 0,
    }
    assert Job.objects.get(pk=waiting.pk).state == JobState.CANCELLED
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
    assert Job.objects.get(pk=other.pk).run_after <= timezone.now()
    entries = [(e.action, e.targets, e.channel) for e in AuditEntry.objects.order_by("seq")]
    assert entries == [
        ("job.cancel", [str(waiting.pk)], "cli"),
        ("job.run_now", [str(other.pk)], "cli"),
    ]
