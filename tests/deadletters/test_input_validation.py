"""One example per hostile input the console once answered with a 500 or misread (issue 11).

The console fuzz (test_console_refuses_any_input.py) makes such inputs for every view; these pin the
findings themselves, each with the refusal an operator sees.
"""

import re
from html.parser import HTMLParser

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from deadletters.forms import parse_id, parse_ids
from deadletters.models import ReplayRun, Selection
from tests.factories import DeadLetterFactory, ReplayRunFactory

from .conftest import messages_of

pytestmark = pytest.mark.django_db

LIST = reverse("deadletters:list")
COUNT = reverse("deadletters:count")
AUDIT = reverse("deadletters:audit")
PREVIEW = reverse("deadletters:preview")
CSRF = "csrfmiddlewaretoken"
MAX_ID = 2**63 - 1  # the largest bigint
DATE_ERROR = "Enter a date between 1900-01-01 and 9998-12-31."


class SelectionFormInputs(HTMLParser):
    """The inputs of the list's form#selection, as a browser would submit them."""

    def __init__(self):
        super().__init__()
        self.inside = False
        self.hidden: list[tuple[str, str]] = []
        self.checkboxes: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.inside = attrs.get("id") == "selection"
        # The test client does not check CSRF tokens: leave it out of what is compared.
        elif tag == "input" and self.inside and attrs.get("name") not in (None, CSRF):
            pair = (attrs["name"], attrs.get("value", ""))
            if attrs.get("type") == "hidden":
                self.hidden.append(pair)
            elif attrs.get("type") == "checkbox":
                self.checkboxes.append(pair)

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False


def selection_inputs(content: bytes) -> SelectionFormInputs:
    parser = SelectionFormInputs()
    parser.feed(content.decode())
    return parser


def post_pairs(client, url, pairs):
    """POST repeated fields in order, as a browser submits a form."""
    from urllib.parse import urlencode

    return client.post(url, urlencode(pairs), content_type="application/x-www-form-urlencoded")


# --- dates ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field, day", [("until", "9999-12-31"), ("since", "0001-01-01")])
def test_a_date_beyond_the_range_is_named_on_the_list_and_audit(viewer_client, field, day):
    # Was OverflowError in the date filter (the list's "To" field typed 9999-12-31).
    letter = DeadLetterFactory()
    for url in (LIST, AUDIT):
        response = viewer_client.get(url, {field: day})
        assert response.status_code == 200
        content = response.content.decode()
        assert "Ignored invalid filter" in content and f"<code>{field}</code>" in content
        assert DATE_ERROR in content
    listed = viewer_client.get(LIST, {field: day}).content.decode()
    assert f'href="/deadletters/{letter.pk}/"' in listed


def test_the_count_refuses_a_date_beyond_the_range(operator_client):
    response = operator_client.get(COUNT, {"until": "9999-12-31"})
    assert response.status_code == 400
    assert f"until: {DATE_ERROR}" in response.content.decode()


@pytest.mark.parametrize("day", ["9999-12-31", "0001-01-01", "garbage"])
def test_select_all_with_an_invalid_date_is_refused_and_freezes_nothing(operator_client, day):
    # Was OverflowError; ignoring the bad date would have frozen every letter instead.
    DeadLetterFactory.create_batch(2)
    response = operator_client.post(
        PREVIEW, {"action": "replay", "select_all": "1", "until": day}, follow=True
    )
    assert any(m.startswith("Nothing changed: until:") for m in messages_of(response))
    assert not Selection.objects.exists()


def test_the_edges_of_the_date_range_still_filter(viewer_client):
    letter = DeadLetterFactory()
    content = viewer_client.get(LIST, {"since": "1900-01-01", "until": "9998-12-31"}).content
    assert b"Ignored invalid filter" not in content
    assert f'href="/deadletters/{letter.pk}/"'.encode() in content


# --- integers: unicode digits and ids beyond bigint ------------------------------------------


