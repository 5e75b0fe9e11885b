"""The versions pyproject.toml declares are the ones uv.lock was resolved from.

The floors themselves are proven by .ci/run, which runs the suite in an environment of exactly
those versions (uv's lowest-direct resolution); this test catches a floor changed without
`uv lock`, which `uv run` would otherwise relock silently, on CI and on every machine.
"""

import shutil
import subprocess

import pytest

from tests.conftest import BASE_DIR


def test_uv_lock_matches_pyproject():
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is needed (`pip install uv`)")
    checked = subprocess.run(
        [uv, "lock", "--check", "--offline"], cwd=BASE_DIR, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
