"""/metrics and `queuehealth` with several TASKS backends, each on its own queue database: every
backend's figures read from its own database, each labelled with its backend; with one backend,
labels and output as they always were.

The second database, `queues_b`, is added by tests/conftest.py; ids repeat across the two.
"""

import json
import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobqueue import store
from jobqueue.models import JobCounter, WorkerRecord
from tests.cli import run
from tests.conftest import SECOND_DATABASE
from tests.factories import TWO_BACKENDS, JobB, JobFactory, LetterB

B = SECOND_DATABASE
pytestmark = pytest.mark.django_db(databases=["default", B])

TOKEN = "s3cret"


@pytest.fixture
def two_backends(settings):
    settings.TASKS = TWO_BACKENDS
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": TOKEN}


@pytest.fixture
def one_backend(settings):
    settings.TASKS = {"default": TWO_BACKENDS["default"]}
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": TOKEN}


@pytest.fixture
def figures():
    """Default: 2 due a.task jobs, one alive worker, a success 3 minutes ago. B: 1 due a.task
    (same queue and task as default's, other figures), 3 due b.task, 4 dead letters, a lost
    worker and an alive one, a paused queue, a success a minute ago."""
    now = timezone.now()
    JobFactory.create_batch(2, task_path="a.task", run_after=now - timedelta(minutes=1))
    JobB(task_path="a.task", run_after=now - timedelta(minutes=1))
    JobB.create_batch(3, task_path="b.task", queue_name="mail", run_after=now)
    LetterB.create_batch(4, task_path="b.task", queue_name="mail")
    for using, worker, heartbeat in (
        ("default", "here", now),
        (B, "there", now),
        (B, "gone", now - timedelta(hours=1)),
    ):
        WorkerRecord.objects.using(using).create(
            worker_id=worker, host="h", pid=1, started_at=now, last_heartbeat_at=heartbeat
        )
    for using, minutes in (("default", 3), (B, 1)):
        JobCounter.objects.using(using).create(
            minute=(now - timedelta(minutes=minutes)).replace(second=0, microsecond=0),
            queue_name="default",
            task_path="a.task",
            succeeded=5 if using == B else 7,
            last_success_at=now - timedelta(minutes=minutes),
        )
    store.queues.pause("mail", actor="ana", reason="provider down", using=B)
    return now


def scrape(client) -> dict:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def samples(family, *labels) -> dict:
    return {tuple(s.labels[name] for name in labels): s.value for s in family.samples}


# --- /metrics -------------------------------------------------------------------------------


def test_metrics_label_every_figure_with_its_backend_each_read_from_its_database(
    two_backends, figures, client
):
    families = scrape(client)
    for name in (
        "redrive_jobs_ready",
        "redrive_dead_letters_pending",
        "redrive_job_attempts_last_5m",
        "redrive_queue_paused",
        "redrive_workers",
        "redrive_last_success_timestamp_seconds",
    ):
        assert families[name].samples, name
        assert all(s.labels.get("backend") in {"default", "b"} for s in families[name].samples)
    ready = samples(families["redrive_jobs_ready"], "backend", "queue", "task")
    assert ready == {
        ("default", "default", "a.task"): 2,
        ("b", "default", "a.task"): 1,
        ("b", "mail", "b.task"): 3,
    }
    letters = samples(families["redrive_dead_letters_pending"], "backend", "queue", "task")
    assert letters[("b", "mail", "b.task")] == 4
    assert letters.get(("default", "mail", "b.task"), 0) == 0
    attempts = samples(
        families["redrive_job_attempts_last_5m"], "backend", "queue", "task", "outcome"
    )
    assert attempts[("default", "default", "a.task", "succeeded")] == 7
    assert attempts[("b", "default", "a.task", "succeeded")] == 5
    paused = samples(families["redrive_queue_paused"], "backend", "queue")
    assert paused == {("b", "mail"): 1}
    workers = samples(families["redrive_workers"], "backend", "state")
    assert workers == {
        ("default", "alive"): 1,
        ("default", "lost"): 0,
        ("b", "alive"): 1,
        ("b", "lost"): 1,
    }
    last = samples(families["redrive_last_success_timestamp_seconds"], "backend")
    assert set(last) == {("default",), ("b",)}
    assert last[("b",)] - last[("default",)] == pytest.approx(120, abs=1)


def test_a_backend_whose_database_is_away_is_reported_down_and_the_others_still_are(
    two_backends, figures, client, monkeypatch, caplog
):
    from django.db import OperationalError

    from jobqueue import metrics

    real = metrics.snapshot

    def snapshot(*, now, using):
        if using == B:
            raise OperationalError("connection to server at 10.0.0.9 failed: timeout")
        return real(now=now, using=using)

    monkeypatch.setattr(metrics, "snapshot", snapshot)
    families = scrape(client)
    assert samples(families["redrive_backend_up"], "backend") == {("default",): 1, ("b",): 0}
    ready = samples(families["redrive_jobs_ready"], "backend", "queue", "task")
    assert ready == {("default", "default", "a.task"): 2}
    assert "event=metrics_backend_unreachable backend=b" in caplog.text


