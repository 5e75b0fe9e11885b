"""Quiet and stop a running worker from outside (issue 32): real `runworker` processes, told
through jobqueue.store.workers.command, obey at their next heartbeat (the record refresh)."""

from pathlib import Path

import pytest

from jobqueue import store
from jobqueue.models import AuditEntry, Job, JobState, WorkerRecord
from tests import tasks
from tests.conftest import wait_until


def log_of(proc) -> str:
    return Path(proc.log_path).read_text()


def started_record():
    return wait_until(lambda: WorkerRecord.objects.first(), message="the worker's record")


def test_a_quiet_worker_finishes_what_it_holds_and_claims_nothing_more(workers, tmp_path):
    gate = tmp_path / "gate"
    holding = tasks.wait_for_file.enqueue(str(gate), key="held")
    proc = workers.start("--poll", "0.05", "--prefetch", "0")
    wait_until(lambda: Path(str(gate) + ".started").exists(), message="the held job's start")
    record = started_record()
    told = store.workers.command(
        "quiet", workers=[record.worker_id], actor="ana", reason="draining web-1", channel="cli"
    )
    assert told == [record.worker_id]
    wait_until(lambda: "event=worker_quieted" in log_of(proc), message="the worker quieted")
    later = tasks.noop.enqueue(1)  # after the quiet: no claim may take it
    gate.write_text("go")
    wait_until(
        lambda: Job.objects.get(pk=holding.id).state == JobState.DONE,
        message="the held job finished",
    )
    assert proc.poll() is None  # quiet is not stop: it stays, heartbeating
    first_beat = WorkerRecord.objects.get().last_heartbeat_at
    wait_until(
        lambda: WorkerRecord.objects.get().last_heartbeat_at > first_beat,
        timeout=20,
        message="a heartbeat after the quiet",
    )
    assert Job.objects.get(pk=later.id).state == JobState.READY
    entry = AuditEntry.objects.get(action="worker.quiet")
    assert (entry.actor, entry.channel, entry.targets, entry.reason) == (
        "ana",
        "cli",
        [record.worker_id],
        "draining web-1",
    )


def test_a_stopped_worker_drains_and_exits_at_its_next_heartbeat(workers):
    proc = workers.start("--poll", "0.05")
    record = started_record()
    store.workers.command(
        "stop", host=record.host, actor="ana", reason="host retired", channel="console"
    )
    assert proc.wait(timeout=30) == 0
    log = log_of(proc)
    assert "event=worker_stop_requested" in log and "event=worker_stopped" in log
    assert not WorkerRecord.objects.exists()  # a clean exit removes its record


@pytest.mark.django_db
def test_a_command_names_workers_or_a_host_and_a_stop_is_not_undone_by_a_quiet():
    from django.utils import timezone

    now = timezone.now()
    for n in (1, 2):
        WorkerRecord.objects.create(
            worker_id=f"web-1:{n}", host="web-1", pid=n, started_at=now, last_heartbeat_at=now
        )
    who = {"actor": "ana", "reason": "r"}
    with pytest.raises(ValueError, match="not both or neither"):
        store.workers.command("stop", **who)
    with pytest.raises(ValueError, match="quiet or stop"):
        store.workers.command("explode", host="web-1", **who)
    assert store.workers.command("stop", workers=["web-1:1"], **who) == ["web-1:1"]
    assert store.workers.command("quiet", host="web-1", **who) == ["web-1:2"]
    assert store.workers.command("quiet", host="web-1", **who) == []  # told already
    commands = dict(WorkerRecord.objects.values_list("worker_id", "command"))
    assert commands == {"web-1:1": "stop", "web-1:2": "quiet"}
    assert AuditEntry.objects.filter(action__startswith="worker.").count() == 2
