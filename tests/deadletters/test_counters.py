import pytest
from django.db import connection
from django.db.models import Count, Q

from deadletters import counters
from deadletters.models import PendingCount
from jobqueue import store
from jobqueue.models import DeadLetter
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db


def counted():
    return {
        (row.task_path, row.error_class): (row.pending, row.died_again)
        for row in PendingCount.objects.filter(pending__gt=0)
    }


def truth():
    return {
        (row["task_path"], row["error_class"]): (row["n"], row["again"])
        for row in DeadLetter.objects.filter(state="pending")
        .values("task_path", "error_class")
        .annotate(n=Count("id"), again=Count("id", filter=Q(replays__gt=0)))
    }


def test_counts_follow_every_kind_of_change():
    a = DeadLetterFactory.create_batch(3, task_path="a", error_class="E1")
    b = DeadLetterFactory.create_batch(2, task_path="b", error_class="E2")
    DeadLetterFactory(task_path="b", error_class="E2", discarded=True)
    assert counted() == truth() == {("a", "E1"): (3, 0), ("b", "E2"): (2, 0)}

    store.replay([a[0].pk, a[1].pk])
    assert counted() == truth() == {("a", "E1"): (1, 0), ("b", "E2"): (2, 0)}

    # Died again after the replay, with a different error: back to pending, replays kept.
    DeadLetter.objects.filter(pk=a[0].pk).update(state="pending", error_class="E3")
    assert counted() == truth()
    assert counted()[("a", "E3")] == (1, 1)

    store.discard([b[0].pk])
    DeadLetter.objects.filter(pk=b[1].pk).update(task_path="c")
    DeadLetter.objects.filter(pk=a[2].pk).delete()
    assert counted() == truth() == {("a", "E3"): (1, 1), ("c", "E2"): (1, 0)}


def test_hourly_counts_each_dead_lettering_including_dying_again():
    from datetime import timedelta

    from django.utils import timezone

    from deadletters.models import HourlyCount

    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    letter = DeadLetterFactory(task_path="a", dead_lettered_at=hour + timedelta(minutes=10))
    DeadLetterFactory(task_path="a", dead_lettered_at=hour + timedelta(minutes=59))
    DeadLetterFactory(task_path="a", dead_lettered_at=hour + timedelta(minutes=60))
    store.replay([letter.pk])
    died_again_at = hour + timedelta(hours=2, minutes=1)
    DeadLetter.objects.filter(pk=letter.pk).update(state="pending", dead_lettered_at=died_again_at)
    counts = dict(HourlyCount.objects.filter(task_path="a").values_list("hour", "dead_lettered"))
    assert counts == {
        hour: 2,
        hour + timedelta(hours=1): 1,
        hour + timedelta(hours=2): 1,
    }


def test_a_rolled_back_change_leaves_the_counts_alone():
    from django.db import transaction

    DeadLetterFactory(task_path="a", error_class="E")
    with pytest.raises(RuntimeError), transaction.atomic():
        DeadLetterFactory(task_path="a", error_class="E")
        raise RuntimeError
    assert counted() == {("a", "E"): (1, 0)}


def test_ensure_reinstalls_dropped_triggers_and_recounts():
    DeadLetterFactory(task_path="a", error_class="E")
    drops = counters.drop_statements(connection.vendor)
    with connection.cursor() as cursor:
        for sql in drops:
            cursor.execute(sql)
    DeadLetterFactory(task_path="a", error_class="E")  # not counted: no triggers
    assert counted() == {("a", "E"): (1, 0)}
    assert not counters.installed(connection)
    assert counters.ensure(connection) is True
    assert counted() == truth() == {("a", "E"): (2, 0)}
    assert counters.ensure(connection) is False


def test_jobqueue_has_the_registered_counter_restore_its_triggers_after_migrating():
    """The triggers sit on jobqueue's table, which a jobqueue migration may rebuild (dropping
    them on SQLite): jobqueue's own post_migrate asks the counter registered with its health
    module to restore them, and queue health reads the counts through the same hook."""
    from django.apps import apps
    from django.db.models.signals import post_migrate

    from jobqueue import health

    DeadLetterFactory(task_path="a", queue_name="q", error_class="E")
    with connection.cursor() as cursor:
        for sql in counters.drop_statements(connection.vendor):
            cursor.execute(sql)
    DeadLetterFactory(task_path="a", queue_name="q", error_class="E")  # not counted yet
    jobqueue = apps.get_app_config("jobqueue")
    post_migrate.send(
        sender=jobqueue, app_config=jobqueue, verbosity=0, interactive=False, using="default"
    )
    assert counters.installed(connection)
    assert health.count_dead_letters() == {("q", "a"): 2}


def test_without_a_registered_counter_queue_health_counts_the_rows(monkeypatch):
    from jobqueue import health

    DeadLetterFactory(task_path="a", queue_name="q")
    PendingCount.objects.update(pending=99)  # a registered counter would say 99
    monkeypatch.setattr(health, "_counter", None)
    assert health.count_dead_letters() == {("q", "a"): 1}