def test_metrics_of_one_backend_fail_as_a_whole_when_its_database_is_away(
    one_backend, client, monkeypatch
):
    from django.db import OperationalError

    from jobqueue import metrics

    def snapshot(*, now, using):
        raise OperationalError("the database is away")

    monkeypatch.setattr(metrics, "snapshot", snapshot)
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    # The scrape fails (Prometheus marks the target down), plainly: no traceback page.
    assert response.status_code == 503
    assert response.content == b"the queue database is unreachable\n"


def test_metrics_of_one_backend_carry_no_backend_label(one_backend, figures, client):
    families = scrape(client)
    ready = families["redrive_jobs_ready"].samples
    assert [(s.labels, s.value) for s in ready] == [({"queue": "default", "task": "a.task"}, 2)]
    assert all("backend" not in s.labels for f in families.values() for s in f.samples)
    assert not families["redrive_queue_paused"].samples  # B's pause is not this backend's


# --- queuehealth ----------------------------------------------------------------------------


def totals_line(out: str, backend: str | None = None) -> str:
    prefix = f"backend={backend} " if backend else ""
    [line] = [line for line in out.splitlines() if line.startswith(prefix) and " ready=" in line]
    return line


def test_queuehealth_reports_the_named_backends_database(two_backends, figures):
    result = run("queuehealth", "--backend", "b")
    assert result.code == 0, result
    line = totals_line(result.out, "b")
    assert " ready=4 " in line and " dead_letters=4 " in line and " lost_workers=1 " in line
    assert "mail/b.task: ready=3" in result.out and "mail: PAUSED by ana" in result.out
    assert "backend=default" not in result.out


def test_queuehealth_without_a_backend_reports_the_default_one_labelled(two_backends, figures):
    result = run("queuehealth")
    assert result.code == 0, result
    line = totals_line(result.out, "default")
    assert " ready=2 " in line and " dead_letters=0 " in line and " lost_workers=0 " in line
    assert "backend=b" not in result.out and "mail" not in result.out


def test_queuehealth_all_reports_every_backend_and_alerts_name_theirs(two_backends, figures):
    result = run("queuehealth", "--all", "--fail-if", "ready>3", "--fail-if", "lost_workers>0")
    assert result.code == 1, result
    assert " ready=2 " in totals_line(result.out, "default")
    assert " ready=4 " in totals_line(result.out, "b")
    assert result.err.splitlines() == [
        "ALERT backend=b ready=4 > 3",
        "ALERT backend=b lost_workers=1 > 0",
    ]
    fine = run("queuehealth", "--all", "--fail-if", "ready>4")
    assert fine.code == 0 and not fine.err, fine


def test_queuehealth_all_as_json_is_one_document_of_every_backend(two_backends, figures):
    result = run("queuehealth", "--all", "--json", "--fail-if", "ready>3")
    assert result.code == 1
    data = json.loads(result.out)
    assert [(b["backend"], b["totals"]["ready"]) for b in data["backends"]] == [
        ("default", 2),
        ("b", 4),
    ]
    assert data["crossed"] == ["backend=b ready=4 > 3"]
    one = json.loads(run("queuehealth", "--json", "--backend", "b").out)
    assert one["backend"] == "b" and one["totals"]["dead_letters"] == 4


@pytest.mark.parametrize("name", ["nope", "", "immediate", "b" * 5000, "b\nready=0"])
def test_queuehealth_refuses_an_unknown_backend_in_one_line(two_backends, settings, name):
    settings.TASKS = {
        **TWO_BACKENDS,
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    }
    result = run("queuehealth", "--backend", name)
    assert result.refused_cleanly, result
    assert "no Redrive TASKS backend" in result.err and "default, b" in result.err
    assert "Traceback" not in result.err and len(result.err) < 300
    with pytest.raises(CommandError) as refused:
        call_command("queuehealth", "--backend", name)
    assert refused.value.returncode == 2


def test_queuehealth_backend_and_all_are_one_or_the_other(two_backends):
    result = run("queuehealth", "--all", "--backend", "b")
    assert result.refused_cleanly, result


def steady(out: str) -> str:
    """The output without the figures that grow with the clock."""
    return re.sub(r"(since_last_success|oldest_ready_age)=[0-9.]+", r"\1=…", out)


def test_queuehealth_of_one_backend_prints_as_before(one_backend, figures):
    result = run("queuehealth")
    assert result.code == 0 and "backend=" not in result.out, result
    assert result.out.splitlines()[0].startswith("blocked_ordering_keys=0 ")
    assert " ready=2 " in result.out.splitlines()[0]
    assert steady(run("queuehealth", "--backend", "default").out) == steady(result.out)
    assert steady(run("queuehealth", "--all").out) == steady(result.out)
    as_json = json.loads(run("queuehealth", "--json").out)
    assert "backend" not in as_json and as_json["totals"]["ready"] == 2
