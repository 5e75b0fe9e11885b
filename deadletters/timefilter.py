"""The one parse of a time bound, for every time filter of the console: the letters list and
its export, the jobs browser, the audit log, the timing windows, the JSON API's parameters and
the commands' --since/--until (through the forms, deadletters.forms.TimeBoundField).

A bound is written as one of:

    2026-12-04              a day: from its start; as an upper bound, to its end (included)
    2026-12-04 14:30        a time of day (also 14:30:15, and ISO 8601's T between them)
    2026-12-04T14:30+01:00  an ISO 8601 time with its offset (or Z): that moment
    15m  1h  6h  24h  7d    a span back from now (m, h, d, w; "last 1 h", "90 min" too)
    deploy                  the newest deploy marker (jobqueue.store.deploys): "since deploy"
    deploy:VERSION          the newest deploy marker of that version
    now

Days and times without an offset are read in the console's time zone (REDRIVE["TIME_ZONE"],
deadletters.conf.zone), where the console writes every time. Anything else is a `BadBound`
whose message says what is accepted: never an exception a page or the API turns into a 5xx.

Deploy markers live in each queue database (a worker writes its own); a bound and a chart read
them from every Redrive backend's database together (`deploys_between`, `latest_deploy`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from datetime import timezone as fixed_offset

from django.utils import timezone

from jobqueue import store

from . import conf, databases

# The earliest and latest day a bound names: Python's datetimes overflow past year 1 and 9999
# once a zone's offset or a day is added, and no job or letter lies outside these.
FIRST_DAY = date(1900, 1, 1)
LAST_DAY = date(9998, 12, 31)
# A span back from now at most this long (a century); beyond it the subtraction leaves the
# range above, and no one means it.
LONGEST = timedelta(days=36_525)
MAX_CHARS = 64

# The choices a time input offers (its datalist) and the timing page's windows.
SUGGESTED = ("15m", "1h", "6h", "24h", "7d", "deploy")

ACCEPTED = (
    "a day (2026-12-04), a time (2026-12-04 14:30, or ISO 8601 with an offset), a span back "
    "from now (15m, 1h, 6h, 24h, 7d) or deploy (the last deploy; deploy:VERSION for one "
    "version's)"
)

_DAY = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", re.ASCII)
_MOMENT = re.compile(
    r"(?P<day>[0-9]{4}-[0-9]{2}-[0-9]{2})[ T](?P<h>[0-9]{2}):(?P<m>[0-9]{2})"
    r"(?::(?P<s>[0-9]{2})(?:[.,](?P<frac>[0-9]{1,6}))?)?"
    r"(?:\s*(?P<z>[Zz])|\s*(?P<sign>[+-])(?P<oh>[0-9]{2}):?(?P<om>[0-9]{2}))?",
    re.ASCII,
)
_SPAN = re.compile(
    r"(?:last\s+)?(?P<n>[0-9]{1,7})\s*(?P<unit>m|min|mins|minutes?|h|hrs?|hours?|d|days?"
    r"|w|weeks?)(?:\s+ago)?",
    re.ASCII | re.IGNORECASE,
)
_UNITS = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}
_UNITS["w"] = timedelta(days=7)
_DEPLOY = re.compile(r"(?:since\s+)?(?:the\s+)?(?:last\s+)?deploy(?::(?P<version>.+))?", re.I)


class BadBound(ValueError):
    """Text that names no time; its message says why and what is accepted."""


@dataclass(frozen=True)
class Bound:
    """A parsed bound: `at` the moment (aware), `text` what was written (for links, which stay
    relative: "1h" in a URL means the last hour whenever it is opened), `label` as a person reads
    it, and `deploy` the marker it names, if any."""

    text: str
    at: datetime
    label: str
    deploy: object = None
    day: bool = False  # a whole day (as an upper bound: its end)
    span: bool = False  # a span back from now ("1h")

    def __str__(self):
        return self.text


def parse(text, *, end: bool = False, now: datetime | None = None, zone=None) -> Bound:
    """The bound `text` names: the start of a time range, or with `end` its end (exclusive; a
    day as an end is the start of the next day, so the day is included). BadBound otherwise."""
    if not isinstance(text, str):
        raise BadBound(f"Not a time: write {ACCEPTED}.")
    shown = " ".join(text.split())
    if not shown:
        raise BadBound(f"Empty: write {ACCEPTED}.")
    if len(shown) > MAX_CHARS:
        raise BadBound(f"Not a time (longer than {MAX_CHARS} characters): write {ACCEPTED}.")
    now = now or timezone.now()
    zone = zone or conf.zone()
    if match := _DAY.fullmatch(shown):
        day = _day(match, shown)
        moment = timezone.make_aware(
            datetime.combine(day + timedelta(days=1) if end else day, time.min), zone
        )
        return Bound(shown, moment, day.isoformat() + (" (included)" if end else ""), day=True)
    if match := _MOMENT.fullmatch(shown):
        moment = _moment(match, shown, zone)
        return Bound(shown, moment, _local(moment))
    if match := _SPAN.fullmatch(shown):
        n, unit = int(match["n"]), match["unit"][0].lower()
        span = n * _UNITS[unit]
        if not timedelta(0) < span <= LONGEST:
            raise BadBound(f"{shown!r}: a span back from now is from 1 minute to 100 years.")
        compact = f"{n}{unit}"
        return Bound(compact, now - span, f"the last {_span_words(n, unit)}", span=True)
    if match := _DEPLOY.fullmatch(shown):
        version = (match["version"] or "").strip()
        deploy = latest_deploy(version)
        if deploy is None:
            raise BadBound(
                f"No deploy of {version!r} is recorded."
                if version
                else "No deploy is recorded yet: `manage.py deploy mark --version X` records "
                "one (workers do when they start with a new REDRIVE['VERSION'])."
            )
        text = f"deploy:{version}" if version else "deploy"
        return Bound(text, deploy.at, f"deploy {deploy.version} ({_local(deploy.at)})", deploy)
    if shown.lower() == "now":
        return Bound("now", now, "now")
    raise BadBound(f"Not a time: {shown[:40]!r}. Write {ACCEPTED}.")


def _day(match, shown) -> date:
    try:
        day = date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        raise BadBound(f"Enter a valid date: {shown!r} is no day of the calendar.") from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise BadBound(f"Enter a date between {FIRST_DAY.isoformat()} and {LAST_DAY.isoformat()}.")
    return day


def _moment(match, shown, zone) -> datetime:
    day = _day(_DAY.fullmatch(match["day"]), shown)
    try:
        clock = time(
            int(match["h"]),
            int(match["m"]),
            int(match["s"] or 0),
            int((match["frac"] or "0").ljust(6, "0")),
        )
    except ValueError:
        raise BadBound(f"{shown!r}: no such time of day (00:00 to 23:59:59).") from None
    moment = datetime.combine(day, clock)
    if match["z"]:
        return moment.replace(tzinfo=UTC)
    if match["sign"]:
        hours, minutes = int(match["oh"]), int(match["om"])
        if hours > 23 or minutes > 59:
            raise BadBound(f"{shown!r}: an offset is from -23:59 to +23:59.")
        offset = timedelta(hours=hours, minutes=minutes)
        return moment.replace(tzinfo=fixed_offset(-offset if match["sign"] == "-" else offset))
    return timezone.make_aware(moment, zone)


def _span_words(n: int, unit: str) -> str:
    word = {"m": "minute", "h": "hour", "d": "day", "w": "week"}[unit]
    return f"{word}" if n == 1 else f"{n} {word}s"


def _local(moment: datetime) -> str:
    local = moment.astimezone(conf.zone())
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


# --- deploy markers of every queue database -----------------------------------------------------


def latest_deploy(version: str = ""):
    """The newest deploy marker of any Redrive backend's database (of `version` if given)."""
    found = [
        store.deploys.latest_of(version, using=db) if version else store.deploys.latest(using=db)
        for db in _databases()
    ]
    found = [d for d in found if d is not None]
    return max(found, key=lambda d: d.at, default=None)


