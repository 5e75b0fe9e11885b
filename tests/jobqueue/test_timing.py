"""Run time and queue wait: buckets, the rollups the store writes, windows, percentiles and the
/metrics histograms."""

import io
import math
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from prometheus_client.parser import text_string_to_metric_families

from jobqueue import store, timing
from jobqueue.models import Job, JobTiming
from jobqueue.timing import BOUNDS, Histogram, bucket_of, queue_wait
from jobqueue.worker import Worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 12, 2, 12, 30, 15, tzinfo=UTC)
MINUTE = NOW.replace(second=0)


def flush(tallies, now=NOW):
    store.record_worker(
        worker_id="w:1",
        host="h",
        pid=1,
        queues=None,
        concurrency=1,
        started_at=now,
        succeeded=0,
        failed=0,
        current_job_ids=[],
        tallies=tallies,
        now=now,
    )


def tally(runs=(), waits=(), **counts):
    t = store.Tally(**counts)
    for seconds in runs:
        t.observe(timing.RUN, seconds)
    for seconds in waits:
        t.observe(timing.WAIT, seconds)
    return t


def test_a_value_falls_in_the_first_bucket_whose_bound_it_does_not_pass():
    assert bucket_of(0.0) == 0
    assert bucket_of(-2.0) == 0  # clocks apart
    assert bucket_of(0.001) == 0  # a bound belongs to its bucket (le)
    assert bucket_of(0.0011) == 1
    assert bucket_of(0.3) == BOUNDS.index(0.5)
    assert bucket_of(3600.0) == len(BOUNDS) - 1
    assert bucket_of(3600.5) == len(BOUNDS)


def test_percentiles_interpolate_inside_their_bucket():
    h = Histogram()
    h.counts[BOUNDS.index(0.1)] = 8  # (0.05, 0.1]
    h.counts[BOUNDS.index(1.0)] = 2  # (0.5, 1.0]
    # p50: rank 5 of the 8 in (0.05, 0.1]; p95: rank 9.5, 1.5 of the 2 in (0.5, 1].
    assert h.quantile(0.5) == pytest.approx(0.05 + 0.05 * 5 / 8)
    assert h.quantile(0.95) == pytest.approx(0.5 + 0.5 * 1.5 / 2)
    assert h.quantile(0.99) == pytest.approx(0.5 + 0.5 * 1.9 / 2)
    assert Histogram().quantile(0.5) is None
    over = Histogram()
    over.counts[-1] = 1
    assert over.quantile(0.5) == math.inf
    assert timing.duration_text(over.quantile(0.5)) == "> 1 h"
    first = Histogram()
    first.counts[0] = 4
    assert first.quantile(0.5) == pytest.approx(0.0005)  # from 0


def test_the_store_adds_the_tallied_buckets_exactly():
    flush({(MINUTE, "default", "a.task"): tally(runs=[0.02, 0.02, 0.3], waits=[5.0], succeeded=3)})
    flush({(MINUTE, "default", "a.task"): tally(runs=[0.02], waits=[5.0, 4000.0], succeeded=1)})
    rows = {
        (r.kind, r.bucket): (r.count, round(r.seconds, 6))
        for r in JobTiming.objects.filter(
            span=1, minute=MINUTE, queue_name="default", task_path="a.task"
        )
    }
    assert rows == {
        ("run", BOUNDS.index(0.025)): (3, 0.06),
        ("run", BOUNDS.index(0.5)): (1, 0.3),
        ("wait", BOUNDS.index(5.0)): (2, 10.0),
        ("wait", len(BOUNDS)): (1, 4000.0),
    }


def test_each_minutes_buckets_are_added_to_its_hours_too():
    flush({(MINUTE, "default", "a.task"): tally(runs=[0.02])})
    flush(
        {
            (MINUTE - timedelta(minutes=29), "default", "a.task"): tally(runs=[0.02, 0.3]),
            (MINUTE + timedelta(minutes=30), "default", "a.task"): tally(runs=[0.02]),
        }
    )
    hours = {
        (r.minute, r.bucket): r.count for r in JobTiming.objects.filter(span=60).order_by("minute")
    }
    noon = MINUTE.replace(minute=0)
    assert hours == {
        (noon, BOUNDS.index(0.025)): 2,
        (noon, BOUNDS.index(0.5)): 1,
        (noon + timedelta(hours=1), BOUNDS.index(0.025)): 1,
    }


def test_a_window_counts_each_attempt_once_from_whole_hours_and_its_end_minutes():
    # NOW is 12:30:15: the 6 h window starts at 06:31 and reads 07:00 to 11:59 by the hour.
    for minute in ("06:30", "06:31", "06:59", "07:00", "09:10", "11:59", "12:00", "12:30"):
        hours, minutes = map(int, minute.split(":"))
        at = MINUTE.replace(hour=hours, minute=minutes)
        flush({(at, "default", "a.task"): tally(runs=[0.02])})
    six = timing.timings(NOW, 6 * 60)["default", "a.task"]
    assert six.run.total == 7  # all but 06:30
    # The last hour starts at 11:31: 11:59 from its minute, 12:00 and 12:30.
    assert timing.timings(NOW, 60)["default", "a.task"].run.total == 3
    # An hour read from its hourly row: without its minutes it still counts.
    JobTiming.objects.filter(span=1, minute=MINUTE.replace(hour=9, minute=10)).delete()
    assert timing.timings(NOW, 6 * 60)["default", "a.task"].run.total == 7


