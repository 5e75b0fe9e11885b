"""Deploy markers (issue 32): recorded by `manage.py deploy mark` for a pipeline, and by the
first worker that starts with a new code version (REDRIVE["VERSION"], else $REDRIVE_VERSION);
each audited as deploy.mark."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.db import IntegrityError
from django.utils import timezone

from jobqueue import store
from jobqueue.models import AuditEntry, Deploy
from jobqueue.worker import Worker
from tests.cli import row_counts, run
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db


def versions():
    return list(Deploy.objects.order_by("seq").values_list("seq", "version", "source"))


def test_the_command_records_a_marker_with_its_audit_entry():
    done = run("deploy", "mark", "--version", "2026.12.4", "--note", "receipts fix", "--by", "ci")
    assert done.code == 0, done
    deploy = Deploy.objects.get()
    assert (deploy.seq, deploy.version, deploy.note, deploy.source, deploy.recorded_by) == (
        1,
        "2026.12.4",
        "receipts fix",
        "command",
        "ci",
    )
    assert done.out.strip() == f"deploy 2026.12.4 marked at {deploy.at.isoformat()}"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.channel, entry.target_kind, entry.targets) == (
        "deploy.mark",
        "ci",
        "cli",
        "deploy",
        ["2026.12.4"],
    )
    assert entry.reason == "receipts fix" and entry.params == {"seq": 1, "source": "command"}
    assert list(store.audit.verify()) == []


def test_the_command_marks_a_redeploy_of_the_same_version_and_prints_json():
    run("deploy", "mark", "--version", "v1")
    done = run("deploy", "mark", "--version", "v1", "--json")
    assert done.code == 0 and done.err == ""
    marker = json.loads(done.out)
    assert marker["seq"] == 2 and marker["version"] == "v1" and marker["recorded_by"] == "deploy"
    assert marker["at"] == Deploy.objects.get(seq=2).at.isoformat()
    assert [v for _, v, _ in versions()] == ["v1", "v1"]


@pytest.mark.parametrize(
    "argv",
    [
        ["deploy", "mark"],
        ["deploy", "mark", "--version", ""],
        ["deploy", "mark", "--version", "   "],
        ["deploy", "mark", "--version", "x" * 101],
        ["deploy", "mark", "--version", "v1", "--by", ""],
        ["deploy", "mark", "--version", "v1", "--database", "nope"],
    ],
    ids=lambda argv: " ".join(argv)[:40],
)
def test_a_refused_mark_is_one_line_and_writes_nothing(argv):
    before = row_counts()
    refused = run(*argv)
    assert refused.refused_cleanly, refused
    assert row_counts() == before and not Deploy.objects.exists()


def test_the_list_prints_the_newest_first():
    now = timezone.now()
    store.deploys.mark("v1", actor="ci", at=now - timedelta(hours=2))
    store.deploys.mark("v2", actor="ci", note="fix", at=now)
    rows = json.loads(run("deploy", "list", "--json").out)
    assert [(r["seq"], r["version"], r["note"]) for r in rows] == [(2, "v2", "fix"), (1, "v1", "")]
    lines = run("deploy", "list").out.splitlines()
    assert lines[0] == f"#2 {now.isoformat()} v2 by ci (code) 'fix'"
    assert run("deploy", "list", "--limit", "1", "--json").out.count("version") == 1


def test_the_list_without_markers_says_how_to_make_one():
    assert "deploy mark --version" in run("deploy", "list").out
    assert run("deploy", "list", "--json").out == "[]\n"


# --- the worker's own marker ----------------------------------------------------------------


def test_the_code_version_is_the_setting(settings, monkeypatch):
    settings.REDRIVE = {}
    assert store.deploys.code_version() == ""
    settings.REDRIVE = {"VERSION": " 2026.12.4 "}
    assert store.deploys.code_version() == "2026.12.4"


def test_the_example_project_reads_it_from_redrive_version():
    probe = subprocess.run(
        [sys.executable, "-c", "import config.settings as s; print(s.REDRIVE['VERSION'])"],
        cwd=django_settings.BASE_DIR,
        env={**os.environ, "REDRIVE_VERSION": "build-7", "SECRET_KEY": "x"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert probe.stdout.strip() == "build-7", probe.stderr


def test_mark_if_new_records_only_a_version_other_than_the_newest():
    assert store.deploys.mark_if_new("v1", actor="w1") is not None
    assert store.deploys.mark_if_new("v1", actor="w2") is None
    assert store.deploys.mark_if_new("v2", actor="w3") is not None
    # A rollback to v1 is a deploy too: the newest marker is v2's.
    assert store.deploys.mark_if_new("v1", actor="w4") is not None
    assert versions() == [(1, "v1", "worker"), (2, "v2", "worker"), (3, "v1", "worker")]
    entry = AuditEntry.objects.order_by("-seq").first()
    assert (entry.action, entry.actor, entry.channel) == ("deploy.mark", "w4", "system")


def test_a_worker_that_lost_the_race_for_the_number_records_nothing(monkeypatch):
    """Two workers read the same newest marker; the one that writes second finds the number
    taken (the unique seq) and then the other's marker of its version: one marker in all."""
    real_latest = store.deploys.latest
    reads = []

    def stale_then_real(using="default"):
        reads.append(using)
        if len(reads) == 1:
            store.deploys.mark("v2", actor="the other worker", source="worker")  # wins the race
            return None  # what this worker read before the other wrote
        return real_latest(using)

    monkeypatch.setattr(store.deploys, "latest", stale_then_real)
    assert store.deploys.mark_if_new("v2", actor="this worker") is None
    assert versions() == [(1, "v2", "worker")]
    assert AuditEntry.objects.count() == 1


