"""The browser tests' pictures leave the checkout alone: the README's are rewritten in docs/
only when asked (REDRIVE_UPDATE_SCREENSHOTS=1), so a test run leaves a clean working tree."""

import pytest

from tests.browser import conftest

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("update", ["", "0", "1"])
def test_readme_screenshots_rewrite_docs_only_when_asked(
    page, request, monkeypatch, tmp_path, update
):
    docs = tmp_path / "docs"
    docs.mkdir()
    monkeypatch.setattr(conftest, "DOCS", docs)
    monkeypatch.setenv("REDRIVE_UPDATE_SCREENSHOTS", update)
    monkeypatch.delenv("REDRIVE_SCREENSHOT_DIR", raising=False)
    page.set_content("<h1>a page a test has just checked</h1>")
    request.getfixturevalue("readme_screenshot")("console")
    request.getfixturevalue("screenshot")("overview")
    assert sorted(p.name for p in docs.iterdir()) == (["console.png"] if update == "1" else [])
    written = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert written == (["overview.png"] if update == "1" else ["console.png", "overview.png"])


def test_screenshots_go_to_the_directory_asked_for(page, request, monkeypatch, tmp_path):
    kept = tmp_path / "kept" / "pictures"
    monkeypatch.setattr(conftest, "DOCS", tmp_path / "docs")
    monkeypatch.setenv("REDRIVE_SCREENSHOT_DIR", str(kept))
    monkeypatch.delenv("REDRIVE_UPDATE_SCREENSHOTS", raising=False)
    page.set_content("<h1>a page a test has just checked</h1>")
    request.getfixturevalue("screenshot")("overview")
    request.getfixturevalue("readme_screenshot")("console")
    assert sorted(p.name for p in kept.iterdir()) == ["console.png", "overview.png"]
    assert not (tmp_path / "docs").exists()
