"""Every job row goes in through one insert path (jobqueue.store.jobs.insert_jobs) and every death
is recorded through one bury (jobqueue.store.dead_letters.bury): each producer driven with the
insert spied on, a workflow item's replay dying again through the bury, and a scan of the code
for any other way in."""

import ast
import re
from pathlib import Path

import pytest
from django.utils import timezone

from jobqueue import store
from jobqueue.models import DeadLetter, Job, JobState, Workflow
from jobqueue.publishers import JobsPublisher
from jobqueue.store import jobs as job_rows
from jobqueue.store import outbox_messages
from tests import tasks
from tests import workflow_tasks as wf
from tests.jobqueue.test_worker import burst

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def inserted(monkeypatch) -> list[tuple[Job, bool]]:
    """Every (job, created) the one insert path returned while the test runs."""
    seen, real = [], job_rows.insert_jobs

    def insert_jobs(jobs, **options):
        results = real(jobs, **options)
        seen.extend(results)
        return results

    monkeypatch.setattr(job_rows, "insert_jobs", insert_jobs)
    return seen


def new(**fields) -> store.NewJob:
    return store.NewJob(task_path="tests.tasks.noop", **fields)


def made_through(inserted: list, produce) -> list[Job]:
    """Run a producer; the rows it added are exactly those the one insert path created."""
    before, seen = set(Job.objects.values_list("pk", flat=True)), len(inserted)
    produce()
    added = set(Job.objects.values_list("pk", flat=True)) - before
    created = {job.pk for job, was_made in inserted[seen:] if was_made}
    assert added and added == created
    return list(Job.objects.filter(pk__in=added).order_by("pk"))


def dead_letter() -> DeadLetter:
    """A job run to its death."""
    tasks.noop.enqueue()
    [job] = store.claim(worker_id="w", queues=None, limit=1, lease_seconds=30)
    now = timezone.now()
    error = store.error_entry(
        job, class_path="builtins.ValueError", message="boom", traceback="", now=now
    )
    assert store.fail(job, error, retry_at=None, now=now)
    return DeadLetter.objects.get(job=job)


@pytest.mark.django_db(transaction=True)
def test_every_producer_writes_its_rows_through_the_one_insert(inserted):
    made_through(inserted, lambda: tasks.noop.enqueue())  # one job, Django's task API
    made_through(inserted, lambda: store.enqueue_many([new() for _ in range(3)]))  # bulk
    many = store.NewJob(task_path="tests.tasks.noop")
    made_through(  # more than a batch: the pipelined sender on PostgreSQL
        inserted,
        lambda: store.enqueue_calls(
            many, [([i], {}, store.check_payload([i], {})) for i in range(1200)]
        ),
    )
    keyed = made_through(
        inserted,
        lambda: store.enqueue_many([new(idempotency_key="k1"), new(idempotency_key="k2")]),
    )
    assert [job.idempotency_key for job in keyed] == ["k1", "k2"]
    made_through(
        inserted, lambda: store.enqueue(new(ordering_key="line", ordering_on_dead="block"))
    )
    made_through(inserted, lambda: store.enqueue(new(concurrency_key="c", concurrency_limit=1)))
    made_through(inserted, lambda: store.enqueue(new(unique=store.Unique(key="u"))))

    Job.objects.update(state=JobState.DONE)  # nothing left for the claims below but what follows
    letter = dead_letter()
    [replay] = made_through(inserted, lambda: store.replay([letter.pk]))
    assert replay.replayed_from_id == letter.pk

    fan_out = [new(kwargs={"n": 1}, idempotency_key=f"outbox:m:{i}") for i in range(3)]
    made_through(inserted, lambda: JobsPublisher().write(fan_out))  # the relay's jobs destination
    again = [new(kwargs={"n": 1}, idempotency_key="outbox:m:0"), new(idempotency_key="outbox:n")]
    made_through(inserted, lambda: outbox_messages.enqueue_jobs(again))  # a republish: one new

    workflow = Workflow.objects.create(
        pk=replay.pk,
        task_path="x",
        job=replay,
        started_at=timezone.now(),
        updated_at=timezone.now(),
    )
    error = store.error_entry(
        replay, class_path="builtins.ValueError", message="bad", traceback="", now=timezone.now()
    )
    [item] = made_through(
        inserted,
        lambda: store.workflows.bury_item(
            task_path="tests.workflow_tasks.item",
            queue_name="default",
            backend="default",
            item={"n": 1},
            error=error,
            workflow=workflow,
            batch="b",
            now=timezone.now(),
            using="default",
        ),
    )
    assert (item.state, item.attempts, item.errors) == (JobState.DEAD, 1, [error])


