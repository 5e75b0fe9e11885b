"""Deploy markers: when which code version went out, drawn on the console's charts and behind
its "since the last deploy" filters.

A marker is recorded by a deploy pipeline (`manage.py deploy mark --version X`, `mark`) or, for
a project whose pipeline does not, by the first worker that starts with a code version other
than the newest marker's (`mark_if_new`). A worker's code version is REDRIVE["VERSION"]
(`code_version()`; the example project reads it from $REDRIVE_VERSION), set by the deploy (an
image tag, a commit, a build number); unset, workers record none: a worker cannot tell one
build from the next without being told, and reading git or a package's version at each start
would cost every worker's start and say nothing in an image without .git.

Each marker is written with its audit entry (jobqueue.store.audit, action deploy.mark) in one
transaction. Markers are numbered (Deploy.seq, unique): workers that start at once with the
same new version all try the same next number and one of them writes it; the others find it
and record nothing.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from jobqueue.conf import setting
from jobqueue.models import AuditEntry, Deploy

from . import audit
from .payloads import MAX_REASON_CHARS, storable_text

VERSION_CHARS = Deploy._meta.get_field("version").max_length
# Tries of the next number before giving up: each lost race means another marker was written.
ATTEMPTS = 5


def code_version() -> str:
    """The version of the code this process runs, as a worker's start records it:
    REDRIVE["VERSION"] ("" if unset)."""
    configured = setting("VERSION")
    return configured.strip() if isinstance(configured, str) else ""


def checked_version(version) -> str:
    """A version as a marker stores it: 1 to VERSION_CHARS characters, not blank, storable."""
    if not isinstance(version, str) or not version.strip():
        raise ValueError("a deploy's version may not be empty")
    version = version.strip()
    if len(version) > VERSION_CHARS:
        raise ValueError(f"a deploy's version is at most {VERSION_CHARS} characters")
    return storable_text(version, VERSION_CHARS)


def latest(using: str = "default") -> Deploy | None:
    """The newest marker, or None."""
    return Deploy.objects.using(using).order_by("-seq").first()


def latest_of(version: str, using: str = "default") -> Deploy | None:
    """The newest marker of `version`, or None."""
    return Deploy.objects.using(using).filter(version=version).order_by("-seq").first()


def between(start: datetime, end: datetime, using: str = "default") -> list[Deploy]:
    """The markers from `start` up to `end` (both included), oldest first."""
    return list(
        Deploy.objects.using(using).filter(at__gte=start, at__lte=end).order_by("at", "seq")
    )


def recent(limit: int = 20, using: str = "default") -> list[Deploy]:
    """The newest `limit` markers, newest first."""
    return list(Deploy.objects.using(using).order_by("-seq")[:limit])


def mark(
    version: str,
    *,
    actor: str,
    note: str = "",
    channel: str = AuditEntry.Channel.CODE,
    source: str = Deploy.Source.CODE,
    at: datetime | None = None,
    using: str = "default",
) -> Deploy:
    """Record a deploy of `version`, even if the newest marker is of the same version (a
    pipeline that says it deployed is taken at its word: a redeploy, a configuration change)."""
    version = checked_version(version)
    for _ in range(ATTEMPTS):
        newest = latest(using)
        try:
            return _write(newest, version, actor, note, channel, source, at, using)
        except IntegrityError:  # another marker took the number: number this one after it
            continue
    raise RuntimeError(f"could not number a deploy marker after {ATTEMPTS} tries")


def mark_if_new(
    version: str,
    *,
    actor: str,
    at: datetime | None = None,
    using: str = "default",
) -> Deploy | None:
    """Record a deploy of `version` unless the newest marker is of it already (then None): what a
    worker does when it starts. Workers starting at once with a new version write one marker."""
    version = checked_version(version)
    for _ in range(ATTEMPTS):
        newest = latest(using)
        if newest is not None and newest.version == version:
            return None
        try:
            return _write(
                newest,
                version,
                actor,
                "",
                AuditEntry.Channel.SYSTEM,
                Deploy.Source.WORKER,
                at,
                using,
            )
        except IntegrityError:  # another worker wrote the next marker: look at it
            continue
    return None


def _write(newest, version, actor, note, channel, source, at, using) -> Deploy:
    at = at or timezone.now()
    note = storable_text(note.strip(), MAX_REASON_CHARS) if note else ""
    # The marker first, then its audit entry: a second writer of the same number waits on the
    # unique index, not on the audit chain's head, and fails before touching the chain.
    with transaction.atomic(using=using):
        deploy = Deploy.objects.using(using).create(
            seq=newest.seq + 1 if newest else 1,
            version=version,
            at=at,
            note=note,
            source=source,
            recorded_by=storable_text(str(actor).strip(), audit.ACTOR_CHARS) or "unknown",
        )
        audit.record(
            "deploy.mark",
            actor=deploy.recorded_by,
            channel=channel,
            target_kind="deploy",
            targets=[version],
            reason=note,
            params={"seq": deploy.seq, "source": source},
            at=at,
            using=using,
        )
    return deploy
