import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from deadletters.models import ReplayRun
from deadletters.roles import assign
from jobqueue.models import DeadLetter
from tests.factories import DeadLetterFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def login(page, live_server, username):
    user = UserFactory(username=username)
    assign(user, username)
    page.goto(f"{live_server.url}/deadletters/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.fill('input[name="username"]', username)
    page.fill('input[name="password"]', "pw-for-tests")
    page.click('button[type="submit"]')
    expect(page).to_have_url(f"{live_server.url}/deadletters/")


def test_operator_filters_selects_replays_and_finds_the_audit_entry(
    page, live_server, screenshot, readme_screenshot
):
    now = timezone.now()
    receipts = [
        DeadLetterFactory(
            task_path="shop.send_receipt",
            dead_lettered_at=now - timedelta(minutes=i),
            kwargs={"order": i, "card_number": "4111111111111111"},
        )
        for i in range(4)
    ]
    DeadLetterFactory.create_batch(2, task_path="shop.sync_stock", error_class="builtins.KeyError")
    login(page, live_server, "operator")

    expect(page.locator("#groups")).to_contain_text("shop.send_receipt")
    expect(page.locator("#groups svg.spark").first).to_be_visible()
    screenshot("overview")

    page.get_by_role("navigation").get_by_role("link", name="Dead letters", exact=True).click()
    page.fill('input[name="job_type"]', "shop.send_receipt")
    page.click('form.filters button[type="submit"]')
    expect(page).to_have_url(re.compile(r"job_type=shop.send_receipt"))
    rows = page.locator("table.letters tbody tr")
    expect(rows).to_have_count(4)
    expect(page.locator(".select-all")).to_contain_text("Select all 4 matching")
    screenshot("list")
    readme_screenshot("console")

    newest_two = receipts[:2]
    for letter in newest_two:
        page.check(f'input[name="ids"][value="{letter.pk}"]')
    page.click('button[value="replay"]')
    expect(page.locator("h1")).to_have_text("Replay 2 dead letters?")
    expect(page.locator(".will-act")).to_have_text("2")
    page.fill('textarea[name="reason"]', "receipt API is back")
    page.get_by_role("button", name="Confirm replay", exact=True).click()

    expect(page).to_have_url(re.compile(r"/deadletters/runs/\d+/"))
    progress = page.locator("#progress")
    expect(progress).to_contain_text("Finished")
    expect(progress.locator(".processed")).to_have_text("2")
    expect(progress.locator(".done")).to_have_text("2")
    page.get_by_role("link", name="See the audit log", exact=True).click()
    entry = page.locator("table.audit tbody tr").first
    expect(entry.locator("td.reason")).to_have_text("receipt API is back")
    expect(entry.locator("td").nth(2)).to_have_text("operator")  # the Operator column
    assert set(DeadLetter.objects.filter(state="replaying").values_list("pk", flat=True)) == {
        dl.pk for dl in newest_two
    }

    page.goto(f"{live_server.url}/deadletters/{newest_two[0].pk}/")
    expect(page.locator("pre.json")).to_contain_text("••••")
    expect(page.locator("pre.json")).not_to_contain_text("4111111111111111")
    details = page.locator("details").first
    expect(details.locator("pre")).to_be_hidden()
    details.locator("summary").click()
    expect(details.locator("pre")).to_be_visible()
    expect(page.locator("body")).to_contain_text("receipt API is back")
    screenshot("detail")


def test_background_run_shows_live_progress(page, live_server, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 2}
    letters = DeadLetterFactory.create_batch(5, task_path="shop.send_receipt")
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/deadletters/list/?job_type=shop.send_receipt")
    page.check(".select-page")
    for letter in letters:
        expect(page.locator(f'input[name="ids"][value="{letter.pk}"]')).to_be_checked()
    page.click('button[value="replay"]')
    page.fill('textarea[name="reason"]', "batch replay")
    page.get_by_role("button", name="Confirm replay", exact=True).click()
    progress = page.locator("#progress")
    expect(progress).to_contain_text("Queued")
    run = ReplayRun.objects.get()
    from deadletters import services

    # One batch happens while the page is open; the polling shows it without a reload.
    services.process_batch(run.pk, generation=run.generation)
    expect(progress.locator(".processed")).to_have_text("2")
    expect(progress).to_contain_text("Running")
    progress.get_by_role("button", name="Pause", exact=True).click()
    expect(progress).to_contain_text("Paused")
    progress.get_by_role("button", name="Resume", exact=True).click()
    expect(progress).to_contain_text("Running")
    services.carry_out(run.pk, run.generation + 1)
    expect(progress).to_contain_text("Finished")
    expect(progress.locator(".done")).to_have_text("5")


def test_run_page_ledger_follows_progress_and_settles_after_the_run(page, live_server, settings):
    """The ledger updates with the progress (one polled partial), and the jobs a finished run
    made stop reading "(pending)" once they ran, without a reload; then polling stops."""
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 2}
    settings.REDRIVE = {**settings.REDRIVE, "OVERVIEW_POLL_SECONDS": 1}
    letters = DeadLetterFactory.create_batch(4, task_path="shop.send_receipt")
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/deadletters/list/?job_type=shop.send_receipt")
    page.check(".select-page")
    page.click('button[value="replay"]')
    page.fill('textarea[name="reason"]', "ledger check")
    page.get_by_role("button", name="Confirm replay", exact=True).click()
    ledger = page.locator("table.ledger tbody tr")
    expect(ledger).to_have_text(["Nothing processed yet."])
    run = ReplayRun.objects.get()
    from deadletters import services
    from jobqueue.models import Job

    services.process_batch(run.pk, generation=run.generation)
    expect(page.locator("#progress .processed")).to_have_text("2")
    expect(ledger).to_have_count(2)  # in the same swap as the counts
    services.process_batch(run.pk, generation=run.generation)
    expect(page.locator("#progress")).to_contain_text("Finished")
    expect(ledger).to_have_count(4)
    expect(page.locator("td.new-job").first).to_contain_text("(pending)")
    Job.objects.filter(replayed_from__in=letters).update(state="done")
    expect(page.locator("td.new-job", has_text="(done)")).to_have_count(4)
    expect(page.locator("#live")).not_to_have_attribute("hx-trigger", re.compile("every"))


