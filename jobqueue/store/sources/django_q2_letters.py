"""Source "django_q2": dead letters of django-q2 tasks, captured, settled and replayed here.

The bridge (deadletters/django_q2_bridge.py) hands each result the cluster saved to `record()`;
`jobqueue.store.replay` calls `DjangoQ2Letters.replay` in its transaction. django-q2 itself is
imported only inside the functions that need it, when a django-q2 letter is involved.

Identity: a letter's `idempotency_key` is the id of the django-q2 task that died (its `Failure`
row, which we keep reading and never delete); `replay_ref` is the id of the latest replay task.

    failed, retry coming ─────────────▶ nothing (django-q2 retries when the broker lock expires)
    failed terminally ────────────────▶ one pending letter (unique on the task id)
    replay ──▶ async_task(func, *args, **kwargs) from the Failure row ──▶ letter 'replaying'
    replay task succeeded ─────────────▶ 'replayed'
    replay task failed terminally ─────▶ 'pending' again, replays kept, its error appended

Arguments are shown, never used: django-q2 unpickled them from its own row; we keep a JSON copy
where they convert exactly and a marked textual summary where they do not. A replay reads the
Failure row again, so the summary is never executed or parsed.
"""

from __future__ import annotations

import logging
import math
import re
import reprlib
from datetime import datetime

from django.db import transaction
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from jobqueue.models import DeadLetter, DeadLetterState

from .. import dead_letters
from ..payloads import MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS, storable_text
from . import BaseSource, Description, Link, Made, Replayed

SOURCE = "django_q2"
UNCONVERTED = "$not_json"  # marks a value shown as a summary
SKIP_GONE = "django-q2's Failure row is gone (pruned or resubmitted in its admin)"
SKIP_BROKER = "replay needs django-q2's ORM broker on the console's database (Q_CLUSTER['orm'])"
SKIP_OPTION_NAMES = "its keyword arguments use django-q2 option names: {names}"
# Keywords async_task takes for itself (django_q.tasks.async_task's opt_keys).
OPTION_NAMES = frozenset(
    {
        "hook", "group", "save", "sync", "cached", "ack_failure", "iter_count", "iter_cached",
        "chain", "broker", "cluster", "timeout", "q_options", "task_name",
    }
)  # fmt: skip
SUMMARY_CHARS = 500

log = logging.getLogger("jobqueue.django_q2")
_repr = reprlib.Repr(maxstring=SUMMARY_CHARS, maxother=SUMMARY_CHARS)


# --- arguments ----------------------------------------------------------------------------


