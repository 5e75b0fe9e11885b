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
