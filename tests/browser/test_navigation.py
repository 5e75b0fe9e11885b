"""The top bar: the page one is on is marked (aria-current="page"), the brand goes where
signing in lands, and staff who may use the Django admin find a link to it."""

import re

import pytest
from playwright.sync_api import expect

from deadletters.roles import assign
from tests.browser.test_console import login
from tests.browser.util import axe_violations
from tests.factories import DeadLetterFactory, JobFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_current_page_is_marked_in_the_top_bar(page, live_server):
    letter = DeadLetterFactory()
    job = JobFactory()
    login(page, live_server, "operator")
    nav = page.get_by_role("navigation", name="Console")
    expected = {
        "/": "Health",
        "/deadletters/health/": "Health",
        "/deadletters/": "Overview",
        "/deadletters/jobs/": "Jobs",
        f"/deadletters/jobs/{job.pk}/": "Jobs",
        "/deadletters/workflows/": "Workflows",
        "/deadletters/schedules/": "Schedules",
        "/deadletters/list/?state=pending": "Dead letters",
        f"/deadletters/{letter.pk}/": "Dead letters",
        "/deadletters/audit/": "Audit log",
        "/deadletters/tokens/": "API tokens",
    }
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for path, name in expected.items():
            page.goto(f"{live_server.url}{path}")
            current = nav.locator('[aria-current="page"]')
            expect(current).to_have_count(1)
            expect(current).to_have_text(name)
        assert axe_violations(page) == []


def test_the_brand_links_where_signing_in_lands(page, live_server):
    user = UserFactory(username="operator")
    assign(user, "operator")
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill('input[name="username"]', "operator")
    page.fill('input[name="password"]', "pw-for-tests")
    page.click('button[type="submit"]')
    expect(page.locator(".topbar nav")).to_be_visible()
    landed = page.url
    brand = page.locator(".topbar .brand")
    page.goto(f"{live_server.url}/deadletters/jobs/")
    brand.click()
    expect(page).to_have_url(landed)


def test_staff_who_may_use_the_admin_find_a_link_to_it(page, live_server):
    login(page, live_server, "operator")
    admin_link = page.locator(".topbar").get_by_role("link", name="Admin")
    expect(admin_link).to_have_count(0)
    page.context.clear_cookies()
    staff = UserFactory(username="staffer", is_staff=True)
    assign(staff, "operator")
    page.goto(f"{live_server.url}/accounts/login/?next=/deadletters/")
    page.fill('input[name="username"]', "staffer")
    page.fill('input[name="password"]', "pw-for-tests")
    page.click('button[type="submit"]')
    expect(page).to_have_url(re.compile("/deadletters/$"))
    expect(admin_link).to_have_attribute("href", "/admin/")
    admin_link.click()
    expect(page).to_have_url(re.compile("/admin/$"))
