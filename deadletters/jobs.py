"""The jobs browser's reads: every job by state, not only dead ones, newest first, keyset-paged;
and a job's page (its attempts, its dead letter, the replays around it). Payloads are redacted
as on dead-letter pages.

Each read is of one queue database (`using`, a TASKS backend's OPTIONS["DATABASE"], see
deadletters.databases): a job, its letter, its replays and its operators' actions all live in
the same one; ids repeat across databases."""

from __future__ import annotations

import operator
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from functools import reduce

from django.db.models import Q, TextField
from django.db.models.functions import Cast, Length
from django.utils import timezone

from jobqueue import health, store
from jobqueue.conf import setting
from jobqueue.models import READY_PARTS, AuditEntry, DeadLetter, Job, JobState, JobStatus
from jobqueue.models import WAITING as WAITING_STATUSES

from . import paging, redaction, search
from .paging import BY_ID
from .selectors import SelectionTooLarge

# The browser's tabs: the one vocabulary of job states (jobqueue.models.JobStatus).
STATES = dict(JobStatus.choices)
# Where an operator may act: a job that has not started.
WAITING = tuple(s.value for s in WAITING_STATUSES)


@dataclass(frozen=True)
class JobFilter:
    state: str = ""
    task: str = ""
    queue: str = ""
    key: str = ""
    q: str = ""  # text in the errors, and in the arguments when payload_search
    payload_search: bool = False
    since: datetime | None = None  # enqueued at or after
    until: datetime | None = None  # enqueued before


# Waiting jobs are indexed in three parts (the claim's partial indexes: plain, in an ordering
# line, with a concurrency key: READY_PARTS); "state is ready" alone matches none, and on a
# table of ten million finished jobs was a walk of them all. Said as the parts, each is an
# index range.
IN_READY_INDEXES = reduce(operator.or_, READY_PARTS)


def state_q(state: str, now: datetime) -> Q:
    if state not in STATES:
        return Q()
    q = JobStatus(state).q(now)
    return q & IN_READY_INDEXES if state in WAITING else q


def browser_state(job: Job, now: datetime) -> str:
    return JobStatus.of(job, now).value


def filtered(f: JobFilter, now: datetime, using: str = "default"):
    """The jobs `f` matches, and with a text search the newest job it left out (that one and
    older ones were not searched: search.newest), else None. Run a search's statements inside
    `searching(f, using)`."""
    qs = Job.objects.using(using).filter(state_q(f.state, now))
    if f.task:
        qs = qs.filter(task_path=f.task)
    if f.queue:
        qs = qs.filter(queue_name=f.queue)
    if f.key:
        qs = qs.filter(idempotency_key=f.key)
    # No index by enqueue time: the browser reads newest first by id, which follows it, so a
    # page of recent jobs is found at once; a range far back reads the newer jobs on the way.
    if f.since:
        qs = qs.filter(enqueued_at__gte=f.since)
    if f.until:
        qs = qs.filter(enqueued_at__lt=f.until)
    if not f.q:
        return qs, None
    # No index holds the jobs' text: the newest JOB_SCAN jobs the other filters leave are
    # read, so a narrower filter reaches further back.
    qs, left_out = search.newest(qs, qs, search.JOB_SCAN)
    # Arguments only for a user who may see them unmasked: a match would otherwise tell which
    # jobs hold a masked value.
    qs = qs.annotate(errors_text=Cast("errors", TextField()))
    found = Q(errors_text__icontains=f.q)
    if f.payload_search:
        qs = qs.annotate(
            args_text=Cast("args", TextField()), kwargs_text=Cast("kwargs", TextField())
        )
        found |= Q(args_text__icontains=f.q) | Q(kwargs_text__icontains=f.q)
    return qs.filter(found), left_out


def searching(f: JobFilter, using: str = "default"):
    """Where a read of `filtered(f)` runs: under the search's time limit if `f` searches text
    (search.SearchTimedOut past it)."""
    return search.time_limit(using) if f.q else nullcontext()


# A tab's count under a filter reads at most this many jobs (and says "1,000+" past it) and
# for at most COUNT_TIME_LIMIT seconds (and says it was not counted past that): a count never
# holds the page, nor reads every finished job of a large table.
TAB_CAP = 1_000
COUNT_TIME_LIMIT = 1.0


@dataclass(frozen=True)
class TabCount:
    """A tab's count as the browser shows it: `count` jobs, or at least that many (`more`); or
    none (`count` None) and `why`."""

    count: int | None
    more: bool = False
    why: str = ""

    @property
    def text(self) -> str:
        if self.count is None:
            return ""
        return f"{self.count:,}{'+' if self.more else ''}"