def test_a_tally_kept_after_a_failed_flush_keeps_its_timings():
    kept = tally(runs=[0.02], waits=[1.0], succeeded=1)
    kept.add(tally(runs=[0.02, 2.0], failed=1))
    assert kept.succeeded == 1 and kept.failed == 1
    assert kept.timings == {
        ("run", BOUNDS.index(0.025)): [2, 0.04],
        ("run", BOUNDS.index(2.5)): [1, 2.0],
        ("wait", BOUNDS.index(1.0)): [1, 1.0],
    }


def test_a_window_sums_its_minutes_and_no_older_ones():
    flush({(MINUTE, "default", "a.task"): tally(runs=[0.02])})
    flush({(MINUTE - timedelta(minutes=59), "default", "a.task"): tally(runs=[0.2])})
    flush({(MINUTE - timedelta(minutes=60), "default", "a.task"): tally(runs=[2.0])})
    flush({(MINUTE - timedelta(hours=6), "mail", "b.task"): tally(waits=[30.0])})
    hour = timing.timings(NOW, 60)
    assert list(hour) == [("default", "a.task")]
    assert hour["default", "a.task"].run.total == 2
    assert hour["default", "a.task"].run.seconds == pytest.approx(0.22)
    six = timing.timings(NOW, 6 * 60)
    assert six["default", "a.task"].run.total == 3 and ("mail", "b.task") not in six
    day = timing.timings(NOW, 24 * 60)
    assert day["mail", "b.task"].wait.counts[BOUNDS.index(30.0)] == 1
    assert list(timing.timings(NOW, 24 * 60, task="b.task")) == [("mail", "b.task")]
    assert list(timing.timings(NOW, 24 * 60, exclude_queues=["default"])) == [("mail", "b.task")]


def test_the_worker_tallies_each_attempts_run_time_and_its_wait_from_due_to_claim():
    now = datetime.now(UTC)
    job = JobFactory(run_after=now - timedelta(seconds=90), enqueued_at=now)
    JobFactory(task_path="tests.tasks.permanent", run_after=now, enqueued_at=now)
    Worker(burst=True, poll_interval=0.05, clock=lambda: now).run()
    assert Job.objects.get(pk=job.pk).state == "done"
    rows = {
        (r.task_path, r.kind): (r.bucket, r.count)
        for r in JobTiming.objects.filter(span=1, minute=now.replace(second=0, microsecond=0))
    }
    # The wait is exact: due 90 s before the worker's (fixed) clock claimed it.
    assert rows[("tests.tasks.noop", "wait")] == (BOUNDS.index(120.0), 1)
    assert JobTiming.objects.get(task_path="tests.tasks.noop", kind="wait", span=1).seconds == 90.0
    assert rows[("tests.tasks.noop", "run")][1] == 1
    assert rows[("tests.tasks.permanent", "run")][1] == 1  # a failed attempt ran too


def test_queue_wait_is_none_for_an_unclaimed_job_and_never_negative():
    assert queue_wait(Job(run_after=NOW)) is None
    assert queue_wait(Job(run_after=NOW, last_attempted_at=NOW - timedelta(seconds=3))) == 0.0
    assert queue_wait(Job(run_after=NOW, last_attempted_at=NOW + timedelta(seconds=3))) == 3.0


def test_prune_drops_timings_with_the_counters():
    old = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=8)
    recent = datetime.now(UTC).replace(second=0, microsecond=0)
    flush(
        {
            (old, "default", "a.task"): tally(runs=[0.02]),
            (recent, "default", "a.task"): tally(runs=[0.02]),
        }
    )
    call_command("prune", stdout=io.StringIO())
    kept = JobTiming.objects.values_list("span", "minute").order_by("span")
    assert list(kept) == [(1, recent), (60, recent.replace(minute=0))]


def test_metrics_expose_the_last_hours_rollups_as_histograms(client, settings):
    now = datetime.now(UTC)
    minute = now.replace(second=0, microsecond=0)
    flush(
        {
            (minute, "default", "a.task"): tally(runs=[0.02, 0.02, 0.3], waits=[5.0]),
            (minute - timedelta(hours=2), "default", "a.task"): tally(runs=[9.0]),
        },
        now=now,
    )
    settings.REDRIVE = {**settings.REDRIVE, "METRICS_TOKEN": "s3cret"}
    response = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    body = response.content.decode()
    assert 'redrive_job_run_seconds_bucket{le="0.01",queue="default",task="a.task"} 0.0' in body
    assert 'redrive_job_run_seconds_bucket{le="0.025",queue="default",task="a.task"} 2.0' in body
    assert 'redrive_job_run_seconds_bucket{le="0.5",queue="default",task="a.task"} 3.0' in body
    assert 'redrive_job_run_seconds_bucket{le="+Inf",queue="default",task="a.task"} 3.0' in body
    assert 'redrive_job_run_seconds_count{queue="default",task="a.task"} 3.0' in body
    assert "# TYPE redrive_job_queue_wait_seconds histogram" in body
    assert (
        'redrive_job_queue_wait_seconds_bucket{le="2.5",queue="default",task="a.task"} 0.0' in body
    )
    assert (
        'redrive_job_queue_wait_seconds_bucket{le="5.0",queue="default",task="a.task"} 1.0' in body
    )
    families = {f.name: f for f in text_string_to_metric_families(body)}
    les = [
        s.labels["le"]
        for s in families["redrive_job_run_seconds"].samples
        if s.name.endswith("_bucket")
    ]
    assert les == [*(repr(b) for b in BOUNDS), "+Inf"]
    (total,) = [
        s.value for s in families["redrive_job_run_seconds"].samples if s.name.endswith("_sum")
    ]
    assert total == pytest.approx(0.34)  # the hour's three, not the run of two hours ago