@pytest.mark.django_db(transaction=True)
def test_a_key_held_twice_in_one_batch_is_one_job_and_the_second_is_the_first(inserted):
    results = store.enqueue_many([new(idempotency_key="same"), new(idempotency_key="same")])
    (first, made), (second, again) = results
    assert made and not again and second.pk == first.pk
    assert Job.objects.filter(idempotency_key="same").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_bad_items_replay_that_dies_again_returns_the_items_letter(
    tmp_path, monkeypatch, burials
):
    monkeypatch.setenv("REDRIVE_TEST_SINK", str(tmp_path / "sink.log"))
    monkeypatch.setitem(wf.BROKEN, "items", True)
    wf.importer.enqueue(701, chunk=701)  # item 700 is bad
    burst()
    (letter,) = DeadLetter.objects.filter(task_path="tests.workflow_tasks.item")
    assert burials[-1][1].pk == letter.pk and burials[-1][0].replayed is None

    store.replay([letter.pk])  # still broken: its one attempt dies again
    burst()
    burials.returned(letter)
    assert DeadLetter.objects.filter(task_path="tests.workflow_tasks.item").count() == 1
    letter.refresh_from_db()
    assert (letter.state, letter.replays, len(letter.errors)) == ("pending", 1, 2)


# --- the code: no other way in ---------------------------------------------------------------

LIBRARY = [
    path
    for package in ("jobqueue", "deadletters")
    for path in sorted((ROOT / package).rglob("*.py"))
    if "migrations" not in path.parts
]
# Where rows of these tables may be written, and by which names.
JOB_INSERTS = {"jobqueue/store/jobs.py", "jobqueue/store/sqlite.py"}
JOB_SQL = {"jobqueue/store/postgresql.py", "jobqueue/store/sqlite.py"}
LETTER_WRITES = {"jobqueue/store/dead_letters.py"}
WRITES = {"create", "bulk_create", "get_or_create", "update_or_create"}
INSERT_INTO_JOBS = re.compile(r"INSERT\s+INTO\s+jobqueue_job\b", re.IGNORECASE)


def _model_writes(tree: ast.AST, model: str) -> list[int]:
    """Lines calling Model.objects….create/bulk_create/…, or Model(...) itself."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == model:
            lines.append(node.lineno)
        if isinstance(func, ast.Attribute) and func.attr in WRITES:
            chain = ast.unparse(func.value)
            if chain.startswith((f"{model}.objects", f"{model}._base_manager")):
                lines.append(node.lineno)
    return lines


def test_no_module_writes_job_rows_or_letters_but_the_one_insert_and_the_one_bury():
    found = []
    for path in LIBRARY:
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        tree = ast.parse(text)
        if name not in JOB_INSERTS:
            found += [f"{name}:{line} writes Job rows" for line in _model_writes(tree, "Job")]
        if name not in LETTER_WRITES:
            found += [
                f"{name}:{line} writes a DeadLetter" for line in _model_writes(tree, "DeadLetter")
            ]
        if name not in JOB_SQL and INSERT_INTO_JOBS.search(text):
            found.append(f"{name} has SQL inserting into jobqueue_job")
    assert found == []


def test_the_scan_finds_what_it_looks_for():
    tree = ast.parse(
        "Job.objects.using(u).bulk_create(rows)\n"
        "DeadLetter.objects.create(x=1)\n"
        "Job(task_path='t')\n"
        "Job.objects.filter(pk=1).update(state='dead')\n"
    )
    assert _model_writes(tree, "Job") == [1, 3]
    assert _model_writes(tree, "DeadLetter") == [2]
    assert INSERT_INTO_JOBS.search("insert into jobqueue_job (id)")
    assert not INSERT_INTO_JOBS.search("INSERT INTO jobqueue_jobcounter")