def _bounded_count(f: JobFilter, now: datetime, using: str) -> TabCount:
    try:
        with search.time_limit(using, COUNT_TIME_LIMIT):
            qs, _ = filtered(f, now, using)
            n = qs.order_by()[: TAB_CAP + 1].count()
    except search.SearchTimedOut:
        return TabCount(None, why=f"not counted: it took over {COUNT_TIME_LIMIT:g} s")
    return TabCount(min(n, TAB_CAP), n > TAB_CAP)


def tab_counts(f: JobFilter, now: datetime | None = None, using: str = "default") -> dict:
    """How many jobs each state's tab lists under `f`'s other filters, and the All tab's
    total ("" the key), so that every count agrees with the rows the tab shows. Without a
    filter the live and dead states are counted as the health page counts them (its bounded
    index reads); the rest, and every state under a filter, by a count that stops at TAB_CAP
    jobs and at COUNT_TIME_LIMIT. A text search is not counted (it reads up to
    search.JOB_SCAN jobs a time)."""
    now = now or timezone.now()
    f = replace(f, state="")
    if f.q:
        why = "not counted: a text search is not counted"
        counts = {value: TabCount(None, why=why) for value in STATES}
        counts[""] = TabCount(None, why=why)
        return counts
    counts: dict[str, TabCount] = {}
    if f == JobFilter(payload_search=f.payload_search):
        counts = {
            state: TabCount(n, more) for state, (n, more) in health.state_counts(now, using).items()
        }
    for state in STATES:
        if state not in counts:
            counts[state] = _bounded_count(replace(f, state=state), now, using)
    # All: the states' sum, at least that if one is capped or not counted, none if none is.
    parts = [counts[state] for state in STATES]
    made = [c for c in parts if c.count is not None]
    counts[""] = (
        TabCount(sum(c.count for c in made), any(c.more for c in parts) or len(made) < len(parts))
        if made
        else TabCount(None, why=parts[0].why)
    )
    return counts


@dataclass
class Row:
    job: Job
    state: str
    last_error: str
    letter_id: int | None = None  # a dead job's letter
    running_for: float | None = None  # seconds, for a running job


@dataclass
class JobPage:
    rows: list[Row]
    next_cursor: str | None  # older rows: ?after= (deadletters.paging, by id)
    prev_cursor: str | None  # newer rows: ?before=
    search_left_out: int | None = None  # a text search did not read this job and older ones


LISTED = (
    "id", "task_path", "queue_name", "priority", "idempotency_key", "state", "run_after",
    "attempts", "max_attempts", "locked_until", "locked_by", "enqueued_at", "last_attempted_at",
    "finished_at", "errors",
)  # fmt: skip


def page(
    f: JobFilter, *, after=None, before=None, size=None, now=None, using: str = "default"
) -> JobPage:
    now = now or timezone.now()
    size = size or setting("PAGE_SIZE")
    with searching(f, using):
        qs, left_out = filtered(f, now, using)
        found = paging.page(qs.only(*LISTED), BY_ID, after=after, before=before, size=size)
    jobs = found.rows
    dead = [job.id for job in jobs if job.state == JobState.DEAD]
    letters = dict(
        DeadLetter.objects.using(using).filter(job_id__in=dead).values_list("job_id", "id")
        if dead
        else []
    )
    rows = [
        Row(
            job,
            browser_state(job, now),
            _last_message(job.errors),
            letters.get(job.id),
            _running_for(job, now),
        )
        for job in jobs
    ]
    return JobPage(rows, found.next_cursor, found.prev_cursor, left_out)


def _running_for(job: Job, now: datetime) -> float | None:
    if job.state != JobState.RUNNING or not job.last_attempted_at:
        return None
    return max(0.0, (now - job.last_attempted_at).total_seconds())


def _last_message(errors) -> str:
    """The last error's message of a row whose errors may have been written by hand."""
    if isinstance(errors, list) and errors and isinstance(errors[-1], dict):
        return str(errors[-1].get("message", ""))
    return ""


@dataclass
class Attempt:
    number: int
    worker: str | None
    at: str | None
    duration_ms: float | None  # recorded by workers since issue 15; older entries lack it
    error_class: str
    message: str
    traceback: str


@dataclass
class JobDetail:
    job: Job
    state: str
    payload_json: str
    return_json: str | None
    return_cut: bool | None  # cut at MAX_RESULT_CHARS; None: too large to read at all
    attempts: list[Attempt]  # failed attempts, oldest first, from the job's errors
    letter: DeadLetter | None  # the dead letter this job became
    replayed_from: DeadLetter | None  # the letter whose replay made this job
    replays: list[Job]  # jobs made by replaying this job's letter
    actions: list[AuditEntry]  # operators' actions on it, newest first
    last_took_ms: float | None = None  # a done job's last (successful) attempt