def deploys_between(start: datetime, end: datetime) -> list:
    """The deploy markers of every Redrive backend's database from `start` to `end`, oldest
    first; a version marked in several databases in the same minute (each one's workers
    recorded it) is one deploy."""
    seen, out = set(), []
    markers = [d for db in _databases() for d in store.deploys.between(start, end, using=db)]
    for deploy in sorted(markers, key=lambda d: d.at):
        key = (deploy.version, deploy.at.replace(second=0, microsecond=0))
        if key not in seen:
            seen.add(key)
            out.append(deploy)
    return out


def recent_deploys(limit: int = 10) -> list:
    """The newest deploy markers of every Redrive backend's database, newest first."""
    markers = [d for db in _databases() for d in store.deploys.recent(limit, using=db)]
    return sorted(markers, key=lambda d: d.at, reverse=True)[:limit]


@dataclass
class DeployMark:
    """A deploy drawn on a time chart: a vertical line at `x` with the version above it."""

    x: float
    version: str  # as drawn (cut to fit)
    title: str  # what the hover says: the whole version, when, who, the note
    label_x: float = 0.0  # where the version is written: beside the line, inside the chart
    anchor: str = "start"


# Characters of a version a chart draws (the hover has it whole).
MARK_CHARS = 12


def deploy_marks(start, now, x_of) -> list[DeployMark]:
    """The deploys from `start` to `now` (deadletters.deploys_between) as marks, each
    at `x_of(moment)`."""
    zone = conf.zone()
    marks = []
    middle = x_of(start + (now - start) / 2)
    for deploy in deploys_between(start, now):
        local = deploy.at.astimezone(zone)
        shown = deploy.version if len(deploy.version) <= MARK_CHARS else deploy.version[:11] + "…"
        note = f": {deploy.note}" if deploy.note else ""
        x = round(x_of(deploy.at), 1)
        right = x > middle  # written on the line's left, so it stays inside the chart
        marks.append(
            DeployMark(
                x=x,
                label_x=x - 2 if right else x + 2,
                anchor="end" if right else "start",
                version=shown,
                title=f"Deploy {deploy.version} at {local:%Y-%m-%d %H:%M} {local.tzname()} "
                f"by {deploy.recorded_by}{note}",
            )
        )
    return marks


def _databases() -> list[str]:
    return list(dict.fromkeys(b.database for b in databases.backends())) or ["default"]