def test_the_number_is_unique():
    store.deploys.mark("v1", actor="ci")
    with pytest.raises(IntegrityError):
        Deploy.objects.create(
            seq=1, version="v2", at=timezone.now(), source="code", recorded_by="x"
        )


@pytest.mark.django_db(transaction=True)
def test_a_worker_started_twice_with_one_version_records_one_marker(settings):
    settings.REDRIVE = {"VERSION": "v1"}
    Worker(burst=True, poll_interval=0.05, worker_id="w-a").run()
    Worker(burst=True, poll_interval=0.05, worker_id="w-b").run()
    assert versions() == [(1, "v1", "worker")]
    assert Deploy.objects.get().recorded_by == "w-a"
    settings.REDRIVE = {"VERSION": "v2"}
    Worker(burst=True, poll_interval=0.05, worker_id="w-c").run()
    assert versions() == [(1, "v1", "worker"), (2, "v2", "worker")]
    assert AuditEntry.objects.filter(action="deploy.mark").count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_worker_without_a_version_records_none(settings):
    settings.REDRIVE = {}
    Worker(burst=True, poll_interval=0.05).run()
    assert not Deploy.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_marker_fails_still_runs(settings, caplog):
    settings.REDRIVE = {"VERSION": "x" * 101}  # longer than a marker holds
    assert Worker(burst=True, poll_interval=0.05).run() == 0
    assert not Deploy.objects.exists()
    assert "event=deploy_not_marked" in caplog.text


@pytest.mark.slow
def test_workers_started_at_once_with_a_new_version_record_one_marker(workers):
    """Real processes: four runworker processes started together with REDRIVE_VERSION=v9 (the
    example project's REDRIVE["VERSION"])."""
    store.deploys.mark("v8", actor="ci")
    env = {"REDRIVE_VERSION": "v9"}
    procs = [workers.start("--burst", "--poll", "0.05", env=env) for _ in range(4)]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    wait_until(lambda: Deploy.objects.filter(version="v9").exists(), message="the v9 marker")
    assert versions() == [(1, "v8", "code"), (2, "v9", "worker")]
    assert AuditEntry.objects.filter(action="deploy.mark").count() == 2
