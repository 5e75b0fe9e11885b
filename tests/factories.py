"""factory-boy factories for queue records. Use traits for states: JobFactory(running=True)."""

import uuid
from datetime import timedelta

import factory
from django.utils import timezone

from jobqueue.fingerprints import fingerprint
from jobqueue.models import DeadLetter, DeadLetterState, Job, JobState


def _error(n, cls="builtins.ConnectionError", message="receipt dependency unavailable"):
    return {
        "attempt": n,
        "at": timezone.now().isoformat(),
        "worker_id": "factory:1",
        "exception_class_path": cls,
        "message": message,
        "traceback": f"Traceback (most recent call last):\n  ...\n{cls}: {message}\n",
    }


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    task_path = "tests.tasks.noop"
    queue_name = "default"
    args = factory.LazyFunction(list)
    kwargs = factory.LazyFunction(dict)
    state = JobState.READY
    run_after = factory.LazyFunction(timezone.now)
    enqueued_at = factory.LazyFunction(timezone.now)
    max_attempts = 5

    class Params:
        running = factory.Trait(
            state=JobState.RUNNING,
            attempts=1,
            lease_token=factory.LazyFunction(lambda: uuid.uuid4().hex),
            locked_until=factory.LazyFunction(lambda: timezone.now() + timedelta(seconds=30)),
            locked_by="factory:1",
            worker_ids=["factory:1"],
        )
        done = factory.Trait(
            state=JobState.DONE, attempts=1, finished_at=factory.LazyFunction(timezone.now)
        )
        dead = factory.Trait(
            state=JobState.DEAD,
            attempts=5,
            errors=factory.LazyFunction(lambda: [_error(n) for n in range(1, 6)]),
            finished_at=factory.LazyFunction(timezone.now),
        )


class DeadLetterFactory(factory.django.DjangoModelFactory):
    """A pending dead letter, as the worker writes one when a job exhausts its attempts."""

    class Meta:
        model = DeadLetter

    job = factory.SubFactory(JobFactory, dead=True, task_path=factory.SelfAttribute("..task_path"))
    original_job_id = factory.SelfAttribute("job.id")
    task_path = "demo.tasks.send_receipt"
    queue_name = "default"
    args = factory.Sequence(lambda n: [n])
    kwargs = factory.LazyFunction(dict)
    idempotency_key = factory.Sequence(lambda n: f"receipt:{n}")
    attempts = 5
    max_attempts = 5
    error_class = "builtins.ConnectionError"
    last_error = "receipt dependency unavailable"
    traceback = factory.LazyAttribute(
        lambda o: f"Traceback (most recent call last):\n  ...\n{o.error_class}: {o.last_error}\n"
    )
    errors = factory.LazyAttribute(
        lambda o: [_error(n, o.error_class, o.last_error) for n in range(1, o.attempts + 1)]
    )
    # As the store writes it (jobqueue.store.dead_letters.bury).
    fingerprint = factory.LazyAttribute(
        lambda o: fingerprint(o.error_class, o.last_error, o.traceback)
    )
    first_failed_at = factory.LazyFunction(lambda: timezone.now() - timedelta(minutes=5))
    dead_lettered_at = factory.LazyFunction(timezone.now)
    state = DeadLetterState.PENDING

    class Params:
        replaying = factory.Trait(
            state=DeadLetterState.REPLAYING,
            replays=1,
            last_replayed_at=factory.LazyFunction(timezone.now),
        )
        replayed = factory.Trait(
            state=DeadLetterState.REPLAYED,
            replays=1,
            last_replayed_at=factory.LazyFunction(timezone.now),
        )
        discarded = factory.Trait(
            state=DeadLetterState.DISCARDED, discarded_at=factory.LazyFunction(timezone.now)
        )
        permanent = factory.Trait(
            error_class="jobqueue.errors.PermanentError", last_error="invalid payload", attempts=1
        )


# --- deadletters: the console's audit log -----------------------------------------------


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "auth.User"
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"operator{n}")
    password = factory.django.Password("pw-for-tests")


class SelectionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "deadletters.Selection"

    operator = factory.SubFactory(UserFactory)
    action = "replay"
    ids = factory.LazyFunction(list)
    created_at = factory.LazyFunction(timezone.now)


class ReplayRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "deadletters.ReplayRun"

    selection = factory.SubFactory(SelectionFactory)
    action = factory.SelfAttribute("selection.action")
    operator = factory.SelfAttribute("selection.operator")
    operator_name = factory.SelfAttribute("operator.username")
    reason = "receipt API fixed"
    batch_size = 100
    requested = factory.LazyAttribute(lambda o: len(o.selection.ids))
    created_at = factory.LazyFunction(timezone.now)
    updated_at = factory.LazyFunction(timezone.now)


class ReplayItemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "deadletters.ReplayItem"

    run = factory.SubFactory(ReplayRunFactory)
    dead_letter = factory.SubFactory(DeadLetterFactory)
    task_path = factory.SelfAttribute("dead_letter.task_path")
    outcome = "replayed"
    batch = 1
    at = factory.LazyFunction(timezone.now)


# --- a second queue database (tests/conftest.py adds it as SECOND_DATABASE) ---------------------

# Two Redrive TASKS backends, "b" on the second database: ids repeat across the two.
TWO_BACKENDS = {
    "default": {"BACKEND": "jobqueue.backend.DatabaseBackend", "QUEUES": [], "OPTIONS": {}},
    "b": {
        "BACKEND": "jobqueue.backend.DatabaseBackend",
        "QUEUES": [],
        "OPTIONS": {"DATABASE": "queues_b"},
    },
}


class JobB(JobFactory):
    class Meta:
        database = "queues_b"


class LetterB(DeadLetterFactory):
    class Meta:
        database = "queues_b"

    # Explicit ids: on PostgreSQL they take no value of the database's id sequence, so a letter
    # made with an explicit id elsewhere cannot collide with one made here, and other tests'
    # letters get the ids they would have had.
    id = factory.Sequence(lambda n: 8_000_000 + n)
    job = factory.SubFactory(JobB, dead=True, task_path=factory.SelfAttribute("..task_path"))
