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
    page.click("nav >> text=Workflows")
    table = page.locator("table.workflows")
    expect(table.locator("tr", has_text=f"{customers[-1]}")).to_contain_text("charge_card")

    page.goto(f"{live_server.url}/deadletters/workflows/{customers[-1]}/")
    expect(page.locator("main")).to_contain_text("refuses payment method 'tok_expired'")
    letter = DeadLetter.objects.get(original_job_id=customers[-1])
    page.click(f"a[href$='/deadletters/{letter.pk}/']")
    expect(page).to_have_url(re.compile(rf"/deadletters/{letter.pk}/$"))

    page.goto(f"{live_server.url}/deadletters/workflows/{customers[0]}/")
    main = page.locator("main")
    for name in ("charge_card", "provision_account", "send_welcome_email", "setup_grace"):
        expect(main).to_contain_text(name)
    expect(main).to_contain_text("sleeping")
    readme_screenshot("workflow")

    page.goto(f"{live_server.url}/deadletters/workflows/{contacts}/")
    main = page.locator("main")
    expect(main).to_contain_text("14")  # done of 20
    buried = DeadLetter.objects.filter(task_path="demo.onboarding.import_contact")
    assert buried.count() == 6
    for item in buried:
        expect(page.locator(f"a[href$='/deadletters/{item.pk}/']").first).to_be_visible()
