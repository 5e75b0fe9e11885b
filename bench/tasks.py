"""No-op tasks for bench/throughput.py; worker subprocesses import them by path."""

from django.tasks import task


@task
def noop():
    return None
