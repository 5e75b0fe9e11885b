"""Source "jobqueue": letters of our own jobs. A replay is a new ready job with the same task,
payload and key, a fresh attempt budget, pointing back at its letter (`replayed_from`); the
letter settles when that job is acknowledged or dies (jobqueue.store.jobs)."""

from __future__ import annotations

from jobqueue.models import Job, JobState

from ..dead_letters import SKIP_KEY_HELD
from ..jobs import NewJob, enqueue_many
from ..payloads import dumps
from . import BaseSource, Replayed


class JobLetters(BaseSource):
    name = "jobqueue"
    label = "jobqueue"
    replays_to_queue = True

    def replay(self, letters, *, now, using, payloads=None, to_queue=None):
        """`payloads`: {letter id: (args, kwargs)} to replay a letter with instead of its own
        (an operator's checked edit, `replay_edited`); the letter keeps its own. `to_queue`:
        the queue the jobs go to instead of their letters' (checked by the caller)."""
        results: dict[int, Replayed | str] = {}
        payloads = payloads or {}
        keys = {letter.idempotency_key for letter in letters if letter.idempotency_key}
        held = (
            set(
                Job.objects.using(using)
                .filter(idempotency_key__in=keys)
                .exclude(state=JobState.DEAD)
                .values_list("idempotency_key", flat=True)
            )
            if keys
            else set()
        )
        todo = []
        for letter in letters:
            if letter.idempotency_key and letter.idempotency_key in held:
                results[letter.pk] = SKIP_KEY_HELD
                continue
            if letter.idempotency_key:
                held.add(letter.idempotency_key)
            todo.append(letter)
        # A replay takes the place of the job it replays in that job's ordering key: it runs
        # before the key's later jobs, which a "block" letter held back.
        # It keeps the job's concurrency key and limit too.
        lines = {
            row["id"]: row
            for row in Job.objects.using(using)
            .filter(pk__in=[dl.job_id for dl in todo])
            .exclude(ordering_key__isnull=True, concurrency_key__isnull=True)
            .values(
                "id",
                "ordering_key",
                "ordering_position",
                "ordering_on_dead",
                "concurrency_key",
                "concurrency_limit",
            )
        }
        made = enqueue_many(
            (
                NewJob(
                    task_path=dl.task_path,
                    args=args,
                    kwargs=kwargs,
                    # As stored: the letter's payload was checked when its job went in, an
                    # edit by replay_edited.
                    encoded=(dumps(args), dumps(kwargs)),
                    queue_name=to_queue or dl.queue_name,
                    priority=dl.priority,
                    backend=dl.backend,
                    idempotency_key=dl.idempotency_key,
                    max_attempts=dl.max_attempts,
                    replayed_from_id=dl.pk,
                    **_line_of(lines.get(dl.job_id)),
                )
                for dl in todo
                for args, kwargs in [payloads.get(dl.pk, (dl.args, dl.kwargs))]
            ),
            now=now,
            using=using,
        )
        for letter, (job, created) in zip(todo, made, strict=True):
            # Not created: a job enqueued since the check above holds the key.
            results[letter.pk] = Replayed(job=job) if created else SKIP_KEY_HELD
        return results

    def replay_edited(self, letter, args, kwargs, *, now, using):
        """Replay one pending, locked letter with a replacement payload (already checked by
        the caller): the same job as `replay` makes, task, queue, key, attempt budget, place in
        its ordering key and link to the letter, with these arguments."""
        return self.replay([letter], now=now, using=using, payloads={letter.pk: (args, kwargs)})[
            letter.pk
        ]


def _line_of(original: dict | None) -> dict:
    if original is None:
        return {}
    position = original["ordering_position"]
    if original["ordering_key"] is None:
        position = None
    elif position is None:
        position = original["id"]
    return {
        "ordering_key": original["ordering_key"],
        "ordering_position": position,
        "ordering_on_dead": original["ordering_on_dead"],
        "concurrency_key": original["concurrency_key"],
        "concurrency_limit": original["concurrency_limit"],
    }
