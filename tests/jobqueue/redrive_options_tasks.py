"""A task declared with Redrive's options, imported (again) under test backends by
tests/jobqueue/test_testing_helpers.py: `@task` builds it with the backend configured then."""

from django.tasks import task


@task(max_attempts=3, timeout=5)
def doubled(x):
    return 2 * x
