"""Reads of the console. Every list is keyset-paginated on (dead_lettered_at, id)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime

from django.db.models import BigIntegerField, Count, F, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.models import DeadLetter, DeadLetterState, Job, Schedule, ScheduleRun
from jobqueue.store import sources

from . import databases, paging, redaction, search
from .models import Action, PendingCount, ReplayItem, ReplayRun
from .paging import Keyset, Page

POISON_REASON = "replayed {n} times already (poison limit)"


# --- list ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListFilter:
    job_type: str = ""
    queue: str = ""
    error_class: str = ""
    source: str = ""
    q: str = ""
    since: datetime | None = None
    until: datetime | None = None  # exclusive
    state: str = ""
    fingerprint: str = ""
    order: str = "newest"
    payload_search: bool = False  # q looks in payload values too (FilterForm.to_filter)
    # The TASKS backend whose database is read (deadletters.databases); "" the default one.
    backend: str = ""

    @property
    def database(self) -> str:
        """The queue database this filter reads; UnknownBackend for a name that is none."""
        return database_of(self.backend)

    def as_json(self) -> dict:
        """The filter as recorded in the audit log."""
        return {
            k: (v.isoformat() if isinstance(v, datetime) else v)
            for k, v in asdict(self).items()
            if v
        }


class UnknownBackend(LookupError):
    """A backend name that is no Redrive TASKS backend (a URL's typo, or one removed)."""

    def __init__(self, name):
        super().__init__(f"No Redrive TASKS backend {str(name)[:100]!r}")
        self.name = name


def database_of(backend: str) -> str:
    """The database of the TASKS backend called `backend` ("" the default one)."""
    found = databases.named(backend)
    if found is None:
        raise UnknownBackend(backend)
    return found.database


def filtered(f: ListFilter):
    using = f.database
    qs = DeadLetter.objects.using(using)
    if f.job_type:
        qs = qs.filter(task_path=f.job_type)
    if f.queue:
        qs = qs.filter(queue_name=f.queue)
    if f.error_class:
        qs = qs.filter(error_class=f.error_class)
    if f.source:
        qs = qs.filter(source=f.source)
    if f.q:
        qs = search.matching(qs, f.q, payload=f.payload_search, using=using)
    if f.since:
        qs = qs.filter(dead_lettered_at__gte=f.since)
    if f.until:
        qs = qs.filter(dead_lettered_at__lt=f.until)
    if f.state:
        qs = qs.filter(state=f.state)
    if f.fingerprint:
        qs = qs.filter(fingerprint=f.fingerprint)
    return qs


# Dead letters page newest first by when they died (jobqueue_dl_pending_idx and its kin).
LETTERS = Keyset("dead_lettered_at")


def page(f: ListFilter, *, after=None, before=None, size=None) -> Page:
    qs = filtered(f).only(
        "id",
        "source",
        "task_path",
        "queue_name",
        "last_error",
        "error_class",
        "attempts",
        "replays",
        "state",
        "dead_lettered_at",
    )
    return paging.page(
        qs,
        LETTERS,
        after=after,
        before=before,
        size=size or setting("PAGE_SIZE"),
        newest=f.order != "oldest",
    )


def count_matching(f: ListFilter, cap: int | None = None) -> tuple[int, bool]:
    """How many rows match, counting at most `cap` + 1; returns (count, more_than_cap)."""
    cap = cap or setting("MAX_SELECTION")
    n = filtered(f).order_by()[: cap + 1].count()
    return min(n, cap), n > cap


def matching_ids(f: ListFilter, cap: int | None = None, *, first: int | None = None) -> list[int]:
    """The ids a "select all matching" means, in list order; raises if more than `cap`. With
    `first`, the first so many of them, however many match."""
    order = ["dead_lettered_at", "id"] if f.order == "oldest" else ["-dead_lettered_at", "-id"]
    ordered = filtered(f).order_by(*order).values_list("id", flat=True)
    if first is not None:
        return list(ordered[:first])
    cap = cap or setting("MAX_SELECTION")
    ids = list(ordered[: cap + 1])
    if len(ids) > cap:
        raise SelectionTooLarge(cap)
    return ids


class SelectionTooLarge(ValueError):
    def __init__(self, cap):
        super().__init__(f"More than {cap:,} items match; narrow the filter.")


def filter_choices(using: str = "default"):
    """Suggestions for the filter inputs: the job types and error classes with pending items."""
    rows = PendingCount.objects.using(using).filter(pending__gt=0)
    return {
        "job_types": sorted(set(rows.values_list("task_path", flat=True))),
        "error_classes": sorted(set(rows.values_list("error_class", flat=True))),
    }


# --- detail -------------------------------------------------------------------------------


@dataclass
class Detail:
    letter: DeadLetter
    payload_json: str
    original_job: Job | None
    replay_jobs: list[Job]
    history: list[ReplayItem]
    payload_summarised: bool = False  # arguments shown as `$not_json` summaries
    origin: sources.Description | None = None  # what the letter's source says of it
    # A letter whose job had an ordering key under "block": how many of the key's later jobs
    # wait behind it (shown as "blocking N jobs"); None for any other letter.
    blocking: int | None = None
    ordering_key: str | None = None

    @property
    def attempt_groups(self) -> list[AttemptGroup]:
        return attempt_groups(self.letter, self.replay_jobs)


def pending_total(using: str) -> int:
    """Pending dead letters in the queue database `using`, from its counters."""
    return PendingCount.objects.using(using).aggregate(n=Sum("pending"))["n"] or 0


def detail(pk: int, *, redacted: bool = True, using: str = "default") -> Detail:
    """Unredacted only for a caller that has checked and recorded the reveal
    (redaction.record_reveal). `using`: the queue database the letter is in; its history is
    the ledger rows of runs on that database (ids repeat across databases)."""
    letter = DeadLetter.objects.using(using).get(pk=pk)
    shown = redaction.redact if redacted else redaction.unmasked
    payload = {"args": shown(letter.args), "kwargs": shown(letter.kwargs)}
    history = list(
        ReplayItem.objects.filter(dead_letter_id=letter.pk, run__selection__database=using)
        .select_related("run")
        .order_by("-id")
    )
    _preload_jobs(history, using)
    _preload_letter_states(history, using)
    origin = sources.describe(letter, payload=payload)
    original_job = (
        Job.objects.using(using).filter(pk=letter.original_job_id).first()
        if letter.original_job_id
        else None
    )
    return Detail(
        letter=letter,
        payload_json=redaction.pretty(payload),
        original_job=original_job,
        replay_jobs=list(letter.replay_jobs.order_by("id")),
        payload_summarised=origin.payload_summarised,
        origin=origin,
        history=history,
        **blocking(letter, original_job, using=using),
    )


def blocking(letter: DeadLetter, job: Job | None, *, using: str = "default") -> dict:
    """For a letter whose job (`job`, read by the caller) holds its ordering key back
    ("block"): the key, and how many of its ready jobs come after it (0 once the letter is
    resolved). Empty for any other."""
    if job is None or job.ordering_key is None or job.ordering_on_dead != "block":
        return {}
    held = 0
    if letter.state in (DeadLetterState.PENDING, DeadLetterState.REPLAYING):
        held = (
            Job.objects.using(using)
            .filter(ordering_key=job.ordering_key, state="ready")
            .annotate(position=Coalesce("ordering_position", "id", output_field=BigIntegerField()))
            .filter(position__gt=job.position)
            .count()
        )
    return {"blocking": held, "ordering_key": job.ordering_key}


@dataclass
class AttemptGroup:
    """The attempts one job made: a letter that died again holds its original job's attempts
    and then each replay's, each numbered from 1 again."""

    label: str
    job_id: int | None
    errors: list


def attempt_groups(letter: DeadLetter, replay_jobs: list[Job]) -> list[AttemptGroup]:
    """The letter's attempt records split where the numbering starts again (a replay's job),
    each group named after its job: the original, then replays in order."""
    runs: list[list] = []
    previous = None
    for error in letter.errors:
        number = error.get("attempt") if isinstance(error, dict) else None
        if not runs or (
            isinstance(number, int) and isinstance(previous, int) and number <= previous
        ):
            runs.append([])
        runs[-1].append(error)
        previous = number
    groups = []
    for index, errors in enumerate(runs):
        if index == 0:
            groups.append(AttemptGroup("Original job", letter.original_job_id, errors))
        else:
            job = replay_jobs[index - 1] if index - 1 < len(replay_jobs) else None
            groups.append(AttemptGroup(f"Replay {index}", job.pk if job else None, errors))
    return groups


# --- preview ------------------------------------------------------------------------------


@dataclass
class Preview:
    action: str
    total: int = 0
    will_act: int = 0
    by_type: list[tuple[str, int]] = field(default_factory=list)
    previously_replayed: int = 0
    poisoned: int = 0
    skipped: list[tuple[str, int]] = field(default_factory=list)
    sample: list[DeadLetter] = field(default_factory=list)  # the first few, in the run's order
    # The letters' own queues, most first, and how many of them no replay may send to another
    # queue (their source replays where they came from: services.check_destination).
    queues: list[tuple[str, int]] = field(default_factory=list)
    fixed_queue: int = 0
    # The paused queues of the database, by name, with who paused them: a replay to one is
    # allowed (its jobs wait until it is resumed), and said.
    paused: dict[str, str] = field(default_factory=dict)

    @property
    def skip_count(self):
        return self.total - self.will_act


def schedules():
    """Every schedule with its last tick's outcome and its last job's state (a query)."""
    latest = ScheduleRun.objects.filter(schedule=OuterRef("pk")).order_by("-at", "-id")
    return Schedule.objects.order_by("name").annotate(
        last_state=F("last_job__state"),
        last_outcome=Subquery(latest.values("outcome")[:1]),
        last_note=Subquery(latest.values("note")[:1]),
    )


def preview(ids, *, action: str, allow_poisoned: bool = False, using: str = "default") -> Preview:
    """What a run of these ids (letters of the queue database `using`) would do now, by the
    same rules the run applies per batch."""
    max_replays = setting("MAX_REPLAYS")
    result = Preview(action=action, total=len(ids))
    types, skipped, queues, fixed = Counter(), Counter(), Counter(), Counter()
    found = 0
    # Counted by the database in one statement, a row per kind of letter: a 100,000-letter
    # selection reads a few hundred rows, not 100,000 (ids are distinct: services._selected).
    kinds = (
        DeadLetter.objects.using(using)
        .filter(store.Among(ids))
        .order_by()
        .values_list("state", "task_path", "queue_name", "source")
        .annotate(
            n=Count("pk"),
            replayed=Count("pk", filter=Q(replays__gt=0)),
            poisoned=Count("pk", filter=Q(replays__gte=max_replays)),
        )
    )
    for state, path, queue, source, n, replayed, poisoned in kinds:
        found += n
        types[path] += n
        queues[queue] += n
        fixed[source] += n
        result.previously_replayed += replayed
        if state != DeadLetterState.PENDING:
            skipped[store.SKIP_REASONS[state]] += n
        elif action != Action.REPLAY:
            result.will_act += n
        elif allow_poisoned:
            result.poisoned += poisoned
            result.will_act += n
        else:
            result.poisoned += poisoned
            if poisoned:
                skipped[POISON_REASON.format(n=max_replays)] += poisoned
            result.will_act += n - poisoned
    if found < len(ids):
        skipped[store.SKIP_MISSING] += len(ids) - found
    result.by_type = types.most_common()
    result.skipped = skipped.most_common()
    result.queues = queues.most_common()
    result.fixed_queue = sum(n for name, n in fixed.items() if not sources.replays_to_queue(name))
    if action == Action.REPLAY:
        result.paused = {name: p.paused_by for name, p in store.queues.paused(using).items()}
    first = ids[:PREVIEW_SAMPLE]
    rows = DeadLetter.objects.using(using).filter(pk__in=first).only(*SAMPLED).in_bulk()
    result.sample = [rows[pk] for pk in first if pk in rows]
    return result


PREVIEW_SAMPLE = 20
SAMPLED = ("task_path", "error_class", "attempts", "replays", "state", "dead_lettered_at")


@dataclass(frozen=True)
class LastRate:
    rate: float
    run: int
    job_type: str


def last_rate(job_types) -> LastRate | None:
    """The rate of the newest replay run of one of `job_types`: what a replay of them starts
    with (an operator who paced one replay of a task paces the next alike)."""
    wanted = set(job_types)
    recent = (
        ReplayRun.objects.filter(action=Action.REPLAY)
        .order_by("-pk")
        .values_list("pk", "rate", "job_types")[:LAST_RATE_RUNS]
    )
    for pk, rate, types in recent:
        shared = wanted.intersection(types if isinstance(types, list) else ())
        if shared:
            return LastRate(rate=rate, run=pk, job_type=min(shared))
    return None


LAST_RATE_RUNS = 50  # runs looked back through; older paces are not worth a longer read


# --- audit --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditFilter:
    """What the Audit page is narrowed to: who acted, the action, a target (its kind, and its id
    or name), the channel, a time range (`until` exclusive). `job_type` narrows the replay
    runs' section only (a run records its job types; an entry names its targets)."""

    operator: str = ""
    action: str = ""
    target_kind: str = ""
    target: str = ""
    channel: str = ""
    since: datetime | None = None
    until: datetime | None = None
    job_type: str = ""

    def as_json(self) -> dict:
        """The filter as an export of the log records it."""
        return {
            k: (v.isoformat() if isinstance(v, datetime) else v)
            for k, v in asdict(self).items()
            if v and k != "job_type"
        }


def audit_runs(f: AuditFilter, *, before: int | None = None, size: int = 50):
    """A page of the replay runs the filter matches, newest first, and the next page's cursor:
    by operator, job type, time, and a run named as the target. A filter on what only entries
    have (an action, a channel, another kind of target) matches no run: ([], None)."""
    if f.action or f.channel or (f.target_kind and f.target_kind != "run"):
        return [], None
    runs = ReplayRun.objects.all()
    if f.target:
        run_id = paging.BY_ID.decode(f.target)
        runs = runs.filter(pk=run_id[1]) if run_id else runs.none()
    if f.operator:
        runs = runs.filter(operator_name=f.operator)
    if f.job_type:
        # The run's recorded job types find it before its first batch (queued, paused); the
        # ledger finds runs older than that record.
        runs = runs.filter(
            Q(job_types__icontains=json.dumps(f.job_type))
            | Q(pk__in=ReplayItem.objects.filter(task_path=f.job_type).values("run_id"))
        )
    if f.since:
        runs = runs.filter(created_at__gte=f.since)
    if f.until:
        runs = runs.filter(created_at__lt=f.until)
    found = paging.page(runs, paging.BY_ID, after=before, size=size)
    return found.rows, found.next_cursor


@dataclass
class RunTimes:
    """How long a run took, or how long it has left: `took` once it ended (from its first batch,
    or its confirmation if none ran), `eta` while it runs (the items left at its rate, or at
    the pace it kept so far when unlimited; None before a first batch shows the pace)."""

    took: float | None = None
    eta: float | None = None


def run_times(run: ReplayRun, now: datetime) -> RunTimes:
    if run.finished_at:
        return RunTimes(took=(run.finished_at - (run.started_at or run.created_at)).total_seconds())
    left = run.requested - run.processed
    if not run.is_active or left <= 0:
        return RunTimes()
    if run.rate:
        return RunTimes(eta=left / run.rate)
    if run.processed and run.started_at:
        return RunTimes(eta=(now - run.started_at).total_seconds() / run.processed * left)
    return RunTimes()


def run_items(
    run: ReplayRun, *, after: int | None = None, size: int = 100, through_batch: int | None = None
):
    """The run's ledger in order; with `through_batch`, only the rows of batches up to it (the
    ones a run row read just before counts: each batch writes its rows and counts together)."""
    using = run.selection.database
    items = run.items.order_by("id")
    if through_batch is not None:
        items = items.filter(batch__lte=through_batch)
    found = paging.page(items, paging.BY_ID, after=after, size=size, newest=False)
    _preload_jobs(found.rows, using)
    _preload_letter_states(found.rows, using)
    return found.rows, found.next_cursor


def _preload_jobs(items, using: str):
    """One read for the jobs the ledger rows made, from the queue database they were made in
    (the ledger is on default, its job ids name rows of `using`): `item.job` is that job, or
    None once pruned."""
    ids = {item.job_id for item in items if item.job_id is not None}
    jobs = Job.objects.using(using).in_bulk(list(ids)) if ids else {}
    cache = ReplayItem._meta.get_field("job")
    for item in items:
        if item.job_id is not None:
            # Cached, not assigned: assigning None would clear job_id too.
            cache.set_cached_value(item, jobs.get(item.job_id))


def _preload_letter_states(items, using: str = "default"):
    """One read for the letters of external replays (outbox, django-q2): their outcome and
    the source that names what the replay made."""
    ids = {item.dead_letter_id for item in items if item.external_id}
    if not ids:
        return
    rows = (
        DeadLetter.objects.using(using)
        .filter(pk__in=ids)
        .values_list("pk", "state", "replay_ref", "source")
    )
    states = {pk: (state, ref, source) for pk, state, ref, source in rows}
    for item in items:
        if item.external_id and item.dead_letter_id in states:
            state, ref, source = states[item.dead_letter_id]
            item.letter_state = (state, ref)
            item.letter_source = source


def audit_matching(f: AuditFilter, *, using: str = "default"):
    """The audit log's entries the filter matches (jobqueue.AuditEntry), unordered. A target is
    found through its lookup rows (AuditTarget: kind, ref), as each target's history is."""
    from jobqueue.models import AuditEntry, AuditTarget

    rows = AuditEntry.objects.using(using).all()
    if f.operator:
        rows = rows.filter(actor=f.operator)
    if f.action:
        rows = rows.filter(action=f.action)
    if f.channel:
        rows = rows.filter(channel=f.channel)
    if f.target:
        named = AuditTarget.objects.using(using).filter(kind=f.target_kind, ref=f.target)
        rows = rows.filter(pk__in=named.values("entry"))
    elif f.target_kind:
        rows = rows.filter(target_kind=f.target_kind)
    if f.since:
        rows = rows.filter(at__gte=f.since)
    if f.until:
        rows = rows.filter(at__lt=f.until)
    return rows


def audit_entries(
    f: AuditFilter, *, after=None, before=None, size: int = 50, using: str = "default"
) -> paging.Page:
    """A page of the one audit log (jobqueue.AuditEntry, from every channel), newest first (by
    its id: the order entries were appended), of the entries the audit filter matches."""
    return paging.page(
        audit_matching(f, using=using), paging.BY_ID, after=after, before=before, size=size
    )


def audit_links(entries, *, using: str = "default") -> None:
    """Set `entry.links` on each entry: (text, URL or None) for each target it names (at most
    10, `entry.more_targets` the rest), each to the target's page. A schedule's row on the
    schedules page is found by its name (one read for the page)."""
    from django.urls import reverse

    from jobqueue.models import Schedule

    names = {t for e in entries if e.target_kind == "schedule" for t in e.targets[:10]}
    schedule_ids = (
        dict(Schedule.objects.using(using).filter(name__in=names).values_list("name", "pk"))
        if names
        else {}
    )
    overview = reverse("deadletters:overview")
    for entry in entries:
        shown = entry.targets[:10]
        entry.more_targets = max(len(entry.targets) - len(shown), 0)
        params = entry.params if isinstance(entry.params, dict) else {}
        entry.links = [
            _target_link(entry.target_kind, t, params, schedule_ids, overview) for t in shown
        ]


def _target_link(kind: str, ref: str, params: dict, schedule_ids: dict, overview: str):
    from django.urls import reverse

    number = paging.BY_ID.decode(ref) is not None
    if kind == "letter" and number:
        backend = databases.of_database(params.get("database", "default"))
        edit = params.get("edit")  # an edit's entry: to the edit's diff on the letter's page
        anchor = f"#edit-{edit}" if isinstance(edit, int) and not isinstance(edit, bool) else ""
        return f"#{ref}", f"{overview}{ref}/{databases.query(backend)}{anchor}"
    if kind == "run" and number:
        return f"#{ref}", reverse("deadletters:run", args=[int(ref)])
    if kind == "job" and number:
        return ref, reverse("deadletters:job", args=[int(ref)])
    if kind == "workflow" and number:
        return f"#{ref}", reverse("deadletters:workflow", args=[int(ref)])
    if kind == "selection":
        # A letters selection's page is its run's, once confirmed.
        run = params.get("run")
        if isinstance(run, int) and not isinstance(run, bool) and run > 0:
            return f"#{ref} (run #{run})", reverse("deadletters:run", args=[run])
        return f"#{ref}", None
    if kind == "queue":
        return ref, reverse("deadletters:health") + "#queue-control"
    if kind == "schedule" and ref in schedule_ids:
        return ref, reverse("deadletters:schedules") + f"#schedule-{schedule_ids[ref]}"
    return ref, None


def recorded_filter_for(recorded: dict, user) -> list[tuple[str, object]]:
    """A recorded filter as `user` may see it (templatetags.console.recorded_filter)."""
    from .templatetags.console import recorded_filter

    return recorded_filter(recorded, user)


def audit_params(entry, user) -> list[tuple[str, str]]:
    """An entry's parameters as the page and an export show them to `user`: masked as payloads
    are (redaction.redact), and a recorded filter's payload search words masked for anyone who
    may not reveal payloads (templatetags.console.recorded_filter), in the order of their names.
    Each value as JSON text, but plain text as itself."""
    params = redaction.redact(entry.params if isinstance(entry.params, dict) else {})
    shown = []
    # By name: a JSON column may keep keys in its own order (PostgreSQL's jsonb does).
    for name, value in sorted(params.items(), key=lambda item: str(item[0])):
        if name == "filter" and isinstance(value, dict):
            value = dict(recorded_filter_for(value, user))
        shown.append(
            (
                str(name),
                value
                if isinstance(value, str)
                else json.dumps(value, sort_keys=True, ensure_ascii=False),
            )
        )
    return shown
