"""Tasks declared with Redrive's options, imported (again) under test backends by
tests/jobqueue/test_testing_helpers.py: `@task` builds them with the backend configured then.
As the README documents them: a queue of their own, attempts and a timeout."""

from django.tasks import task


@task(max_attempts=3, timeout=5)
def doubled(x):
    return 2 * x


@task(queue_name="payments", max_attempts=3, timeout=20)
def charge(cents):
    return {"charged": cents}
