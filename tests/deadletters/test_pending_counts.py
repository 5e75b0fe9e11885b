import pytest
from django.db import connection
from django.db.models import Count, Q

from deadletters import pending_counts
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


def test_a_rolled_back_change_leaves_the_counts_alone():
    from django.db import transaction

    DeadLetterFactory(task_path="a", error_class="E")
    with pytest.raises(RuntimeError), transaction.atomic():
        DeadLetterFactory(task_path="a", error_class="E")
        raise RuntimeError
    assert counted() == {("a", "E"): (1, 0)}


def test_ensure_reinstalls_dropped_triggers_and_recounts():
    DeadLetterFactory(task_path="a", error_class="E")
    drops = (
        pending_counts.POSTGRESQL_DROP
        if connection.vendor == "postgresql"
        else pending_counts.SQLITE_DROP
    )
    with connection.cursor() as cursor:
        for sql in drops:
            cursor.execute(sql)
    DeadLetterFactory(task_path="a", error_class="E")  # not counted: no triggers
    assert counted() == {("a", "E"): (1, 0)}
    assert not pending_counts.installed(connection)
    assert pending_counts.ensure(connection) is True
    assert counted() == truth() == {("a", "E"): (2, 0)}
    assert pending_counts.ensure(connection) is False
