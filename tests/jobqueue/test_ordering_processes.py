"""Per-key ordering with real `runworker` processes: ten keys of a hundred jobs under four
workers, with retries, and a dead job in each mode ("block" holds its key until the letter is
replayed; "skip" lets the key run on). Each step writes start/end lines to a shared sink, so
overlap within a key or a step out of order shows."""

import signal
from collections import defaultdict

from django.tasks import task_backends

from jobqueue import store
from jobqueue.models import DeadLetter, Job, JobState
from tests import tasks
from tests.conftest import wait_until

KEYS = [f"account:{k}" for k in range(10)]
BLOCKED, SKIPPED = KEYS[0], KEYS[1]
DIES_AT = 50


def steps_by_key(lines) -> dict[str, list[tuple[str, int]]]:
    steps = defaultdict(list)
    for line in lines:
        event, key, n = line.split()
        steps[key].append((event, int(n)))
    return steps


def assert_one_at_a_time_in_order(steps: list[tuple[str, int]]) -> list[int]:
    """Starts and ends pair up (no overlap) and steps never go back; returns the steps run."""
    assert len(steps) % 2 == 0
    runs = []
    for (start, n), (end, m) in zip(steps[::2], steps[1::2], strict=True):
        assert (start, end, n) == ("start", "end", m), steps
        runs.append(n)
    assert runs == sorted(runs), runs
    return runs


def test_four_workers_keep_each_keys_order_through_retries_and_dead_letters(workers, tmp_path):
    gate = tmp_path / "dependency-fixed"
    dies = {(key, DIES_AT) for key in (BLOCKED, SKIPPED)}
    backend = task_backends["default"]
    for key in KEYS:
        line = tasks.ordered_step.using(
            ordering_key=key, ordering_on_dead="skip" if key == SKIPPED else "block"
        )
        backend.enqueue_many(
            line,
            [
                (
                    (key, n),
                    {
                        "fail_first": n % 10 == 3,
                        "die_until": str(gate) if (key, n) in dies else "",
                    },
                )
                for n in range(100)
            ],
        )
    env = {"REDRIVE_BACKOFF_BASE": "0.05", "REDRIVE_BACKOFF_CAP": "0.2"}
    procs = [workers.start("--concurrency", "2", "--poll", "0.05", env=env) for _ in range(4)]
    done = Job.objects.filter(state=JobState.DONE)
    # Everything but the two dead steps and the 49 steps the blocking one holds back.
    wait_until(lambda: done.count() == 1000 - 2 - 49, timeout=120, message="the unblocked steps")
    held = Job.objects.filter(ordering_key=BLOCKED, state=JobState.READY)
    assert held.count() == 49  # still waiting behind the dead step, however long they wait
    assert Job.objects.get(ordering_key=SKIPPED, state=JobState.DEAD).args == [SKIPPED, DIES_AT]

    gate.write_text("fixed")
    letter = DeadLetter.objects.get(job__ordering_key=BLOCKED)
    assert store.replay([letter.pk]).done
    # Every step but the skipped key's dead one, and the replay.
    wait_until(lambda: done.count() == 1000 - 2 + 1, timeout=120, message="the blocked line")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in procs] == [0] * 4

    steps = steps_by_key(workers.sink_lines())
    assert set(steps) == set(KEYS)
    for key in KEYS:
        runs = assert_one_at_a_time_in_order(steps[key])
        retried = [n for n in range(100) if n % 10 == 3]
        expected = sorted([*range(100), *retried, *([DIES_AT] if key == BLOCKED else [])])
        assert runs == expected, key  # every step, retries once more, the replay once more
    owners = {w for ids in Job.objects.values_list("worker_ids", flat=True) for w in ids}
    assert len(owners) >= 2, "the keys were shared between workers"
