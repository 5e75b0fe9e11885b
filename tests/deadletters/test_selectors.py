from datetime import timedelta

import pytest
from django.utils import timezone

from deadletters import selectors, summaries
from deadletters.selectors import ListFilter
from jobqueue import store
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db


def ids(page):
    return [dl.pk for dl in page.rows]


def test_filters_combine():
    now = timezone.now()
    match = DeadLetterFactory(
        task_path="a.send",
        queue_name="mail",
        error_class="builtins.TimeoutError",
        last_error="SMTP timed out after 30s",
        dead_lettered_at=now - timedelta(days=1),
    )
    DeadLetterFactory(task_path="b.other", queue_name="mail", error_class="builtins.TimeoutError")
    DeadLetterFactory(task_path="a.send", queue_name="default", error_class="builtins.TimeoutError")
    DeadLetterFactory(task_path="a.send", queue_name="mail", error_class="builtins.KeyError")
    DeadLetterFactory(task_path="a.send", queue_name="mail", last_error="other text")
    DeadLetterFactory(
        task_path="a.send", queue_name="mail", dead_lettered_at=now - timedelta(days=9)
    )
    DeadLetterFactory(task_path="a.send", queue_name="mail", discarded=True)
    f = ListFilter(
        job_type="a.send",
        queue="mail",
        error_class="builtins.TimeoutError",
        q="smtp TIMED",
        since=now - timedelta(days=2),
        until=now,
        state="pending",
    )
    assert ids(selectors.page(f)) == [match.pk]
    assert selectors.count_matching(f) == (1, False)


def test_state_filter_covers_each_state():
    letters = {
        "pending": DeadLetterFactory(),
        "replaying": DeadLetterFactory(replaying=True),
        "replayed": DeadLetterFactory(replayed=True),
        "discarded": DeadLetterFactory(discarded=True),
    }
    for state, letter in letters.items():
        assert ids(selectors.page(ListFilter(state=state))) == [letter.pk]


def test_keyset_walks_every_row_once_with_tied_timestamps_both_orders():
    same = timezone.now() - timedelta(hours=1)
    letters = [DeadLetterFactory(dead_lettered_at=same) for _ in range(5)]
    letters += [
        DeadLetterFactory(dead_lettered_at=same + timedelta(seconds=i)) for i in range(1, 4)
    ]
    expected_newest = [
        dl.pk for dl in sorted(letters, key=lambda d: (d.dead_lettered_at, d.pk), reverse=True)
    ]
    for order, expected in (("newest", expected_newest), ("oldest", expected_newest[::-1])):
        f = ListFilter(order=order)
        seen, pages, cursor = [], [], None
        while True:
            p = selectors.page(f, after=cursor, size=3)
            pages.append(p)
            seen += ids(p)
            if not p.next_cursor:
                break
            cursor = p.next_cursor
        assert seen == expected
        assert [len(p.rows) for p in pages] == [3, 3, 2]
        assert pages[0].prev_cursor is None
        # Walking back from the last page returns the same pages.
        back = selectors.page(f, before=pages[-1].prev_cursor, size=3)
        assert ids(back) == ids(pages[1])
        assert back.next_cursor == pages[1].next_cursor
        first = selectors.page(f, before=back.prev_cursor, size=3)
        assert ids(first) == ids(pages[0])
        assert first.prev_cursor is None


def test_exact_page_size_has_no_next_page_and_empty_filter_is_empty():
    for _ in range(3):
        DeadLetterFactory()
    p = selectors.page(ListFilter(), size=3)
    assert len(p.rows) == 3 and p.next_cursor is None
    empty = selectors.page(ListFilter(job_type="nope"))
    assert empty.rows == [] and empty.next_cursor is None and empty.prev_cursor is None


def test_bad_cursor_is_ignored():
    DeadLetterFactory()
    assert len(selectors.page(ListFilter(), after="garbage").rows) == 1
    assert selectors.LETTERS.decode("12-x") is None


def test_deep_keyset_query_starts_at_the_cursor():
    letters = [DeadLetterFactory() for _ in range(4)]
    cursor = selectors.LETTERS.encode(letters[2])
    qs = selectors.LETTERS.beyond(
        selectors.filtered(ListFilter()), selectors.LETTERS.decode(cursor), descending=True
    )
    sql = str(qs.query)
    # A range condition the index can seek to, not only an OR the planner must filter with.
    assert '"dead_lettered_at" <=' in sql
    assert sorted(qs.values_list("pk", flat=True)) == [letters[0].pk, letters[1].pk]


def test_matching_ids_is_bounded():
    for _ in range(3):
        DeadLetterFactory(task_path="x.y")
    assert len(selectors.matching_ids(ListFilter(job_type="x.y"), cap=3)) == 3
    with pytest.raises(selectors.SelectionTooLarge):
        selectors.matching_ids(ListFilter(job_type="x.y"), cap=2)
    assert selectors.count_matching(ListFilter(job_type="x.y"), cap=2) == (2, True)


def test_overview_groups_pending_by_type():
    # Half past the hour, so "5 minutes ago" falls in the same hour whenever the test runs.
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    DeadLetterFactory(task_path="a", error_class="E1", dead_lettered_at=now - timedelta(hours=30))
    DeadLetterFactory(task_path="a", error_class="E1", dead_lettered_at=now - timedelta(minutes=5))
    DeadLetterFactory(
        task_path="a", error_class="E2", replays=2, dead_lettered_at=now - timedelta(hours=2)
    )
    replayed_since = DeadLetterFactory(task_path="a", dead_lettered_at=now)
    store.replay([replayed_since.pk])
    DeadLetterFactory(task_path="b", discarded=True)
    [a] = summaries.by_type(now=now)
    assert a.task_path == "a"
    assert a.count == 3
    assert a.died_again == 1
    assert a.top_errors == [("E1", 2), ("E2", 1)]
    assert a.oldest == now - timedelta(hours=30)
    assert a.newest == now - timedelta(minutes=5)
    # Every dead-lettering of the last 24 h is charted, whatever became of the item since.
    assert sum(a.hourly) == 3
    assert a.hourly[-1] == 2  # this hour: 5 minutes ago and now
    assert len(a.chart) == 24


def test_preview_counts_and_reasons(settings):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_REPLAYS": 3}
    fresh = DeadLetterFactory(task_path="a")
    again = DeadLetterFactory(task_path="a", replays=1)
    poison = DeadLetterFactory(task_path="b", replays=3)
    in_flight = DeadLetterFactory(task_path="b", replaying=True)
    gone = DeadLetterFactory(task_path="b", discarded=True)
    ids_ = [fresh.pk, again.pk, poison.pk, in_flight.pk, gone.pk, 999_999]
    p = selectors.preview(ids_, action="replay")
    assert (p.total, p.will_act, p.skip_count) == (6, 2, 4)
    assert dict(p.by_type) == {"a": 2, "b": 3}
    assert p.previously_replayed == 3  # again, poison, in_flight
    assert p.poisoned == 1
    assert dict(p.skipped) == {
        "replayed 3 times already (poison limit)": 1,
        "an earlier replay is still pending": 1,
        "discarded": 1,
        "no such dead letter": 1,
    }
    allowed = selectors.preview(ids_, action="replay", allow_poisoned=True)
    assert allowed.will_act == 3
    discard = selectors.preview(ids_, action="discard")
    assert discard.will_act == 3 and discard.poisoned == 0