def detail(pk: int, *, now=None, using: str = "default") -> JobDetail:
    """Raises Job.DoesNotExist."""
    now = now or timezone.now()
    # The return value is read only once its size says it may be shown (a row stored before
    # return values were bounded can hold 100 MB, several hundred of the web process's).
    job = (
        Job.objects.using(using)
        .defer("return_value")
        .annotate(return_chars=Length(Cast("return_value", TextField())))
        .get(pk=pk)
    )
    last_took = None
    if job.state == JobState.DONE and job.finished_at and job.last_attempted_at:
        last_took = (job.finished_at - job.last_attempted_at).total_seconds() * 1000
    payload = {"args": redaction.redact(job.args), "kwargs": redaction.redact(job.kwargs)}
    letter = (
        DeadLetter.objects.using(using)
        .filter(Q(original_job_id=job.pk) | Q(job_id=job.pk))
        .order_by("id")
        .first()
    )
    replayed_from = (
        DeadLetter.objects.using(using).filter(pk=job.replayed_from_id).first()
        if job.replayed_from_id
        else None
    )
    replays = (
        list(
            Job.objects.using(using)
            .filter(replayed_from=letter)
            .exclude(pk=job.pk)
            .order_by("id")[:100]
        )
        if letter
        else []
    )
    attempts = [
        Attempt(
            number=e.get("attempt", n),
            worker=e.get("worker_id"),
            at=e.get("at"),
            duration_ms=e.get("duration_ms")
            if isinstance(e.get("duration_ms"), int | float)
            else None,
            error_class=e.get("exception_class_path", ""),
            message=e.get("message", ""),
            traceback=e.get("traceback", ""),
        )
        for n, e in enumerate(job.errors if isinstance(job.errors, list) else [], start=1)
        if isinstance(e, dict)
    ]
    result = cut = None
    if job.state == JobState.DONE:
        result, cut = _return_value(job, using)
    return JobDetail(
        job=job,
        state=browser_state(job, now),
        payload_json=redaction.pretty(payload),
        return_json=result,
        return_cut=cut,
        attempts=attempts,
        letter=letter,
        replayed_from=replayed_from,
        replays=replays,
        actions=store.audit.history("job", job.pk, using=using),
        last_took_ms=last_took,
    )


# A job's page shows at most this much of its return value's pretty JSON.
MAX_RESULT_CHARS = 20_000


def _return_value(job: Job, using: str) -> tuple[str, bool | None]:
    """A done job's return value as its page shows it, masked and cut at MAX_RESULT_CHARS, and
    whether it was cut; None for "too large to read": a value over twice the payload limit as
    the database writes it (jsonb adds a space after each , and :), which only a row stored
    before return values were bounded holds."""
    chars = job.return_chars or 0
    if chars > 2 * setting("MAX_PAYLOAD_BYTES"):
        return f"(not shown: {chars:,} characters of JSON, too large to read here)", None
    value = Job.objects.using(using).values_list("return_value", flat=True).get(pk=job.pk)
    return redaction.preview(redaction.redact(value), MAX_RESULT_CHARS)


def matching_ids(f: JobFilter, cap: int, now=None, using: str = "default") -> list[int]:
    """The ids "select all matching" means, newest first (of a text search, those the page
    shows it read); SelectionTooLarge past `cap`, search.SearchTimedOut past its time limit."""
    with searching(f, using):
        qs, _ = filtered(f, now or timezone.now(), using)
        ids = list(qs.order_by("-id").values_list("id", flat=True)[: cap + 1])
    if len(ids) > cap:
        raise SelectionTooLarge(cap)
    return ids


@dataclass
class SelectionPreview:
    total: int
    actionable: int  # still waiting (ready), so the action applies
    sample: list[Job]


def preview(ids: list[int], action: str, now=None, using: str = "default") -> SelectionPreview:
    now = now or timezone.now()
    # One statement for any number of ids: `pk__in` binds one parameter per id, more than
    # SQLite takes in one statement for a large selection.
    chosen = Job.objects.using(using).filter(store.Among(ids))
    waiting = chosen.filter(state=JobState.READY)
    if action == "run_now":
        waiting = waiting.filter(run_after__gt=now)
    sample = list(chosen.only(*LISTED).order_by("-id")[:20])
    return SelectionPreview(total=len(ids), actionable=waiting.count(), sample=sample)
