"""The one keyset paginator (deadletters.paging) every list pages with: forward and back, a
page at a time, every row exactly once in order, ties in time broken by id, and anything that
is not a cursor ignored."""

from datetime import timedelta

import pytest
from django.utils import timezone

from deadletters import paging
from deadletters.selectors import LETTERS
from jobqueue.models import DeadLetter, Job
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db


def walk(qs, keyset, *, newest, size=3):
    """Every page forward from the first, then every page back from the last."""
    forward, pages, cursor = [], [], None
    while True:
        found = paging.page(qs, keyset, after=cursor, size=size, newest=newest)
        pages.append([r.pk for r in found.rows])
        forward += pages[-1]
        if not found.next_cursor:
            break
        cursor = found.next_cursor
    back, cursor = [pages[-1]], paging.page(qs, keyset, after=cursor, size=size, newest=newest)
    cursor = cursor.prev_cursor
    while cursor:
        found = paging.page(qs, keyset, before=cursor, size=size, newest=newest)
        back.insert(0, [r.pk for r in found.rows])
        cursor = found.prev_cursor
    return forward, pages, back


@pytest.mark.parametrize("newest", [True, False])
def test_letters_page_through_ties_in_time_once_each_both_ways(newest):
    at = timezone.now()
    # Seven letters, four of them dead at one instant: the id breaks the tie.
    times = [at, at, at, at, at - timedelta(seconds=1), at + timedelta(seconds=1), at]
    made = [DeadLetterFactory(dead_lettered_at=t) for t in times]
    order = sorted(made, key=lambda d: (d.dead_lettered_at, d.pk), reverse=newest)
    forward, pages, back = walk(DeadLetter.objects.all(), LETTERS, newest=newest)
    assert forward == [d.pk for d in order]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert back == pages


@pytest.mark.parametrize("newest", [True, False])
def test_jobs_page_by_id_once_each_both_ways(newest):
    made = [JobFactory().pk for _ in range(8)]
    forward, pages, back = walk(Job.objects.all(), paging.BY_ID, newest=newest)
    assert forward == sorted(made, reverse=newest)
    assert back == pages


@pytest.mark.parametrize(
    "cursor", ["", "garbage", "12-x", "-1", "0", str(2**63), "1-2-3", "١٢", "²", None, 7.5]
)
def test_anything_but_a_cursor_of_the_order_is_the_first_page(cursor):
    JobFactory.create_batch(2)
    DeadLetterFactory.create_batch(2)
    for keyset, qs in ((paging.BY_ID, Job.objects.all()), (LETTERS, DeadLetter.objects.all())):
        first = paging.page(qs, keyset, size=1)
        assert len(first.rows) == 1 and first.next_cursor
        assert paging.page(qs, keyset, after=cursor, size=1).rows == first.rows
        assert paging.page(qs, keyset, before=cursor, size=1).rows == first.rows
    assert paging.BY_ID.decode("12-34") is None and LETTERS.decode("12") is None
