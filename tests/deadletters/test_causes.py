"""Dead letters grouped by cause (error fingerprint): the list of a job type shows its causes
with counts, first and last seen and a 24-hour trend; a cause is a filter like any other, in the
URL, and a selection made under it takes exactly its letters."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from deadletters import selectors, summaries
from deadletters.forms import FilterForm
from jobqueue import store
from jobqueue.models import DeadLetter, Job, JobState
from tests.factories import JobFactory

from .conftest import user_with_role

pytestmark = pytest.mark.django_db


def die(task_path: str, message: str, *, at=None) -> DeadLetter:
    """A job that dies through the store, as a worker's would: the letter is written there."""
    job = JobFactory(running=True, task_path=task_path)
    at = at or timezone.now()
    entry = store.error_entry(job, class_path="shop.Refused", message=message, traceback="", now=at)
    assert store.fail(job, entry, retry_at=None, now=at)
    return DeadLetter.objects.get(job=job)


@pytest.fixture
def letters():
    now = timezone.now()
    made = [
        die("shop.charge", f"order {n} not found", at=now - timedelta(hours=n)) for n in range(5)
    ]
    made += [die("shop.charge", f"card 'tok_{n}x' declined") for n in range(3)]
    made.append(die("shop.refund", "order 99 not found"))
    return made


def test_letters_of_one_cause_share_a_fingerprint(letters):
    orders = {letter.fingerprint for letter in letters[:5]}
    cards = {letter.fingerprint for letter in letters[5:8]}
    assert len(orders) == len(cards) == 1 and orders != cards
    assert all(len(letter.fingerprint) == 16 for letter in letters)


def test_a_job_type_lists_its_causes_with_counts_times_and_trend(letters):
    causes = summaries.causes("shop.charge")
    assert [(c.pending, c.error_class) for c in causes] == [
        (5, "shop.Refused"),
        (3, "shop.Refused"),
    ]
    orders = causes[0]
    assert orders.sample == "order 0 not found"  # the newest letter's message
    assert orders.first_seen == letters[4].dead_lettered_at
    assert orders.last_seen == letters[0].dead_lettered_at
    assert sum(orders.hourly) == 5 and orders.hourly[-1] >= 1
    # Replaying one takes it out of the pending count.
    store.replay([letters[0].pk])
    assert [c.pending for c in summaries.causes("shop.charge")] == [4, 3]


def test_the_cause_filter_is_in_the_url_and_scopes_the_list(client, letters):
    client.force_login(user_with_role("viewer"))
    fp = letters[0].fingerprint
    page = client.get(reverse("deadletters:list"), {"job_type": "shop.charge"})
    assert page.status_code == 200
    assert f"fingerprint={fp}" in page.content.decode()
    filtered = client.get(
        reverse("deadletters:list"), {"job_type": "shop.charge", "fingerprint": fp}
    )
    ids = {row.pk for row in filtered.context["page"].rows}
    assert ids == {letter.pk for letter in letters[:5]}
    assert ("fingerprint", fp) in filtered.context["echo"]


@pytest.mark.parametrize("bad", ["xyz", "0" * 17, "ABCDEFABCDEFABCD", "' OR 1=1 --", "\x00" * 16])
def test_a_bad_cause_is_named_and_ignored_not_a_500(client, letters, bad):
    client.force_login(user_with_role("viewer"))
    page = client.get(reverse("deadletters:list"), {"fingerprint": bad})
    assert page.status_code == 200
    assert "fingerprint" in page.context["form"].errors
    assert len(page.context["page"].rows) == len(letters)


def test_a_selection_under_a_cause_takes_exactly_its_letters(letters):
    fp = letters[5].fingerprint
    form = FilterForm({"job_type": "shop.charge", "fingerprint": fp})
    assert sorted(selectors.matching_ids(form.to_filter())) == sorted(x.pk for x in letters[5:8])
    assert Job.objects.filter(state=JobState.DEAD).count() == len(letters)


def test_the_letter_page_links_to_its_cause(client, letters):
    client.force_login(user_with_role("viewer"))
    page = client.get(reverse("deadletters:detail", args=[letters[0].pk]))
    assert f"fingerprint={letters[0].fingerprint}" in page.content.decode()


def test_the_pager_swaps_rows_without_reading_the_causes_again(client, letters):
    client.force_login(user_with_role("viewer"))
    query = {"job_type": "shop.charge"}
    assert "Pending by cause" in client.get(reverse("deadletters:list"), query).content.decode()
    rows = client.get(reverse("deadletters:list"), query, headers={"HX-Request": "true"})
    assert "causes" not in rows.context and "Pending by cause" not in rows.content.decode()