def test_viewer_sees_no_replay_button(page, live_server):
    letter = DeadLetterFactory()
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/deadletters/list/")
    expect(page.locator("table.letters tbody tr")).to_have_count(1)
    expect(page.locator('button[value="replay"]')).to_have_count(0)
    expect(page.locator('input[name="ids"]')).to_have_count(0)
    page.goto(f"{live_server.url}/deadletters/{letter.pk}/")
    expect(page.locator("h1")).to_have_text(re.compile(rf"^Dead letter #{letter.pk} "))
    expect(page.locator('button[value="replay"]')).to_have_count(0)


def test_script_in_an_error_does_not_run(page, live_server):
    attack = '<script>window.__pwned = true</script><img src=x onerror="window.__pwned = true">'
    letter = DeadLetterFactory(last_error=attack, kwargs={"note": attack})
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    login(page, live_server, "viewer")
    for path in ("/deadletters/list/", f"/deadletters/{letter.pk}/"):
        page.goto(f"{live_server.url}{path}")
        expect(page.locator("body")).to_contain_text("<script>window.__pwned = true</script>")
        assert page.evaluate("window.__pwned") is None
    assert dialogs == []


def test_overview_polling_stops_after_an_error(page, live_server, settings):
    settings.REDRIVE = {**settings.REDRIVE, "OVERVIEW_POLL_SECONDS": 1}
    DeadLetterFactory()
    login(page, live_server, "viewer")
    polls = []

    def fail_polls(route, request):
        if request.headers.get("hx-request"):
            polls.append(request.url)
            route.fulfill(status=500, body="boom")
        else:
            route.continue_()

    page.route(re.compile(r".*/deadletters/$"), fail_polls)
    expect(page.locator("#groups")).to_have_attribute("data-poll-failed", "true")
    expect(page.locator(".poll-error")).to_be_visible()
    assert len(polls) == 1
