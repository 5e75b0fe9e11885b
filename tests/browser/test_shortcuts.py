"""Keyboard shortcuts on the letters list and a letter's page (as Gmail and Oban Web have them):
j/k move between rows, x selects, r replays, / goes to the search, g then a letter goes to a
page, ? lists them all in an accessible dialog; none fires while typing in a field."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_console import login
from tests.browser.util import axe_violations
from tests.factories import DeadLetterFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1280, 390])
def test_the_letters_list_by_keyboard(page, live_server, width):
    letters = [DeadLetterFactory(task_path="shop.send_receipt") for _ in range(3)]
    newest_first = sorted(letters, key=lambda dl: dl.pk, reverse=True)
    login(page, live_server, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/deadletters/list/?state=pending")
    expect(page.locator(".select-all")).to_contain_text("Select all")
    rows = page.locator("table.letters tbody tr")

    page.keyboard.press("j")
    expect(rows.nth(0).locator("a").first).to_be_focused()
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("j")  # stays on the last row
    expect(rows.nth(2).locator("a").first).to_be_focused()
    page.keyboard.press("k")
    expect(rows.nth(1)).to_have_class(re.compile(r"\bcurrent\b"))
    page.keyboard.press("x")
    expect(rows.nth(1).locator('input[name="ids"]')).to_be_checked()
    expect(rows.nth(0).locator('input[name="ids"]')).not_to_be_checked()

    # "/" goes to the search; typing there types, it moves and selects nothing.
    page.keyboard.press("/")
    search = page.locator('form.filters input[name="q"]')
    expect(search).to_be_focused()
    page.keyboard.type("jxkr?")
    expect(search).to_have_value("jxkr?")
    expect(page.locator("dialog#shortcuts")).not_to_be_visible()
    assert page.locator('input[name="ids"]:checked').count() == 1
    search.fill("")
    page.keyboard.press("Escape")  # leaves the field
    expect(search).not_to_be_focused()

    # r replays the selection: the confirm page for the one ticked letter.
    page.keyboard.press("r")
    expect(page.locator("h1")).to_have_text("Replay 1 dead letter?")
    expect(page.locator("table.sample tbody tr")).to_have_count(1)
    expect(page.locator("table.sample tbody tr a").first).to_have_text(str(newest_first[1].pk))

    # g then a letter: another page.
    page.keyboard.press("g")
    page.keyboard.press("j")
    expect(page).to_have_url(re.compile(r"/deadletters/jobs/$"))
    page.keyboard.press("g")
    page.keyboard.press("l")
    expect(page).to_have_url(re.compile(r"/deadletters/list/\?state=pending$"))


@pytest.mark.parametrize("width", [1280, 390])
def test_the_help_dialog_lists_the_shortcuts_and_is_accessible(page, live_server, width):
    letter = DeadLetterFactory(task_path="shop.send_receipt")
    login(page, live_server, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/deadletters/{letter.pk}/")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_have_count(0)
    page.keyboard.press("?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Next / previous row")
    expect(dialog).to_contain_text("Go to Health")
    # While it is open, the page's keys do nothing.
    page.keyboard.press("r")
    expect(page).to_have_url(re.compile(rf"/deadletters/{letter.pk}/$"))
    assert axe_violations(page) == []
    page.keyboard.press("Escape")
    expect(dialog).not_to_be_visible()
    # The top bar's button opens it too, and closing gives the focus back to it.
    opener = page.get_by_role("button", name="Shortcuts")
    opener.click()
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).not_to_be_visible()
    expect(opener).to_be_focused()


def test_the_letter_page_by_keyboard(page, live_server):
    letter = DeadLetterFactory(task_path="shop.send_receipt", args=[1], kwargs={})
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/deadletters/{letter.pk}/")
    page.keyboard.press("r")
    expect(page.locator("h1")).to_have_text("Replay 1 dead letter?")
    page.go_back()
    expect(page.locator("h1")).to_contain_text(f"Dead letter #{letter.pk}")
    page.keyboard.press("u")
    expect(page).to_have_url(re.compile(r"/deadletters/list/\?job_type=shop.send_receipt"))
    page.go_back()
    page.keyboard.press("d")
    expect(page.locator("h1")).to_have_text("Discard 1 dead letter?")
