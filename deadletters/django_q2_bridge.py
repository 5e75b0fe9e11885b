"""The django-q2 bridge: django-q2's terminal failures become dead letters of the console.

On when `REDRIVE["SOURCES"]` names "django_q2" (and `django_q` is installed). The app's ready()
connects `receive` to django-q2's `post_execute`, which the cluster's monitor process sends after
it saved a task's result (and acknowledged it, or not). Each save is handed to
`jobqueue.store.sources.django_q2_letters.record`, which decides: terminal failure → one dead
letter; retry coming → nothing; result of one of our replays → the letter settles.

Why `post_execute` rather than the Task row's `post_save` (django-q2's own hooks): it carries the
task package, whose `ack_failure` says whether django-q2 gave up on the task regardless of its
attempt count, and it fires once per result even when the save was a no-op.
"""

from __future__ import annotations

import logging

from django.apps import apps

from jobqueue.conf import setting

SOURCE = "django_q2"
DISPATCH_UID = "redrive.deadletters.django_q2"
log = logging.getLogger("deadletters.django_q2")


def enabled() -> bool:
    return SOURCE in setting("SOURCES") and apps.is_installed("django_q")


def connect() -> bool:
    """Connect the receiver if the bridge is on; returns whether it is connected."""
    if not enabled():
        return False
    from django_q.signals import post_execute

    post_execute.connect(receive, dispatch_uid=DISPATCH_UID)
    return True


def receive(sender, task, **kwargs):
    """post_execute receiver, in django-q2's monitor process (or inline in sync mode)."""
    if not enabled() or task.get("cached"):
        return  # cached results are not saved to the database: no Failure row to keep
    from django_q.conf import Conf
    from django_q.models import Task

    from jobqueue.store.sources import django_q2_letters as q2_store

    try:
        row = None if task.get("success") else Task.objects.filter(id=task["id"]).first()
        q2_store.record(task, row, max_attempts=Conf.MAX_ATTEMPTS, cluster=Conf.CLUSTER_NAME)
    except Exception:
        # The monitor must go on saving results; the failure stays in django-q2's admin.
        log.exception("could not record django-q2 task %s as a dead letter", task.get("id"))
