"""One vocabulary of job states (jobqueue.models.JobStatus): the health page, the jobs browser,
the `jobs` and `queuehealth` commands and /metrics count the same jobs in the same states."""

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobqueue.health import snapshot
from jobqueue.models import UNFINISHED, UNFINISHED_STATES, Job, JobStatus
from jobqueue.store.jobs import unfinished
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

# How many jobs of each status the test builds: distinct numbers, so a screen that counts one
# status as another cannot match by chance.
BUILT = {
    JobStatus.READY: 1,
    JobStatus.SCHEDULED: 2,
    JobStatus.RETRYING: 3,
    JobStatus.RUNNING: 4,
    JobStatus.EXPIRED: 5,
    JobStatus.DONE: 6,
    JobStatus.DEAD: 7,
    JobStatus.CANCELLED: 8,
}


@pytest.fixture
def every_status():
    now = timezone.now()
    hour = timedelta(hours=1)
    make = {
        JobStatus.READY: dict(run_after=now - hour, attempts=1),  # due again after a failure
        JobStatus.SCHEDULED: dict(run_after=now + hour),
        JobStatus.RETRYING: dict(run_after=now + hour, attempts=2),
        JobStatus.RUNNING: dict(running=True, locked_until=now + hour),
        JobStatus.EXPIRED: dict(running=True, attempts=2, locked_until=now - hour),
        JobStatus.DONE: dict(done=True),
        JobStatus.DEAD: dict(dead=True),
        JobStatus.CANCELLED: dict(state="cancelled", finished_at=now),
    }
    for status, n in BUILT.items():
        JobFactory.create_batch(n, task_path="tests.tasks.noop", **make[status])


def test_each_job_is_in_exactly_the_status_its_filter_finds(every_status):
    now = timezone.now()
    for job in Job.objects.all():
        found = [s for s in JobStatus if Job.objects.filter(s.q(now), pk=job.pk).exists()]
        assert found == [JobStatus.of(job, now)]
    assert {s: Job.objects.filter(s.q(now)).count() for s in JobStatus} == BUILT


def test_the_unfinished_states_hold_exactly_the_unfinished_statuses(every_status):
    """The stored states a drain waits on and the statuses screens call unfinished are one set
    of jobs, in two vocabularies."""
    now = timezone.now()
    by_state = set(Job.objects.filter(state__in=UNFINISHED_STATES).values_list("pk", flat=True))
    by_status = {job.pk for job in Job.objects.all() if JobStatus.of(job, now) in UNFINISHED}
    assert by_state == by_status
    assert unfinished(None) == sum(BUILT[s] for s in UNFINISHED)


def test_the_health_page_metrics_queuehealth_and_queues_count_each_status_alike(
    every_status, client, settings, viewer_client, capsys
):
    totals = snapshot().totals
    unfinished = {s: BUILT[s] for s in UNFINISHED}
    assert {s: totals[s.value] for s in UNFINISHED} == unfinished

    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": "t"}
    body = client.get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    metric = {
        JobStatus.READY: "redrive_jobs_ready",
        JobStatus.SCHEDULED: "redrive_jobs_scheduled",
        JobStatus.RETRYING: "redrive_jobs_retrying",
        JobStatus.RUNNING: "redrive_jobs_running",
        JobStatus.EXPIRED: "redrive_jobs_lease_expired",
    }
    assert {s: sum(x.value for x in families[m].samples) for s, m in metric.items()} == unfinished

    call_command("queuehealth", "--json")
    reported = json.loads(capsys.readouterr().out)["totals"]
    assert {s: reported[s.value] for s in UNFINISHED} == unfinished

    call_command("queues", "list", "--json")
    [queue] = json.loads(capsys.readouterr().out)
    assert {s: queue[s.value] for s in UNFINISHED} == unfinished

    page = viewer_client.get("/deadletters/health/")
    assert page.status_code == 200
    assert {s: page.context["totals"][s.value] for s in UNFINISHED} == unfinished


def test_the_jobs_browser_and_the_jobs_command_list_each_status_alike(
    every_status, viewer_client, capsys
):
    for status, n in BUILT.items():
        response = viewer_client.get("/deadletters/jobs/", {"state": status.value})
        assert response.status_code == 200
        rows = response.context["page"].rows
        assert [r.state for r in rows] == [status.value] * n, status

        call_command("jobs", "--state", status.value, "--json")
        listed = json.loads(capsys.readouterr().out)
        assert [row["state"] for row in listed] == [status.value] * n, status


def test_the_jobs_browsers_tabs_count_each_status_as_the_health_page_does(
    every_status, viewer_client
):
    tabs = viewer_client.get("/deadletters/jobs/counts/").context["tabs"]
    counted = {value: count.count for value, _, count, _ in tabs if not count.more}
    expected = {s.value: BUILT[s] for s in JobStatus}
    assert counted == expected
