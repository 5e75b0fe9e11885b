"""Dead-letter sources: where a dead letter came from, and how it is replayed and described.

A source is one object implementing `Source`. `jobqueue.store.replay` and `discard` lock the
letters, skip those that are missing or not pending (`dead_letters.classify`, the one place
that says why), then hand each source its own pending letters; the console, the CLI, replay
runs and the audit only ever reach a source through `get(letter.source)`.

Built in: "jobqueue" (jobs), "outbox" (outbox messages) and "django_q2" (django-q2 task
failures), each imported the first time a letter of it is handled, so a project without
django-q2 never imports it. A new source is one module with a `Source` implementation and one
settings entry: its dotted path in the console's SOURCES setting, which the deadletters app
passes to `register` at start-up (or call `register` from your own app's ready()).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from jobqueue.models import DeadLetter, Job


@dataclass(frozen=True, slots=True)
class Replayed:
    """A letter replayed: the new job of ours, or the reference of what was made elsewhere
    (the letter's `replay_ref`: the outcome of this replay is read back through it)."""

    job: Job | None = None
    ref: str | None = None


@dataclass(frozen=True, slots=True)
class Link:
    url: str
    title: str = ""
    css_class: str = ""
    # Who may follow it (an admin page opens only for staff holding the model's view
    # permission): the console shows the link to them alone, never a way to "not authorized".
    permission: str = ""
    staff_only: bool = False

    def open_to(self, user) -> bool:
        return (user.is_staff or not self.staff_only) and (
            not self.permission or user.has_perm(self.permission)
        )


@dataclass(frozen=True, slots=True)
class Made:
    """A replay's product outside our job table, for people: what it is ("django-q2 task") and
    the reference to show beside it ("" when there is none worth showing)."""

    what: str
    reference: str = ""


@dataclass(frozen=True, slots=True)
class Description:
    """What the console shows about a letter's origin: its source's label and, where the
    source has one, a reference to the original (named, e.g. "task") with a link to it."""

    label: str
    reference_name: str = ""
    reference: str = ""
    link: Link | None = None
    # Arguments shown as `$not_json` summaries, not the values themselves.
    payload_summarised: bool = False


@runtime_checkable
class Source(Protocol):
    name: str  # the letters' `source` column
    label: str  # for people: filter choices, the detail page
    # (module, pip requirement) a configured source needs installed, or None.
    requires: tuple[str, str] | None

    def replay(
        self, letters: Sequence[DeadLetter], *, now: datetime, using: str
    ) -> dict[int, Replayed | str]:
        """Replay pending, locked letters in the caller's transaction. Per letter id: Replayed,
        or the reason it was skipped (then nothing of it may have been written). The caller
        marks the replayed letters 'replaying'."""
        ...

    def discard(
        self, letters: Sequence[DeadLetter], *, now: datetime, using: str
    ) -> dict[int, str | None]:
        """Let go of whatever the source keeps for these pending, locked letters. Per letter
        id: None to discard it, or the reason it was skipped. The caller marks them."""
        ...

    def describe(self, letter: DeadLetter, *, payload=None) -> Description:
        """The letter's origin for the console; `payload` is what the page will show."""
        ...

    def made(self, ref: str) -> Made:
        """What a replay that made no job of ours produced, from its `Replayed.ref`."""
        ...

    # Optional: a source whose replays are jobs of ours may send them to another queue than
    # the letter's (an operator's destination, issue 32); it says so with
    #     replays_to_queue = True
    # and takes `to_queue` in replay(letters, *, now, using, to_queue=None). The others
    # (outbox messages, django-q2 tasks, broker messages) replay where they came from.
    #
    # Optional: a source whose letters may be replayed with an operator's edited payload
    # implements
    #     replay_edited(letter, args, kwargs, *, now, using) -> Replayed | str
    # for one pending, locked letter, in the caller's transaction, with the payload already
    # checked (jobqueue.store.replay_edited); the letter itself keeps its own payload.


class BaseSource:
    """Defaults a source may keep: discarding needs nothing of the source; no link."""

    name = ""
    label = ""
    requires: tuple[str, str] | None = None
    replays_to_queue = False

    def discard(self, letters, *, now, using):
        return {letter.pk: None for letter in letters}

    def describe(self, letter, *, payload=None) -> Description:
        return Description(label=self.label)

    def made(self, ref: str) -> Made:
        return Made(f"{self.label} reference", ref)


BUILTIN = {
    "jobqueue": "jobqueue.store.sources.job_letters.JobLetters",
    "outbox": "jobqueue.store.sources.outbox_letters.OutboxLetters",
    "django_q2": "jobqueue.store.sources.django_q2_letters.DjangoQ2Letters",
    "rabbitmq": "jobqueue.store.sources.rabbitmq_letters.RabbitMQLetters",
    "sqs": "jobqueue.store.sources.sqs_letters.SQSLetters",
}
_paths: dict[str, str] = dict(BUILTIN)
_loaded: dict[str, Source] = {}


class UnknownSource(LookupError):
    pass


def register(source: Source | str) -> Source:
    """Add a source: an instance or class implementing `Source`, or its dotted path."""
    if isinstance(source, str):
        source = import_string(source)
    if isinstance(source, type):
        source = source()
    if not isinstance(source, Source) or not source.name:
        raise TypeError(f"{source!r} does not implement jobqueue.store.sources.Source")
    _loaded[source.name] = source
    _paths.setdefault(source.name, f"{type(source).__module__}.{type(source).__qualname__}")
    return source


def get(name: str) -> Source:
    """The source of letters whose `source` column is `name` (imported on first use)."""
    source = _loaded.get(name)
    if source is None:
        if name not in _paths:
            raise UnknownSource(f"no dead-letter source {name!r} is registered")
        source = register(_paths[name])
    return source


def editable(name: str) -> bool:
    """Whether letters of source `name` may be replayed with an edited payload (their source
    implements `replay_edited`)."""
    try:
        return callable(getattr(get(name), "replay_edited", None))
    except UnknownSource:
        return False


def replays_to_queue(source: Source | str) -> bool:
    """Whether letters of this source (or the source named so) may be replayed to another
    queue than their own: their source says `replays_to_queue`. False for a source no longer
    registered."""
    try:
        found = get(source) if isinstance(source, str) else source
    except UnknownSource:
        return False
    return getattr(found, "replays_to_queue", False) is True


def names() -> list[str]:
    return list(_paths)


def choices() -> list[tuple[str, str]]:
    """(name, label) of every registered source, for filters."""
    return [(name, get(name).label) for name in _paths]


def describe(letter: DeadLetter, *, payload=None) -> Description:
    """The letter's origin from its source; a letter of no registered source (one removed
    from settings) is still shown, by its source's name."""
    try:
        source = get(letter.source)
    except UnknownSource:
        return Description(label=letter.source)
    return source.describe(letter, payload=payload)


def syncable(name: str | None = None) -> list:
    """The sources that mirror letters a broker keeps (they implement `sync`) and are
    configured, or the one named (UnknownSource if it is no such source or not configured)."""
    if name is not None:
        source = get(name)
        if not callable(getattr(source, "sync", None)):
            raise UnknownSource(f"dead-letter source {name!r} keeps its letters here: no sync")
        if not source.configured():
            raise UnknownSource(
                f"dead-letter source {name!r} has no queues configured "
                f"(REDRIVE[{source.settings_key!r}])"
            )
        return [source]
    found = []
    for each in list(_paths):
        try:
            source = get(each)
        except (ImportError, TypeError, UnknownSource):
            continue
        if callable(getattr(source, "sync", None)) and source.configured():
            found.append(source)
    return found


def made(source_name: str | None, ref: str) -> Made:
    """What the replay `ref` of a letter of `source_name` produced, as its source names it."""
    try:
        return get(source_name or "").made(ref)
    except UnknownSource:
        return Made("reference", ref)
