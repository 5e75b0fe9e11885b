"""`manage.py demo` with the bridge on: a qcluster beside the workers, django-q2 dead letters on
the console, and nothing left running after Ctrl-C."""

import pytest

from deadletters.templatetags.console import ident
from tests.conftest import wait_until
from tests.demo.test_demo_command import demos, logged_in_opener

pytestmark = pytest.mark.slow


@pytest.fixture
def start_demo(tmp_path):
    with demos(tmp_path) as start:
        yield start


def test_demo_shows_django_q2_dead_letters_and_stops_its_cluster(tmp_path, monkeypatch, start_demo):
    monkeypatch.setenv("REDRIVE_SOURCES", "jobqueue,django_q2")
    monkeypatch.setenv("REDRIVE_Q_RETRY", "2")
    monkeypatch.setenv("REDRIVE_Q_TIMEOUT", "1")
    demo = start_demo("--outage", "600", "--fresh")
    try:
        assert "+ qcluster (django-q2 bridge on)" in demo.output()
        base = f"http://127.0.0.1:{demo.port}"
        opener = logged_in_opener(base, "operator", "demo-pass-1")

        def django_q2_list():
            return opener.open(f"{base}/deadletters/list/?source=django_q2").read().decode()

        wait_until(
            lambda: django_q2_list().count(str(ident("demo.q2tasks.sync_ledger"))) == 3,
            timeout=60,
            message="three ledger syncs dead-lettered by the bridge",
        )
    finally:
        code = demo.stop()
    assert code == 0, demo.output()
    assert "Q Cluster" in (tmp_path / "demo-workers.log").read_text()
    assert demo.left_running() == []
