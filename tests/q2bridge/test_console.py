"""The console shows where a dead letter came from and filters by it."""

import pytest

from tests.deadletters.conftest import logged_in, user_with_role
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def client():
    return logged_in(user_with_role("operator"))


def q2_letter(**extra):
    fields = {
        "source": "django_q2",
        "job": None,
        "original_job_id": None,
        "task_path": "demo.q2tasks.sync_ledger",
        "idempotency_key": "0f3c9a0e5b6d4e0c9b1a2d3e4f5a6b7c",
    }
    return DeadLetterFactory(**{**fields, **extra})


def ids_in(html):
    return {int(part.split('"')[0]) for part in html.split('name="ids" value="')[1:]}


def test_list_shows_and_filters_the_source(client):
    ours, theirs = DeadLetterFactory(), q2_letter()
    html = client.get("/deadletters/list/").content.decode()
    assert ids_in(html) == {ours.pk, theirs.pk}
    assert '<td class="source">django_q2</td>' in html
    html = client.get("/deadletters/list/", {"source": "django_q2"}).content.decode()
    assert ids_in(html) == {theirs.pk}
    html = client.get("/deadletters/list/", {"source": "jobqueue"}).content.decode()
    assert ids_in(html) == {ours.pk}


def test_overview_names_the_source_of_each_job_type(client):
    DeadLetterFactory()
    q2_letter()
    html = client.get("/deadletters/").content.decode()
    assert '<td class="source">django_q2</td>' in html
    assert '<td class="source">jobqueue</td>' in html


def test_detail_marks_arguments_shown_as_summaries(client):
    summary = {"$not_json": "decimal.Decimal", "summary": "Decimal('9.50')"}
    letter = q2_letter(args=[7, summary])
    html = client.get(f"/deadletters/{letter.pk}/").content.decode()
    assert "shown as <code>$not_json</code> summaries" in html
    assert "decimal.Decimal" in html
    # An operator cannot open django-q2's admin: the task id is shown, not linked.
    assert letter.idempotency_key in html and "q2-failure" not in html
    plain = q2_letter(idempotency_key="1" * 32, args=[7])
    html = client.get(f"/deadletters/{plain.pk}/").content.decode()
    assert "$not_json" not in html


def test_only_users_who_can_open_django_q2s_admin_get_the_link(admin_user):
    from django.contrib.auth.models import Permission

    letter = q2_letter()
    failure = f"/admin/django_q/failure/{letter.idempotency_key}/change/"
    link = f'<a class="q2-failure" href="{failure}">'
    assert link in logged_in(admin_user).get(f"/deadletters/{letter.pk}/").content.decode()
    chief = user_with_role("admin", "chief")  # staff, but without django-q2's permission
    assert link not in logged_in(chief).get(f"/deadletters/{letter.pk}/").content.decode()
    chief.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_q", codename="view_failure")
    )
    chief = type(chief).objects.get(pk=chief.pk)  # a fresh permission cache
    assert link in logged_in(chief).get(f"/deadletters/{letter.pk}/").content.decode()
