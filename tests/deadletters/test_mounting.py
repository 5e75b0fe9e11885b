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
    ledger = operator_client.get(done["Location"]).content.decode()
    assert "shop.receipt" in ledger.replace("<wbr>", "")  # identifiers' break points


def test_anonymous_visitors_go_to_the_hosts_login_url(bare_host, client):
    response = client.get("/ops/jobs/list/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/ops/jobs/list/")


def test_the_example_project_offers_logout_and_links_health_inside_the_console(operator_client):
    html = operator_client.get(reverse("deadletters:overview")).content.decode()
    assert re.search(r'<form class="whoami" method="post" action="/accounts/logout/">', html)
    assert 'href="/deadletters/health/"' in html


@pytest.fixture
def host_without_admin(settings):
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "django.contrib.admin"]
    settings.ROOT_URLCONF = "tests.urls_without_admin"
    settings.LOGIN_URL = "login"
    settings.LOGOUT_URL = "logout"
    settings.LOGIN_REDIRECT_URL = "/accounts/profile/"  # Django's defaults
    settings.LOGOUT_REDIRECT_URL = None


def test_logging_out_without_the_admin_shows_the_consoles_page_and_leads_back_in(
    host_without_admin, operator, client
):
    client.force_login(operator)
    console = client.get("/ops/").content.decode()
    assert '<form class="whoami" method="post" action="/accounts/logout/">' in console
    page = client.post("/accounts/logout/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "deadletters/console.css" in html and "<h1>Logged out</h1>" in html
    assert "Django administration" not in html and "/admin/" not in html
    (again,) = re.findall(r'<a href="([^"]+)">Log in again</a>', html)
    assert again == "/ops/"
    to_sign_in = client.get(again)
    assert to_sign_in["Location"] == "/accounts/login/?next=/ops/"
    signed_in = client.post(
        to_sign_in["Location"], {"username": "operator", "password": "pw-for-tests"}
    )
    assert signed_in.status_code == 302 and signed_in["Location"] == "/ops/"


def test_the_example_project_signs_in_to_the_console_and_out_to_its_sign_in_page(operator, client):
    """Signing in at the sign-in page itself (no ?next=) lands in the console, on the page its
    brand links to (not on Django's default /accounts/profile/); logging out lands on the
    sign-in page."""
    signed_in = client.post(reverse("login"), {"username": "operator", "password": "pw-for-tests"})
    assert signed_in["Location"] == reverse("deadletters:health")
    brand = re.search(r'<a class="brand" href="([^"]+)"', client.get(signed_in["Location"]).text)
    assert brand[1] == signed_in["Location"]
    assert client.get(signed_in["Location"]).status_code == 200
    signed_out = client.post(reverse("logout"))
    assert signed_out["Location"] == reverse("login")
    assert 'name="password"' in client.get(signed_out["Location"]).content.decode()
