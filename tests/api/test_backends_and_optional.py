"""The `backend` parameter reads and acts on that backend's queue database, as in the console;
and the console runs without the API's extra installed."""

import subprocess
import sys

import pytest

from jobqueue.models import Job, PausedQueue
from tests.conftest import BASE_DIR, SECOND_DATABASE
from tests.deadletters.conftest import user_with_role
from tests.factories import TWO_BACKENDS, DeadLetterFactory, JobB, JobFactory, LetterB

from .conftest import api_as

B = SECOND_DATABASE


@pytest.fixture
def two_backends(settings):
    settings.TASKS = TWO_BACKENDS


@pytest.mark.django_db(databases=["default", B])
def test_reads_and_actions_name_their_backend(two_backends):
    api = api_as(user_with_role("operator"))
    mine = DeadLetterFactory(task_path="app.a")
    theirs = LetterB(task_path="app.b")
    listed = api.get("letters", backend="b").json()
    assert (listed["backend"], [row["id"] for row in listed["letters"]]) == ("b", [theirs.pk])
    assert api.get(f"letters/{theirs.pk}", backend="b").json()["task_path"] == "app.b"
    assert api.get("letters").json()["letters"][0]["task_path"] == mine.task_path
    types = {(t["backend"], t["task_path"]) for t in api.get("letters/types").json()["types"]}
    assert types == {("default", "app.a"), ("b", "app.b")}
    JobB(queue_name="reports")
    JobFactory(queue_name="mail")
    response = api.post("actions/queue.pause", {"queue": "reports", "reason": "x", "backend": "b"})
    assert response.json()["changed"] is True, response.content
    assert PausedQueue.objects.using(B).filter(queue_name="reports").exists()
    assert not PausedQueue.objects.filter(queue_name="reports").exists()
    jobs = api.get("jobs", backend="b").json()["jobs"]
    assert [j["id"] for j in jobs] == list(
        Job.objects.using(B).order_by("-id").values_list("id", flat=True)
    )


def test_the_console_imports_and_serves_without_django_ninja():
    """With ninja unimportable, the apps load, the console's URLconf resolves and checks pass:
    only deadletters.api needs the extra."""
    script = (
        "import sys; sys.modules['ninja'] = None\n"
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        # A project that mounts the console and not the API.
        "settings.ROOT_URLCONF = 'tests.urls_console_only'\n"
        "from django.urls import resolve\n"
        "assert resolve('/ops/jobs/tokens/').url_name == 'tokens'\n"
        "import deadletters.urls, deadletters.views, deadletters.admin, deadletters.tokens\n"
        "from django.core.management import call_command\n"
        "call_command('check', 'deadletters')\n"
        # The API's own modules need it (its URLconf has a stand-in: deadletters.api_missing).
        "try:\n"
        "    import deadletters.api.endpoints\n"
        "except ImportError:\n"
        "    print('api needs ninja')\n"
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
    assert done.stdout.strip().splitlines()[-1] == "api needs ninja"
