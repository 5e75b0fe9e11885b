"""`manage.py prune` writes one audit entry a run: what it deleted, of each kind, and who ran it
(a named operator, or `system` for a scheduled run), through the command line."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobqueue import store
from jobqueue.models import AuditEntry, Job
from tests.cli import row_counts, run
from tests.factories import JobFactory, UserFactory

pytestmark = pytest.mark.django_db


def old_done_jobs(n: int):
    long_ago = timezone.now() - timedelta(days=30)
    return [JobFactory(done=True, finished_at=long_ago) for _ in range(n)]


def test_a_scheduled_run_is_one_entry_by_the_system_with_its_counts():
    old_done_jobs(2)
    JobFactory(done=True)  # finished now: kept
    result = run("prune")
    assert result.code == 0, result.err
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.channel, entry.actor) == ("chore.prune", "cli", "system")
    assert (entry.target_kind, entry.targets, entry.reason) == ("chore", ["prune"], "")
    assert entry.params["deleted"]["jobs"] == 2
    assert entry.params["older_than_days"]["jobs"] == 14.0
    # Every kind the run pruned is counted, zero or not, as the report prints them.
    assert set(entry.params["deleted"]) >= {"outbox_messages", "jobs", "workers", "job_counters"}
    assert Job.objects.count() == 1
    assert list(store.audit.verify()) == []


def test_a_run_that_deletes_nothing_is_still_one_entry():
    assert run("prune", "--json").code == 0
    entry = AuditEntry.objects.get()
    assert set(entry.params["deleted"].values()) == {0}


def test_an_operator_and_a_reason_are_named_in_the_entry():
    UserFactory(username="ana")
    old_done_jobs(1)
    result = run("prune", "--jobs-older-than", "7", "--operator", "ana", "--reason", "disk full")
    assert result.code == 0, result.err
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.channel, entry.reason) == ("ana", "cli", "disk full")
    assert entry.params["deleted"]["jobs"] == 1
    assert entry.params["older_than_days"]["jobs"] == 7.0


@pytest.mark.parametrize(
    "make", [lambda: None, lambda: UserFactory(username="ana", is_active=False)]
)
def test_an_unknown_or_inactive_operator_is_refused_before_anything_is_deleted(make):
    make()
    old_done_jobs(1)
    before = row_counts()
    result = run("prune", "--operator", "ana")
    assert result.refused_cleanly, result
    assert row_counts() == before
    assert not AuditEntry.objects.exists()
