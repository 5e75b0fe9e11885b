"""Run a management command in-process as the shell would (`run_from_argv`), capturing its exit
status and output, and count the rows a refused command must leave alone."""

import contextlib
from dataclasses import dataclass
from importlib import import_module
from io import StringIO
from unittest import mock

from django.core.management import get_commands
from django.db import connections

from deadletters.models import ReplayItem, ReplayRun, Selection
from jobqueue.models import (
    AuditEntry,
    DeadLetter,
    Deploy,
    Job,
    JobCounter,
    OutboxMessage,
    PausedQueue,
    Schedule,
    ScheduleRun,
    WorkerRecord,
    Workflow,
    WorkflowSignal,
    WorkflowStep,
)


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def refused_cleanly(self) -> bool:
        """Status 2, one line on stderr, nothing on stdout."""
        return self.code == 2 and len(self.err.strip().splitlines()) == 1 and not self.out


def command(name, *, stdout=None, stderr=None):
    app = get_commands()[name]
    return import_module(f"{app}.management.commands.{name}").Command(stdout=stdout, stderr=stderr)


def run(name, *argv) -> Result:
    out, err = StringIO(), StringIO()
    cmd = command(name, stdout=out, stderr=err)
    code = 0
    # run_from_argv closes every connection when it ends, which would end the test's transaction.
    with (
        contextlib.redirect_stderr(err),
        mock.patch.object(connections, "close_all"),
    ):
        try:
            cmd.run_from_argv(["manage.py", name, *argv])
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
    return Result(code, out.getvalue(), err.getvalue())


def row_counts() -> dict:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    models = [
        Job,
        DeadLetter,
        JobCounter,
        OutboxMessage,
        WorkerRecord,
        Selection,
        ReplayRun,
        ReplayItem,
        PausedQueue,
        AuditEntry,
        Deploy,
        Schedule,
        ScheduleRun,
        Workflow,
        WorkflowStep,
        WorkflowSignal,
        get_user_model(),
        Group,
    ]
    counts = {model.__name__: model.objects.count() for model in models}
    counts["memberships"] = get_user_model().groups.through.objects.count()
    counts["pending letters"] = DeadLetter.objects.filter(state="pending").count()
    return counts