def as_json(value):
    """`value` as JSON data when it converts exactly (tuples become lists), else a summary:
    `{"$not_json": "<type>", "summary": "<bounded repr>"}` for that value only."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _summary(value)
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: as_json(v) for k, v in value.items()}
    return _summary(value)


def _summary(value) -> dict:
    kind = type(value)
    try:
        text = _repr.repr(value)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ must not lose the failure
        text = f"<repr failed: {type(exc).__name__}>"
    return {
        UNCONVERTED: f"{kind.__module__}.{kind.__qualname__}",
        "summary": storable_text(text, SUMMARY_CHARS),
    }


def has_summary(value) -> bool:
    if isinstance(value, dict):
        return UNCONVERTED in value or any(has_summary(v) for v in value.values())
    if isinstance(value, list):
        return any(has_summary(v) for v in value)
    return False


# --- errors -------------------------------------------------------------------------------

_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?:: (.*))?$")
TRACEBACK_HEAD = "Traceback (most recent call last):"


def parse_result(result) -> tuple[str, str, str]:
    """(message, exception class, traceback) from a failed task's result.

    django-q2 stores `f"{exc} : {traceback.format_exc()}"`; the class is read from the
    traceback's final line, which names it as `module.Class: message` (builtins unqualified).
    """
    text = str(result if result is not None else "")
    message, sep, tb = text.partition(f" : {TRACEBACK_HEAD}")
    if not sep:
        return text, "", ""
    tb = TRACEBACK_HEAD + tb
    first = message.splitlines()[0] if message else None
    error_class = ""
    for line in reversed(tb.rstrip().splitlines()):
        match = _EXCEPTION_LINE.match(line)
        if match and match.group(2) == first:
            error_class = match.group(1)
            break
    return message, error_class, tb


# --- capture ------------------------------------------------------------------------------


def is_terminal(task: dict, attempt_count: int, max_attempts: int) -> bool:
    """No retry is coming: acknowledged as failed, or the attempt budget is spent."""
    return bool(task.get("ack_failure")) or (0 < max_attempts <= attempt_count)


def record(task: dict, row, *, max_attempts: int, cluster: str, now: datetime | None = None):
    """Settle one result django-q2 saved. `task` is the package the monitor saved; `row` its
    Task row (None if django-q2 could not save it). Returns the letter touched, if any.

    Idempotent: a second save of the same terminal failure changes nothing.
    """
    now = now or timezone.now()
    if task.get("success"):
        with transaction.atomic():
            updated = dead_letters.settle_replayed(source=SOURCE, replay_ref=task["id"])
        return updated or None
    if row is None or row.success or not is_terminal(task, row.attempt_count, max_attempts):
        return None
    message, error_class, tb = parse_result(row.result)
    stopped = row.stopped or now
    error = {
        "attempt": row.attempt_count,
        "at": stopped.isoformat(),
        "worker_id": f"django-q2 {row.cluster or cluster}",
        "exception_class_path": error_class,
        "message": storable_text(message, MAX_MESSAGE_CHARS),
        "traceback": storable_text(tb, MAX_TRACEBACK_CHARS),
    }
    with transaction.atomic():
        replayed = (
            DeadLetter.objects.select_for_update().filter(source=SOURCE, replay_ref=row.id).first()
        )
        if replayed is not None and replayed.state != DeadLetterState.REPLAYING:
            return None  # this replay's death is recorded already
        if replayed is None and (
            DeadLetter.objects.filter(source=SOURCE, idempotency_key=row.id).exists()
        ):
            return None
        # django-q2 keeps the task's first start and last stop, no per-attempt times: a single
        # attempt failed at `stopped`; after retries the first failure is bounded by `started`.
        first_failed = stopped if row.attempt_count <= 1 else (row.started or stopped)
        return dead_letters.bury(
            dead_letters.Burial(
                error,
                attempts=row.attempt_count,
                now=now,
                last_error=error["message"] or error_class or "failed",
                replayed=replayed,
                renewed=("max_attempts",),
                letter=dead_letters.NewLetter(
                    source=SOURCE,
                    task_path=row.func[:255],
                    queue_name=(row.cluster or cluster)[:100],
                    backend=SOURCE,
                    args=as_json(list(row.args or ())),
                    kwargs=as_json(dict(row.kwargs or {})),
                    idempotency_key=row.id,
                    max_attempts=max(max_attempts, row.attempt_count),
                    errors=[error],
                    first_failed_at=first_failed,
                    contested=True,  # a concurrent save of the same failure may win
                ),
            )
        )


# --- the source -------------------------------------------------------------------------


class DjangoQ2Letters(BaseSource):
    name = SOURCE
    label = "django-q2"
    requires = ("django_q", "redrive[django-q2]")

    def made(self, ref):
        return Made("django-q2 task", ref)

    def replay(self, letters, *, now, using):
        """Enqueue each letter's task again from its kept Failure row, in the caller's
        transaction (with the ORM broker the new queue row commits with it). The new task's
        id is the replay's reference: its result, saved by the cluster, settles the letter."""
        from django_q.conf import Conf
        from django_q.models import Failure
        from django_q.tasks import async_task

        if using != Conf.ORM or Conf.BROKER_CLASS or Conf.IRON_MQ or isinstance(Conf.SQS, dict):
            # Another broker would hand the task to the cluster before this transaction
            # commits: its result could arrive before `replay_ref` is visible and be lost.
            return {letter.pk: SKIP_BROKER for letter in letters}
        rows = Failure.objects.using(using).in_bulk([letter.idempotency_key for letter in letters])
        results: dict[int, Replayed | str] = {}
        for letter in letters:
            row = rows.get(letter.idempotency_key)
            if row is None:
                results[letter.pk] = SKIP_GONE
                continue
            kwargs = dict(row.kwargs or {})
            clashing = sorted(OPTION_NAMES.intersection(kwargs))
            if clashing:
                results[letter.pk] = SKIP_OPTION_NAMES.format(names=", ".join(clashing))
                continue
            # Always through the broker, never inline (sync), so the replay cannot run inside
            # the console's transaction; the original hook and group come along.
            options = {"sync": False, "hook": row.hook, "group": row.group}
            task_id = async_task(
                row.func,
                *(row.args or ()),
                q_options={k: v for k, v in options.items() if v is not None},
                **kwargs,
            )
            results[letter.pk] = Replayed(ref=task_id)
        return results

    def describe(self, letter, *, payload=None) -> Description:
        """A link to the task's Failure row in django-q2's admin, where the host has it."""
        try:
            url = reverse("admin:django_q_failure_change", args=[letter.idempotency_key])
        except NoReverseMatch:
            url = None
        return Description(
            label=self.label,
            reference_name="task",
            reference=letter.idempotency_key or "",
            link=Link(
                url,
                "its Failure row in django-q2's admin",
                "q2-failure",
                permission="django_q.view_failure",
                staff_only=True,
            )
            if url
            else None,
            payload_summarised=payload is not None and has_summary(payload),
        )
