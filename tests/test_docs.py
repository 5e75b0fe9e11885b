"""The README's screenshots are written by the browser tests, so none goes stale unnoticed."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_readme_screenshot_is_written_by_a_browser_test():
    shown = set(re.findall(r"\]\(docs/([\w-]+)\.png\)", (ROOT / "README.md").read_text()))
    written = set()
    for test in (ROOT / "tests" / "browser").glob("test_*.py"):
        written |= set(re.findall(r'readme_screenshot\("([\w-]+)"\)', test.read_text()))
    assert shown, "the README shows no screenshot"
    assert shown <= written, f"no browser test writes {sorted(shown - written)}"
