"""What several browser tests check the same way."""

from functools import cache

from axe_playwright_python.sync_playwright import Axe


@cache
def _axe():
    return Axe()


def axe_violations(page) -> list[str]:
    """The page's serious and critical accessibility violations (axe-core), one line each."""
    return [
        f"{v['id']} ({v['impact']}) {[node['target'] for node in v['nodes']][:3]}"
        for v in _axe().run(page).response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
