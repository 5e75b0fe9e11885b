"""Search in error text and payload values (deadletters/search.py): the list's `q`, a filter
like any other (in the URL, under count, select-all and bulk actions), on both databases."""

import pytest
from django.db import connection
from django.urls import reverse

from deadletters import search, selectors
from deadletters.forms import FilterForm
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db

LIST = reverse("deadletters:list")


@pytest.fixture
def letters():
    return {
        "smtp": DeadLetterFactory(last_error="SMTP 421 service not available", args=[1]),
        "email": DeadLetterFactory(
            last_error="bounced", kwargs={"to": "ann@example.com", "order_id": 4242}
        ),
        "nested": DeadLetterFactory(
            last_error="refused", args=[{"customer": {"name": "Grace Hopper"}}]
        ),
        "other": DeadLetterFactory(last_error="card declined", kwargs={"to": "bob@example.org"}),
    }


def found(text, *, payload=True, **extra) -> set[int]:
    form = FilterForm({"q": text, **extra})
    return set(selectors.matching_ids(form.to_filter(payload_search=payload)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("smtp", {"smtp"}),
        ("SMTP 421", {"smtp"}),  # every word, any case
        ("ann@example.com", {"email"}),  # a payload string value
        ("4242", {"email"}),  # a payload number
        ("hopper", {"nested"}),  # at any depth
        ("declined", {"other"}),
        ("smtp declined", set()),  # words are ANDed
    ],
)
def test_search_finds_error_words_and_payload_values(letters, text, expected):
    assert found(text) == {letters[name].pk for name in expected}


def test_search_combines_with_other_filters(letters):
    DeadLetterFactory(task_path="shop.other", last_error="SMTP 421 again")
    assert found("smtp", job_type=letters["smtp"].task_path) == {letters["smtp"].pk}


@pytest.mark.parametrize(
    "text", ['"unclosed', "a & b | !c", "(((", "-", "'; DROP TABLE x; --", "ünïcødé 🚀", "\\"]
)
def test_any_search_text_is_answered_not_a_500(viewer_client, letters, text):
    response = viewer_client.get(LIST, {"q": text})
    assert response.status_code == 200


def test_without_the_reveal_permission_a_search_reads_only_error_text(letters):
    # A match on a payload value would tell which letters hold a masked one.
    assert found("ann@example.com", payload=False) == set()
    assert found("hopper", payload=False) == set()
    assert found("smtp", payload=False) == {letters["smtp"].pk}


def test_the_list_searches_payloads_for_those_who_may_see_them(
    viewer_client, admin_client_, letters
):
    masked = DeadLetterFactory(last_error="login failed", kwargs={"password": "hunter2"})
    as_viewer = viewer_client.get(LIST, {"q": "hunter2"})
    assert as_viewer.status_code == 200 and list(as_viewer.context["page"].rows) == []
    as_admin = admin_client_.get(LIST, {"q": "hunter2"})
    assert [row.pk for row in as_admin.context["page"].rows] == [masked.pk]
    assert ("q", "hunter2") in as_admin.context["echo"]


@pytest.mark.parametrize(
    ("url", "viewer_label", "admin_label"),
    [
        (LIST, "Search error text", "Search error and payload"),
        (reverse("deadletters:jobs"), "Text in errors", "Text in arguments or errors"),
    ],
)
def test_the_search_box_names_what_it_searches_for_each_user(
    viewer_client, admin_client_, url, viewer_label, admin_label
):
    """A viewer who sees a payload value masked is told the box reads error text only, so a
    search for what the letter page shows finds nothing without a word."""
    for client, label in ((viewer_client, viewer_label), (admin_client_, admin_label)):
        form = client.get(url).context["form"]
        assert form["q"].label == label
        page = client.get(url).content.decode()
        assert f"<label>{label} <input" in page


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    ("payload", "index"),
    [(True, "jobqueue_dl_search_idx"), (False, "jobqueue_dl_error_search_idx")],
)
def test_postgresql_answers_a_search_from_its_index(letters, payload, index):
    qs = selectors.filtered(FilterForm({"q": "hopper"}).to_filter(payload_search=payload))
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            plan = qs.explain()
        finally:
            cursor.execute("RESET enable_seqscan")
    assert index in plan


@pytest.mark.skipif("connection.vendor == 'postgresql'")
def test_sqlite_searches_only_the_newest_letters_it_is_bounded_to(letters, monkeypatch):
    assert search.bounded()
    newest = DeadLetterFactory(last_error="SMTP 421 once more")
    monkeypatch.setattr(search, "SQLITE_SCAN", 2)
    assert found("smtp") == {newest.pk}


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_rare_and_a_common_search_find_the_same_letters(letters, monkeypatch):
    rare = {text: found(text) for text in ("smtp", "4242", "hopper", "example")}
    monkeypatch.setattr(search, "RARE", 0)  # every search counts as common: the other plan
    assert {text: found(text) for text in rare} == rare
    assert rare["smtp"] == {letters["smtp"].pk}


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize("payload", [True, False])
def test_postgresql_tells_a_common_word_from_a_rare_one(monkeypatch, payload):
    """The choice between the two plans costs a plan, not a read of the index: a word in every
    letter is common by ANALYZE's most common words, one in a single letter is rare."""
    DeadLetterFactory.create_batch(300, last_error="upstream answered 503", kwargs={"n": 1})
    DeadLetterFactory(last_error="upstream answered 418 teapot", kwargs={"n": 2})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobqueue_deadletter")
    monkeypatch.setattr(search, "RARE", 50)
    sql = search.PG_MATCH if payload else search.PG_ERROR_MATCH
    assert search._few_matches(sql, "teapot", "default")
    assert not search._few_matches(sql, "503", "default")
    assert not search._few_matches(sql, "upstream answered", "default")
    assert len(found("503", payload=payload)) == 300
    assert len(found("teapot", payload=payload)) == 1


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_stored_vectors_follow_an_edit_of_the_letter():
    """Generated by the database: an update of the error text or payload is searchable at once,
    with no code of ours keeping the vectors."""
    letter = DeadLetterFactory(last_error="first words", kwargs={"to": "ann@example.com"})
    assert found("first") == {letter.pk}
    type(letter).objects.filter(pk=letter.pk).update(
        last_error="second words", kwargs={"to": "zoe@example.com"}
    )
    assert found("first") == set() and found("second") == {letter.pk}
    assert found("zoe@example.com") == {letter.pk} and found("ann@example.com") == set()
