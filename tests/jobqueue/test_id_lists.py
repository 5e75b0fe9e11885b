"""store.Among: a queryset filter on a list of ids, bound as one parameter on either database."""

import pytest

from jobqueue.models import DeadLetter
from jobqueue.store import Among
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db


def test_it_matches_exactly_the_ids_given():
    a, b, c = DeadLetterFactory.create_batch(3)
    rows = DeadLetter.objects.order_by("pk")
    assert list(rows.filter(Among([c.pk, a.pk, a.pk, 999_999]))) == [a, c]
    assert list(rows.filter(Among([str(b.pk)]))) == [b]  # as pk__in takes them
    assert list(rows.filter(Among(pk for pk in (b.pk,)))) == [b]
    assert list(rows.filter(Among([]))) == []
    assert list(rows.exclude(Among([a.pk]))) == [b, c]
    assert list(rows.filter(Among([a.pk, b.pk]), Among([b.pk, c.pk]))) == [b]


def test_it_filters_any_field_named():
    _, b = DeadLetterFactory.create_batch(2)
    rows = DeadLetter.objects.filter(Among([b.original_job_id], field="original_job_id"))
    assert list(rows) == [b]


def test_the_ids_are_one_parameter_however_many():
    _, params = DeadLetter.objects.filter(Among(range(1, 50_001))).query.sql_with_params()
    assert len(params) == 1
