"""Issue 47: the README's API block, pasted as written, mounts the API; mounted without its
extra (django-ninja), `manage.py check` says so (redrive.E037) and the API answers 503 naming
the extra, rather than every command stopping on a bare ModuleNotFoundError."""

import re
import subprocess
import sys
import types

import pytest
from django.urls import clear_url_caches

from deadletters import api_missing, checks
from jobqueue.models import AuditEntry, JobState
from tests.conftest import BASE_DIR
from tests.deadletters.conftest import user_with_role
from tests.factories import JobFactory

# A fresh `django-admin startproject`'s urls.py, before the README's blocks are appended.
STARTPROJECT_URLS = """
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""


def readme_api_block() -> str:
    readme = (BASE_DIR / "README.md").read_text()
    section = readme[readme.index("## The API") :]
    (block,) = re.findall(
        r"```python\n(# urls\.py\n.*?)```", section[: section.index("\n## ", 3)], re.S
    )
    return block


@pytest.fixture
def pasted_urls(settings):
    """A URLconf module: a fresh project's urls.py with the README's API block appended."""
    module = types.ModuleType("pasted_urls")
    exec(STARTPROJECT_URLS + "\n" + readme_api_block(), module.__dict__)  # our README's code
    sys.modules[module.__name__] = module
    settings.ROOT_URLCONF = module.__name__
    clear_url_caches()
    yield module
    del sys.modules[module.__name__]
    clear_url_caches()


@pytest.mark.django_db
def test_the_readme_api_block_mounts_the_api_and_an_unchanged_pause_is_200(pasted_urls):
    """As the README's Answers say: a second pause of a paused queue is not a 409 but a 200
    saying nothing changed, with no second audit entry."""
    pytest.importorskip("ninja")
    from tests.api.conftest import api_as

    assert pasted_urls.urlpatterns[-1].pattern.describe().startswith("'api/'")
    api = api_as(user_with_role("operator"))
    assert api.get("health").status_code == 200
    JobFactory(queue_name="emails", state=JobState.READY)
    first = api.post("actions/queue.pause", {"queue": "emails", "reason": "outage"})
    again = api.post("actions/queue.pause", {"queue": "emails", "reason": "outage"})
    assert (first.status_code, first.json()["changed"]) == (200, True), first.content
    assert (again.status_code, again.json()["changed"]) == (200, False), again.content
    assert "nothing changed" in again.json()["message"]
    assert AuditEntry.objects.filter(action="queue.pause").count() == 1
    assert checks.api_extra() == []


def test_the_check_finds_the_stand_in_mounted_without_django_ninja(settings, monkeypatch):
    """In process, django-ninja being installed here: the stand-in mounted where the API's
    URLconf would be, and ninja reported missing."""
    import jobqueue.checks

    module = types.ModuleType("stand_in_urls")
    exec(
        "from django.urls import include, path\n"
        "urlpatterns = [path('ops/', include([path('api/', include('deadletters.api_missing'))]))]",
        module.__dict__,
    )
    monkeypatch.setitem(sys.modules, module.__name__, module)
    settings.ROOT_URLCONF = module.__name__
    clear_url_caches()
    assert checks.api_extra() == []  # django-ninja is installed here
    real = jobqueue.checks.installed
    monkeypatch.setattr(jobqueue.checks, "installed", lambda name: name != "ninja" and real(name))
    (found,) = checks.api_extra()
    assert found.id == "redrive.E037" and "pip install 'redrive[api]'" in found.hint
    settings.ROOT_URLCONF = "tests.urls_console_only"
    clear_url_caches()
    assert checks.api_extra() == []  # not mounted: nothing to say
    clear_url_caches()


def test_without_django_ninja_check_names_the_extra_and_the_api_answers_503():
    """The example project mounts the API (config/urls.py); with ninja unimportable its
    URLconf still loads, `check` fails on redrive.E037 alone, and a request is a 503."""
    script = (
        "import sys; sys.modules['ninja'] = None\n"
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "from django.core.management.base import SystemCheckError\n"
        "try:\n"
        "    call_command('check')\n"
        "except SystemCheckError as exc:\n"
        "    print('refused:', exc)\n"
        "from django.test import Client\n"
        "from django.test.utils import setup_test_environment\n"
        "setup_test_environment()\n"
        "r = Client().post('/api/actions/queue.pause', '{}', content_type='application/json')\n"
        "print('status', r.status_code, r.json()['detail'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        env={
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "SECRET_KEY": "x" * 60,
            "PATH": "/usr/bin:/bin",
        },
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ModuleNotFoundError" not in done.stdout + done.stderr
    refused = next(line for line in done.stdout.splitlines() if "redrive.E037" in line)
    assert "django-ninja" in refused
    assert re.findall(r"redrive\.[EW]\d+", done.stdout) == ["redrive.E037"], done.stdout
    assert f"status 503 {api_missing.MESSAGE}" in done.stdout
