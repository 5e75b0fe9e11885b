"""The fault suite's ledger and invariants.

The ledger is the set of job ids a scenario enqueued. Effects are `Execution` rows written in the
same transaction as the work (unique key); the sink file outside the database shows every attempt
that reached the effect; worker logs carry one line per claim.
"""

import re
from collections import Counter
from pathlib import Path

from django.tasks import task_backends

from jobqueue.models import DeadLetter, Execution, Job, JobState
from tests import tasks

CLAIMED = re.compile(r"event=claimed .*job_ids=([\d,]+)")


def enqueue_ledger(n: int, prefix: str, work_ms: float = 5.0) -> list[int]:
    results = task_backends["default"].enqueue_many(
        tasks.fault_effect, [((f"{prefix}-{i}",), {"work_ms": work_ms}) for i in range(n)]
    )
    return [int(r.id) for r in results]


def unfinished(ids) -> int:
    return Job.objects.filter(pk__in=ids).exclude(state__in=[JobState.DONE, JobState.DEAD]).count()


def claimed_lines(log_paths) -> Counter:
    counts = Counter()
    for path in log_paths:
        for ids in CLAIMED.findall(Path(path).read_text()):
            counts.update(int(job_id) for job_id in ids.split(","))
    return counts


def check_invariants(ids, *, log_paths=(), sink_lines=None):
    """`sink_lines`: the append-only sink (one line per attempt that reached the effect)."""
    jobs = list(Job.objects.filter(pk__in=ids))
    assert len(jobs) == len(ids), "a ledger job is missing"
    states = Counter(job.state for job in jobs)
    assert set(states) <= {JobState.DONE, JobState.DEAD}, f"unfinished jobs: {states}"
    keys = [f"effect:{job.args[0]}" for job in jobs]
    effects = Counter(
        Execution.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", flat=True)
    )
    assert max(effects.values(), default=0) <= 1, "an effect was done twice"
    # Every done job has its effect; beyond those, only a job that died after its effect
    # committed (killed before acknowledging, attempts exhausted) may have one.
    assert states[JobState.DONE] <= len(effects) <= len(jobs)
    reached = Counter(sink_lines) if sink_lines is not None else None
    for job in jobs:
        assert job.attempts <= job.max_attempts, f"job {job.pk} ran {job.attempts} times"
        if job.state == JobState.DONE:
            assert f"effect:{job.args[0]}" in effects, f"done job {job.pk} has no effect"
        if reached is not None:
            # Seen from outside the database: each attempt reaches the boundary at most once,
            # and a done job's effect was reached by at least one.
            assert reached[job.args[0]] <= job.attempts, f"job {job.pk}: more runs than attempts"
            assert job.state != JobState.DONE or reached[job.args[0]] >= 1
    dead = [job.pk for job in jobs if job.state == JobState.DEAD]
    letters = DeadLetter.objects.filter(job_id__in=dead)
    assert letters.count() == len(dead), "a dead job has no dead letter"
    assert all(letter.last_error and letter.error_class for letter in letters)
    if log_paths:
        lines = claimed_lines(log_paths)
        for job in jobs:
            # A worker killed between its claim commit and the log line leaves no line, but the
            # sweep records that attempt as LeaseExpired: together they account for every one.
            expired = sum(e["exception_class_path"].endswith("LeaseExpired") for e in job.errors)
            assert lines[job.pk] + expired >= job.attempts, f"attempts of job {job.pk} unlogged"
    return states