def test_a_unicode_digit_is_not_a_run_page_cursor(viewer_client):
    # "²".isdigit() is True, int("²") raises: was a 500.
    run = ReplayRunFactory()
    response = viewer_client.get(reverse("deadletters:run", args=[run.pk]), {"after": "²"})
    assert response.status_code == 400
    assert "after:" in response.content.decode()
    assert viewer_client.get(reverse("deadletters:run", args=[run.pk])).status_code == 200


@pytest.mark.parametrize("before", ["²", "0", "-3", str(MAX_ID + 1)])
def test_an_invalid_audit_cursor_is_named_and_ignored(viewer_client, before):
    run = ReplayRunFactory(reason="still listed")
    response = viewer_client.get(AUDIT, {"before": before})
    content = response.content.decode()
    assert response.status_code == 200
    assert "<code>before</code>" in content and "still listed" in content
    assert ReplayRun.objects.get() == run


@pytest.mark.parametrize("pk", ["9" * 5000, str(MAX_ID + 1), "0"])
def test_a_path_id_beyond_bigint_is_a_404(operator_client, pk):
    # Found by the console fuzz: the run-control regex handed "9" * 5000 to int() (500).
    for path in (f"runs/{pk}/pause/", f"runs/{pk}/", f"{pk}/", f"selections/{pk}/"):
        response = operator_client.post(f"/deadletters/{path}")
        assert response.status_code == 404, path
    assert operator_client.get(f"/deadletters/runs/{pk}/").status_code == 404


@pytest.mark.parametrize("bad", ["²", "٣", "0", "-1", str(MAX_ID + 1), "9" * 30, "1.5", "1e3", ""])
def test_an_id_that_is_not_a_row_id_refuses_the_whole_preview(operator_client, bad):
    # "²" was a 500; 10**30 was frozen and broke the confirm page and its POST.
    letter = DeadLetterFactory()
    response = post_pairs(
        operator_client, PREVIEW, [("action", "replay"), ("ids", letter.pk), ("ids", bad)]
    )
    assert response.status_code == 302 and response["Location"] == LIST
    followed = operator_client.get(LIST)
    assert any("ids:" in m and "is not an id" in m for m in messages_of(followed))
    assert not Selection.objects.exists()


def test_the_largest_bigint_is_an_id_and_previews_as_missing(operator_client):
    response = operator_client.post(PREVIEW, {"action": "replay", "ids": [str(MAX_ID)]})
    selection = Selection.objects.get()
    assert selection.ids == [MAX_ID]
    page = operator_client.get(response["Location"])
    assert page.status_code == 200
    assert operator_client.post(response["Location"], {"reason": "x"}).status_code == 302


@pytest.mark.parametrize("back", ["0", "overview", "deadletters:list", "a.b", "/x\x00y", "//evil"])
def test_a_refused_preview_goes_back_only_to_a_path_here(operator_client, back):
    # Found by the console fuzz: redirect("0") looked "0" up as a view name (NoReverseMatch).
    response = operator_client.post(PREVIEW, {"action": "replay", "back": back})
    assert response.status_code == 302 and response["Location"] == LIST


# --- NUL bytes in text filters ---------------------------------------------------------------


@pytest.mark.parametrize("field", ["operator", "job_type"])
def test_a_nul_byte_in_an_audit_filter_is_named_not_sent_to_the_database(viewer_client, field):
    # PostgreSQL text cannot hold NUL: was a DataError there, silently matched nothing on SQLite.
    ReplayRunFactory(reason="unfiltered")
    response = viewer_client.get(AUDIT, {field: "a\x00b"})
    content = response.content.decode()
    assert response.status_code == 200
    assert f"<code>{field}</code>" in content and "Null characters are not allowed" in content
    assert "unfiltered" in content


