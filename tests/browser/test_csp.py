"""Every page under the Content-Security-Policy: served with it, and nothing on them (our
scripts, htmx's polling and swaps, the admin) runs into it."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_console import login
from tests.factories import DeadLetterFactory, ReplayItemFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Chromium reports a violation both as this DOM event and as a console error; htmx reports an
# eval it was refused (an hx-trigger filter, hx-on) as a console error too.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(e.violatedDirective + " " + e.blockedURI);
});
"""


def test_no_page_violates_the_content_security_policy(page, live_server, settings):
    settings.REDRIVE = {**settings.REDRIVE, "OVERVIEW_POLL_SECONDS": 1}
    letter = DeadLetterFactory(kwargs={"access_token": "tok-123", "note": "hello"})
    run = ReplayItemFactory().run
    page.add_init_script(RECORD_VIOLATIONS)
    problems, policies = [], {}

    def on_console(msg):
        # A 404 page's own status is reported as a console error; the favicon (linked by the
        # console's pages, /favicon.ico for the admin's) must not be one.
        if msg.type == "error" and not page.url.endswith("/999999/"):
            problems.append(f"{page.url}: {msg.text} {msg.location}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: problems.append(f"{page.url}: {exc}"))

    def record(response):
        if response.request.resource_type == "document":
            policies[response.url] = response.headers.get("content-security-policy")

    page.on("response", record)

    def check_page():
        page.wait_for_load_state("load")
        violations = page.evaluate("window.__violations")
        assert violations == [], f"{page.url}: {violations}"

    login(page, live_server, "admin")
    check_page()
    # The overview polls (htmx, every second): a poll must run, without eval.
    with page.expect_request(lambda r: r.headers.get("hx-request") == "true"):
        pass
    check_page()
    for path in (
        "/",
        "/deadletters/list/?state=pending",
        f"/deadletters/{letter.pk}/",
        f"/deadletters/runs/{run.pk}/",
        "/deadletters/audit/",
        "/deadletters/999999/",
        "/admin/",
        f"/admin/jobqueue/deadletter/{letter.pk}/change/",
        "/admin/jobqueue/auditentry/",
    ):
        page.goto(f"{live_server.url}{path}")
        check_page()
    # The list's select-all count arrives through htmx (hx-trigger="load").
    page.goto(f"{live_server.url}/deadletters/list/?state=pending")
    expect(page.locator(".select-all")).to_contain_text("Select all")
    check_page()
    page.goto(f"{live_server.url}/deadletters/{letter.pk}/")
    page.get_by_role("button", name="Reveal masked values", exact=True).click()
    expect(page.locator("pre.json")).to_contain_text("tok-123")
    check_page()
    page.click('button[value="replay"]')
    expect(page.locator("h1")).to_have_text("Replay 1 dead letter?")
    check_page()
    page.context.clear_cookies()
    page.goto(f"{live_server.url}/accounts/login/")
    check_page()

    assert problems == []
    icon = page.request.get(f"{live_server.url}/favicon.ico")  # follows the redirect
    assert icon.ok and icon.headers["content-type"].startswith("image/svg+xml")
    assert policies, "no document responses recorded"
    for url, policy in policies.items():
        assert policy, f"{url} has no Content-Security-Policy"
        script_src = re.search(r"script-src ([^;]*)", policy).group(1)
        assert script_src.split() == ["'self'"], f"{url}: {policy}"
        assert "unsafe" not in policy, f"{url}: {policy}"
