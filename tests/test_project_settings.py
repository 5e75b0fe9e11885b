"""The example project's settings as its processes start with them."""

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

PROBE = (
    "import django, json, sys; django.setup(); from django.conf import settings; "
    "print(json.dumps(['django_q' in settings.INSTALLED_APPS, 'django_q' in sys.modules]))"
)


@pytest.mark.parametrize(
    ("sources", "loaded"),
    [("jobqueue,django_q2", True), ("jobqueue", False), ("jobqueue,sqs", False)],
)
def test_django_q2_is_loaded_only_while_its_bridge_is_a_source(sources, loaded):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "REDRIVE_SOURCES": sources}
    env.setdefault("SECRET_KEY", "x")
    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(probe.stdout) == [loaded, loaded], probe.stderr


# Environment variables the example project reads that Django or a library owns.
NOT_OURS = {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "DJANGO_SETTINGS_MODULE"}
READERS = {"get", "getenv", "setdefault", "_env", "_env_list", "_env_json"}


def _environment_names(tree) -> set[str]:
    """The first string argument of every environment read (os.environ.get, _env ...) and
    every os.environ["NAME"]."""
    import ast

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in READERS and node.args and isinstance(node.args[0], ast.Constant):
                names.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            names.add(node.slice.value)
    return names


def test_the_example_project_reads_one_environment_prefix():
    import ast

    found = set()
    for path in (settings.BASE_DIR / "config").glob("*.py"):
        found |= _environment_names(ast.parse(path.read_text()))
    assert {"REDRIVE_POOLER", "REDRIVE_LOG_LEVEL", "REDRIVE_MAX_ATTEMPTS"} <= found
    assert {name for name in found if not name.startswith("REDRIVE_")} <= NOT_OURS


def test_each_redrive_key_is_read_from_redrive_and_its_name():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "REDRIVE_MAX_ATTEMPTS": "7",
        "REDRIVE_REPLAY_QUEUE": "replays",
        "REDRIVE_RATE_LIMITS": '{"emails": 2}',
        "REDRIVE_REDACT_PATTERNS": "card,pin",
        "REDRIVE_LOG_LEVEL": "WARNING",
    }
    env.setdefault("SECRET_KEY", "x")
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; import config.settings as s; "
            "print(json.dumps([s.REDRIVE, s.LOGGING['loggers']['jobqueue']['level']]))",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    redrive, level = json.loads(probe.stdout)
    assert (redrive["MAX_ATTEMPTS"], redrive["REPLAY_QUEUE"]) == (7, "replays")
    assert (redrive["RATE_LIMITS"], redrive["REDACT_PATTERNS"]) == ({"emails": 2}, ["card", "pin"])
    assert level == "WARNING"
