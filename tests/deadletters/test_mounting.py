"""The console renders in a host project that has no URL names of ours, at any prefix."""

import re

import pytest
from django.urls import reverse

from deadletters.models import ReplayRun
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def bare_host(settings):
    settings.ROOT_URLCONF = "tests.urls_console_only"
    settings.LOGIN_URL = "/accounts/login/"
    del settings.LOGOUT_URL


def test_every_page_renders_under_a_prefix_without_host_url_names(bare_host, operator_client):
    letter = DeadLetterFactory(task_path="shop.receipt")
    q2_letter = DeadLetterFactory(task_path="legacy.sync", source="django_q2")
    pages = ["", "list/", "list/count/", f"{letter.pk}/", f"{q2_letter.pk}/", "audit/", "health/"]
    for page in pages:
        response = operator_client.get(f"/ops/jobs/{page}")
        assert response.status_code == 200, page
        html = response.content.decode()
        assert "Log out" not in html
        assert 'href="/deadletters/' not in html and 'hx-get="/deadletters/' not in html
    assert "shop.receipt" in operator_client.get("/ops/jobs/list/").content.decode()
    # The q2 letter has no admin link to follow here, but still names its task.
    detail = operator_client.get(f"/ops/jobs/{q2_letter.pk}/").content.decode()
    assert q2_letter.idempotency_key in detail and "q2-failure" not in detail

    preview = operator_client.post("/ops/jobs/preview/", {"action": "replay", "ids": [letter.pk]})
    assert preview.status_code == 302 and preview["Location"].startswith("/ops/jobs/selections/")
    assert operator_client.get(preview["Location"]).status_code == 200
    done = operator_client.post(preview["Location"], {"reason": "API back"})
    run = ReplayRun.objects.get()
    assert done["Location"] == f"/ops/jobs/runs/{run.pk}/"
    assert "shop.receipt" in operator_client.get(done["Location"]).content.decode()


def test_anonymous_visitors_go_to_the_hosts_login_url(bare_host, client):
    response = client.get("/ops/jobs/list/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/ops/jobs/list/")


def test_the_example_project_offers_logout_and_links_health_inside_the_console(operator_client):
    html = operator_client.get(reverse("deadletters:overview")).content.decode()
    assert re.search(r'<form class="whoami" method="post" action="/accounts/logout/">', html)
    assert 'href="/deadletters/health/"' in html
