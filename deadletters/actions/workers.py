"""Worker actions: quiet and stop, one worker or a host's."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from jobqueue import store
from jobqueue.models import (
    WorkerRecord,
)

from ..roles import (
    CONTROL_WORKER,
)
from .forms import (
    BackendField,
    Reason,
)
from .kernel import (
    Action,
    Actor,
    Gone,
    Outcome,
    backend_of,
    register,
)


class WorkerForm(Reason):
    """A worker by its id, or every worker of a host."""

    backend = BackendField()
    worker = forms.CharField(required=False, max_length=255, strip=False)
    host = forms.CharField(required=False, max_length=255, strip=False)

    def clean(self):
        cleaned = super().clean()
        if bool(cleaned.get("worker")) == bool(cleaned.get("host")):
            raise ValidationError("Name a worker or a host (one of the two).", code="required")
        return cleaned


def _worker_command(command: str):
    def carry_out(actor: Actor, cleaned) -> Outcome:
        backend = backend_of(cleaned)
        worker, host = cleaned.get("worker"), cleaned.get("host")
        known = WorkerRecord.objects.using(backend.database)
        if not known.filter(**({"worker_id": worker} if worker else {"host": host})).exists():
            raise Gone(
                f"worker {worker!r}" if worker else f"worker on host {host!r}",
                hint="The health page lists the workers that sent a heartbeat.",
            )
        told = store.workers.command(
            command,
            workers=[worker] if worker else [],
            host=host or "",
            actor=actor.name,
            reason=cleaned["reason"],
            channel=actor.channel,
            using=backend.database,
        )
        done = "quiet" if command == "quiet" else "stopping"
        if not told:
            return Outcome(False, f"Nothing changed: already {done}.", {"workers": []})
        names = ", ".join(told)
        return Outcome(
            True,
            f"{names}: {done} at its next heartbeat (within seconds).",
            {"workers": told},
        )

    return carry_out


register(
    Action(
        "worker.quiet",
        "worker",
        "Quiet",
        "A worker (or every worker of a host) claims nothing more and finishes what it holds.",
        (CONTROL_WORKER,),
        WorkerForm,
        _worker_command("quiet"),
    )
)
register(
    Action(
        "worker.stop",
        "worker",
        "Stop",
        "A worker (or every worker of a host) finishes what it holds, then exits.",
        (CONTROL_WORKER,),
        WorkerForm,
        _worker_command("stop"),
    )
)
