"""A dead letter that holds its ordering key back says so, with how many jobs wait behind it."""

import pytest

from jobqueue import store
from jobqueue.models import DeadLetter
from tests.jobqueue.test_ordering import claim, fail, line

pytestmark = pytest.mark.django_db


def test_the_letter_page_says_how_many_jobs_a_blocking_letter_holds_back(operator_client):
    claim.jobs.clear()
    first = line("acct:<7>", 3)
    claim()
    fail(first[0])
    letter = DeadLetter.objects.get(job_id=first[0])
    page = operator_client.get(f"/deadletters/{letter.pk}/").content.decode()
    assert "blocking 2 jobs" in page and "acct:&lt;7&gt;" in page
    store.discard([letter.pk])
    page = operator_client.get(f"/deadletters/{letter.pk}/").content.decode()
    assert "blocks nothing now" in page