@pytest.mark.parametrize("field", ["job_type", "queue", "error_class", "q"])
def test_a_nul_byte_in_a_list_filter_is_named_and_refused_by_count_and_select_all(
    operator_client, field
):
    DeadLetterFactory()
    listed = operator_client.get(LIST, {field: "a\x00b"}).content.decode()
    assert f"<code>{field}</code>" in listed
    assert "\x00" not in "".join(v for _, v in selection_inputs(listed.encode()).hidden)
    assert operator_client.get(COUNT, {field: "a\x00b"}).status_code == 400
    operator_client.post(PREVIEW, {"action": "discard", "select_all": "1", field: "a\x00b"})
    assert not Selection.objects.exists()


# --- /metrics --------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["é", "ünïcode", "tök€n", "s3cret-é"])
def test_metrics_refuses_a_non_ascii_bearer_token(settings, given):
    # Was TypeError from hmac.compare_digest on str with non-ASCII characters.
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": "s3cret"}
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {given}"})
    assert response.status_code == 401
    assert Client().get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


# --- the query echo into the selection form ---------------------------------------------------


def test_ids_in_the_list_url_never_join_the_ticked_selection(operator_client):
    # /deadletters/list/?job_type=A&ids=545 and ticking 544 froze [545, 544].
    ticked, foreign = DeadLetterFactory(task_path="A"), DeadLetterFactory(task_path="A")
    page = operator_client.get(f"{LIST}?job_type=A&ids={foreign.pk}")
    inputs = selection_inputs(page.content)
    assert ("ids", str(ticked.pk)) in inputs.checkboxes
    assert [name for name, _ in inputs.hidden] == ["job_type", "back"]
    post_pairs(operator_client, PREVIEW, [*inputs.hidden, ("ids", ticked.pk), ("action", "replay")])
    assert Selection.objects.get().ids == [ticked.pk]


def test_select_all_cannot_be_injected_through_the_list_url(operator_client):
    ticked = DeadLetterFactory(task_path="A")
    DeadLetterFactory.create_batch(3, task_path="A")
    page = operator_client.get(f"{LIST}?job_type=A&select_all=1&action=discard&x=1")
    inputs = selection_inputs(page.content)
    assert {name for name, _ in inputs.hidden} == {"job_type", "back"}
    # Nor through the links the page builds from its query: the pager and the count.
    hrefs = re.findall(r'(?:href|hx-get)="([^"]*\?[^"]*)"', page.content.decode())
    assert hrefs and not any(key in href for href in hrefs for key in ("select_all", "ids=", "x=1"))
    post_pairs(operator_client, PREVIEW, [*inputs.hidden, ("ids", ticked.pk), ("action", "replay")])
    selection = Selection.objects.get()
    assert selection.ids == [ticked.pk] and selection.filter == {}


def test_only_valid_filters_are_echoed_in_their_cleaned_form(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "PAGE_SIZE": 1}
    DeadLetterFactory.create_batch(2, task_path="A")
    page = operator_client.get(LIST, {"job_type": " A ", "since": "garbage", "order": "oldest"})
    inputs = selection_inputs(page.content)
    assert inputs.hidden[:2] == [("job_type", "A"), ("order", "oldest")]
    next_link = re.search(r'rel="next" href="\?([^"]+)"', page.content.decode()).group(1)
    assert next_link.startswith("job_type=A&amp;order=oldest&amp;after=")


@pytest.mark.parametrize(
    "values",
    [
        ["1", "2,3"],  # a comma inside one: refused, not read as two ids
        ["4", ""],
        ["5", "0"],
        ["6", str(MAX_ID + 1)],
        ["7", "²"],
        ["8", True],
        ["9", 1.0],
        [" 10 ", 11, "0012"],
        [str(MAX_ID), 1],
    ],
)
def test_a_list_of_ids_is_parsed_as_each_id_alone(values):
    """parse_ids matches a whole list at once: it takes and refuses what parse_id does."""

    def one_by_one():
        return [parse_id(value) for value in values]

    try:
        expected = one_by_one()
    except ValidationError as exc:
        with pytest.raises(ValidationError) as refused:
            parse_ids(values)
        assert refused.value.messages == exc.messages
    else:
        assert parse_ids(values) == expected
