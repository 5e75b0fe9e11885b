"""The workflow pages in Chromium: an operator finds the demo's onboardings, opens the one
whose card was refused (dead at its first step, the letter linked), and a sleeping one with its
wake-up time; the contacts import shows its batch's progress and its bad rows' letters."""

import re

import pytest
from playwright.sync_api import expect

from demo import onboarding
from jobqueue.models import DeadLetter
from tests.browser.test_console import login
from tests.jobqueue.test_worker import burst

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_reads_a_dead_and_a_sleeping_onboarding_and_a_batch(
    page, live_server, readme_screenshot
):
    *customers, contacts = onboarding.seed(customers=3)
    burst()
    login(page, live_server, "viewer")
    page.get_by_role("navigation").get_by_role("link", name="Workflows", exact=True).click()
    # The row is found by its id, never by a digit its timestamps might contain.
    row = page.locator(f'table.workflows tr[data-workflow-id="{customers[-1]}"]')
    expect(row.locator("td")).to_have_count(8)
    expect(row.locator("td").nth(2)).to_have_text("dead")
    expect(row.locator("td").nth(3)).to_have_text("charge_card")

    page.goto(f"{live_server.url}/deadletters/workflows/{customers[-1]}/")
    expect(page.locator("main")).to_contain_text("refuses payment method 'tok_expired'")
    letter = DeadLetter.objects.get(original_job_id=customers[-1])
    page.click(f"a[href$='/deadletters/{letter.pk}/']")
    expect(page).to_have_url(re.compile(rf"/deadletters/{letter.pk}/$"))

    page.goto(f"{live_server.url}/deadletters/workflows/{customers[0]}/")
    expect(page.locator("h1 .state")).to_have_text("sleeping")
    expect(page.locator("ol.steps > li h3 code")).to_have_text(
        ["charge_card", "provision_account", "send_welcome_email", "setup_grace"]
    )
    readme_screenshot("workflow")

    page.goto(f"{live_server.url}/deadletters/workflows/{contacts}/")
    progress = page.locator('ol.steps dt:text-is("Progress") + dd')
    expect(progress).to_have_text(re.compile(r"^14 done, 6 failed of 20; next item 20$"))
    buried = DeadLetter.objects.filter(task_path="demo.onboarding.import_contact")
    assert buried.count() == 6
    links = page.locator("ul.letters-of-batch a")
    expect(links).to_have_count(6)
    hrefs = {links.nth(i).get_attribute("href") for i in range(6)}
    assert hrefs == {f"/deadletters/{item.pk}/" for item in buried}
