"""What an index sees of the distributions: metadata twine accepts, a README that renders as
PyPI renders it, links that work from there, and claims that match what CI runs."""

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is needed to build the distributions (`pip install uv`)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([uv, "build", "--out-dir", out], cwd=BASE_DIR, check=True, capture_output=True)
    return out


def metadata(dist: Path):
    (wheel,) = dist.glob("redrive-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode()), archive.namelist()


def test_twine_accepts_the_wheel_and_the_sdist_and_renders_the_readme(dist):
    built = sorted(dist.glob("redrive-*"))
    assert {p.suffix for p in built} == {".whl", ".gz"}
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *built],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_the_metadata_names_the_project_its_links_and_its_status(dist):
    meta, names = metadata(dist)
    urls = dict(value.split(", ", 1) for value in meta.get_all("Project-URL"))
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())
    classifiers = meta.get_all("Classifier")
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert "Typing :: Typed" in classifiers
    # PEP 561: the type hints are read from the installed packages only with these markers.
    assert {"jobqueue/py.typed", "deadletters/py.typed"} <= set(names)


def test_the_python_and_django_versions_claimed_are_the_ones_required():
    project = tomllib.loads((BASE_DIR / "pyproject.toml").read_text())["project"]
    floor = re.fullmatch(r">=3\.(\d+)", project["requires-python"]).group(1)
    pythons = sorted(
        int(c.rsplit(".", 1)[1])
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    # Every minor version from the floor up to the newest claimed, none skipped; CI runs the
    # floor at the lowest dependency versions (.ci/run) and the newest with the lock.
    assert pythons == list(range(int(floor), pythons[-1] + 1))
    # The suite runs on each Python it claims (and, run here, on this one: it must be claimed).
    assert sys.version_info[1] in pythons, f"Python 3.{sys.version_info[1]} is not claimed"
    django = next(d for d in project["dependencies"] if re.match(r"django[<>=]", d))
    low, high = re.fullmatch(r"django>=(6\.\d+),<(6\.\d+)", django).groups()
    claimed = [c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if "Django :: 6." in c]
    assert claimed == [low] and float(high) == round(float(low) + 0.1, 1)


def test_ci_runs_the_floor_python():
    script = (BASE_DIR / ".ci" / "run").read_text()
    project = tomllib.loads((BASE_DIR / "pyproject.toml").read_text())["project"]
    floor = project["requires-python"].removeprefix(">=")
    assert "^" + floor.replace(".", "\\.") + "(" in script
    assert '--python "$FLOOR_PYTHON"' in script
