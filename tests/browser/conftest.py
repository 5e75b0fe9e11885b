import os
import shutil
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; Django's ORM calls from the test
# body are still synchronous and safe here.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        # .ci/run installs it and sets REDRIVE_REQUIRE_BROWSER=1, so there a missing browser fails.
        message = "browser tests need Debian's Chromium: apt-get install chromium"
        if os.environ.get("REDRIVE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def screenshot_dir(tmp_path) -> Path:
    """Where a test's pictures go: its temporary directory, or REDRIVE_SCREENSHOT_DIR when set
    (to keep them, e.g. as CI artifacts). Never the checkout: a test run leaves it clean."""
    chosen = os.environ.get("REDRIVE_SCREENSHOT_DIR")
    if not chosen:
        return tmp_path
    Path(chosen).mkdir(parents=True, exist_ok=True)
    return Path(chosen)


@pytest.fixture
def screenshot(page, screenshot_dir):
    def take(name):
        page.screenshot(path=str(screenshot_dir / f"{name}.png"), full_page=True)

    return take


@pytest.fixture
def readme_screenshot(page, screenshot_dir):
    """The README's pictures, taken of the page a test has just checked, so they show the
    console as it is (tests/test_docs.py checks each has a test taking it). They rewrite
    docs/NAME.png only when asked (REDRIVE_UPDATE_SCREENSHOTS=1); otherwise they go with the
    test's other pictures."""
    target = DOCS if os.environ.get("REDRIVE_UPDATE_SCREENSHOTS") == "1" else screenshot_dir

    def take(name):
        page.screenshot(path=str(target / f"{name}.png"))

    return take


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
