"""The bridge with a real `manage.py qcluster` on the ORM broker, against the test database."""

import os
import re
import signal
import subprocess
import sys

import pytest
from django.test import Client
from django_q.models import Success
from django_q.tasks import async_task

from deadletters.models import ReplayItem, ReplayRun
from jobqueue.models import DeadLetter
from tests.conftest import BASE_DIR, database_url, wait_until
from tests.deadletters.conftest import user_with_role

pytestmark = pytest.mark.slow


class Cluster:
    """One qcluster process in its own session, so its sentinel, workers and monitor go with
    it: SIGTERM first, SIGKILL to its process group if it does not stop."""

    def __init__(self, tmp_path):
        from django.db import connection

        self.sink = tmp_path / "runs.log"
        self.log = tmp_path / "qcluster.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(connection),
            "REDRIVE_SOURCES": "jobqueue,django_q2",
            "REDRIVE_Q_WORKERS": "1",
            "REDRIVE_Q_MAX_ATTEMPTS": "3",
            "REDRIVE_Q_RETRY": "2",  # a failed task is redelivered 2 s after it was taken
            "REDRIVE_Q_TIMEOUT": "1",
            "REDRIVE_Q_POLL": "0.1",
            "REDRIVE_TEST_SINK": str(self.sink),
            "PYTHONUNBUFFERED": "1",
        }
        self.proc = None

    def start(self):
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=BASE_DIR,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def runs(self):
        return self.sink.read_text().splitlines() if self.sink.exists() else []

    def stop(self):
        if self.proc is None:
            return
        pgid = self.proc.pid  # its own session: the group id is its pid
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(pgid, signal.SIGKILL)
                self.proc.wait()
        try:  # children left behind by the cluster (none expected)
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        return False


@pytest.fixture
def cluster(tmp_path, transactional_db):
    c = Cluster(tmp_path)
    yield c
    c.stop()


def test_terminal_failures_appear_once_replay_runs_once_and_the_audit_shows_it(cluster, tmp_path):
    fixed = tmp_path / "receipt-api-fixed"
    marker = tmp_path / "fails-once"
    dying = async_task("tests.q2bridge.tasks.fails_until_fixed", 41, str(fixed))
    recovering = async_task("tests.q2bridge.tasks.fails_once", str(marker))
    cluster.start()

    letter = wait_until(
        lambda: DeadLetter.objects.filter(source="django_q2").first(),
        timeout=40,
        message="the dead letter of the task that always fails",
    )
    wait_until(
        lambda: Success.objects.filter(id=recovering).exists(),
        timeout=40,
        message="the task that fails once to succeed",
    )
    assert cluster.runs().count("fails_until_fixed 41") == 3
    assert cluster.runs().count(f"fails_once {marker}") == 2
    assert (letter.idempotency_key, letter.attempts, letter.state) == (dying, 3, "pending")
    assert letter.task_path == "tests.q2bridge.tasks.fails_until_fixed"
    assert letter.error_class == "tests.q2bridge.tasks.ReceiptDown"
    assert letter.args == [41, str(fixed)]

    operator = user_with_role("operator")
    client = Client()
    client.force_login(operator)
    listing = client.get("/deadletters/list/", {"source": "django_q2"}).content.decode()
    assert listing.count(f'name="ids" value="{letter.pk}"') == 1
    assert "fails_once" not in listing
    assert DeadLetter.objects.count() == 1

    # The operator fixes the fault and replays from the console: preview, then confirm.
    fixed.write_text("fixed\n")
    response = client.post("/deadletters/preview/", {"action": "replay", "ids": [letter.pk]})
    response = client.post(response.url, {"reason": "receipt API fixed"})
    run = ReplayRun.objects.get()
    assert response.url == f"/deadletters/runs/{run.pk}/"
    item = ReplayItem.objects.get(run=run)
    assert item.outcome == "replayed" and item.external_id

    wait_until(
        lambda: DeadLetter.objects.filter(pk=letter.pk, state="replayed").exists(),
        timeout=30,
        message="the replay's success to reach the dead letter",
    )
    assert Success.objects.filter(id=item.external_id).exists()
    assert cluster.runs().count("fails_until_fixed 41") == 4  # the replay ran once
    page = client.get(response.url).content.decode()
    assert re.search(
        rf'<code class="external-id">{item.external_id}</code> '
        r'\(<span class="external-outcome">done</span>\)',
        page,
    )
    assert cluster.stop(), "qcluster left processes behind"
    assert cluster.proc.returncode is not None
