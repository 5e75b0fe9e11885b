"""The console's template helpers: links to pages the host project may or may not have (the
console never reverses a URL name it does not own, so it renders in any project, mounted at any
prefix), and the one way every page writes a time."""

import re
from datetime import UTC, datetime

from django import template
from django.conf import settings
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from deadletters import conf

register = template.Library()


@register.simple_tag
def logout_url() -> str | None:
    """settings.LOGOUT_URL (a URL name or path) if the host sets one; no logout button else."""
    target = getattr(settings, "LOGOUT_URL", None)
    if not target:
        return None
    try:
        return resolve_url(target)
    except NoReverseMatch:
        return None


@register.simple_tag
def admin_url(name: str, *args) -> str | None:
    """An admin page's URL, or None where the host has no admin (or not that model's page)."""
    try:
        return reverse(f"admin:{name}", args=args)
    except NoReverseMatch:
        return None


# --- navigation --------------------------------------------------------------------------
# The top bar's sections: label, URL name (and query), the key after "g" that goes there
# (console.js), and the console's URL names that belong to the section, so the page one is on
# is marked aria-current="page".

NAV = (
    ("Health", "health", "", "h", {"health", "task-timing", "dashboard"}),
    ("Overview", "overview", "", "o", {"overview"}),
    ("Jobs", "jobs", "", "j", {"jobs", "job", "job-confirm"}),
    ("Workflows", "workflows", "", "w", {"workflows", "workflow"}),
    ("Schedules", "schedules", "", "s", {"schedules"}),
    ("Dead letters", "list", "?state=pending", "l", {"list", "detail", "edit", "confirm", "run"}),
    ("Audit log", "audit", "", "a", {"audit"}),
    ("API tokens", "tokens", "", "t", {"tokens"}),
)


@register.simple_tag(takes_context=True)
def nav_links(context) -> list[dict]:
    request = context.get("request")
    match = getattr(request, "resolver_match", None)
    # The host may mount the health page at its root too (config/urls.py's "dashboard").
    here = match.url_name if match and match.namespace in ("deadletters", "") else None
    return [
        {
            "label": label,
            "url": reverse(f"deadletters:{name}") + query,
            "key": key,
            "current": here in names,
        }
        for label, name, query, key, names in NAV
    ]


# --- identifiers ---------------------------------------------------------------------------
# Dotted paths, CamelCase classes, snake_case names and worker ids have no spaces, so a narrow
# cell either breaks them anywhere (`PermanentEr|ror`) or overflows. They get a break
# opportunity (<wbr>) after each separator and between the words of a CamelCase name, and are
# styled (code.ident) to break nowhere else.

_IDENT_BREAKS = re.compile(
    r"(?<=[./:_@,])(?=.)"  # after a separator
    r"|(?<=[a-z0-9])(?=[A-Z])"  # sendReceipt, PermanentError
    r"|(?<=[A-Z])(?=[A-Z][a-z])"  # HTTPError → HTTP|Error
)


def ident_html(value) -> str:
    """`value` escaped, a <wbr> at each place an identifier may break."""
    return "<wbr>".join(escape(part) for part in _IDENT_BREAKS.split(str(value)))


@register.filter
def ident(value, extra=""):
    """An identifier as `<code class="ident">` (and the classes `extra` names), breakable only
    between its segments."""
    if value in (None, ""):
        return "—"
    classes = escape(f"ident {extra}".strip())
    return mark_safe(f'<code class="{classes}">{ident_html(value)}</code>')


@register.filter
def breakable(value):
    """An identifier's text with its break opportunities, for inside a link or a heading."""
    return mark_safe(f'<span class="ident">{ident_html(value)}</span>')


@register.filter
def traceback_blocks(text):
    """A stored traceback split into frames (deadletters/traceback.html shows it)."""
    from deadletters.tracebacks import split

    return split(text or "")


# --- time ---------------------------------------------------------------------------------
# One way to show an instant on every page: the absolute time in the console's zone
# (REDRIVE["TIME_ZONE"], UTC by default) inside <time datetime=…>, with the relative age only
# beside it or on hover, never instead of it.

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def _instant(value) -> datetime | None:
    if isinstance(value, str):  # attempt records keep their times as ISO text
        value = parse_datetime(value)
    if not isinstance(value, datetime):
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value


def absolute(value) -> str:
    """`2026-11-30 14:49:17 UTC` (or the console zone's abbreviation)."""
    local = value.astimezone(conf.zone())
    return f"{local.strftime(TIME_FORMAT)} {local.tzname()}"


def relative(value, now=None) -> str:
    """A short age: "just now", "42 s ago", "3 min ago", "2 h 5 min ago", "3 d 4 h ago";
    "in 5 min" for a time still to come."""
    seconds = int(((now or timezone.now()) - value).total_seconds())
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 5:
        return "just now"
    if seconds < 60:
        text = f"{seconds} s"
    elif seconds < 3600:
        text = f"{seconds // 60} min"
    elif seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        text = f"{hours} h {minutes} min" if minutes else f"{hours} h"
    else:
        days, hours = divmod(seconds // 3600, 24)
        text = f"{days} d {hours} h" if hours else f"{days} d"
    return f"in {text}" if future else f"{text} ago"


@register.filter
def when(value, style="hover"):
    """An instant as `<time datetime="…Z" title="3 min ago">2026-11-30 14:49:17 UTC</time>`.

    style "hover" puts the age in the title; "beside" also writes it after the time;
    "plain" gives the absolute time alone (for a title attribute or text)."""
    instant = _instant(value)
    if instant is None:
        return "—" if value in (None, "") else value
    if style == "plain":
        return absolute(instant)
    stamp = instant.astimezone(UTC).isoformat().replace("+00:00", "Z")
    ago = relative(instant)
    html = format_html('<time datetime="{}" title="{}">{}</time>', stamp, ago, absolute(instant))
    if style == "beside":
        html = format_html('{} <span class="ago">({})</span>', html, ago)
    return html


@register.filter
def duration(seconds) -> str:
    """A length of time: "0.4 s", "42 s", "3 min 5 s", "2 h 5 min", "3 d 4 h"."""
    if seconds is None:
        return "—"
    seconds = max(0.0, float(seconds))
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    if whole < 86400:
        hours, minutes = divmod(whole // 60, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(whole // 3600, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def recorded_filter(recorded, user):
    """A run's or an export's recorded filter as (name, value) pairs for `user`: a search that
    looked in payload values is shown masked to anyone who may not reveal them (the words
    searched, and so the masked value they matched, would be read off the audit)."""
    from deadletters.redaction import REDACTED, REVEAL_PERMISSION

    if not isinstance(recorded, dict):
        return []
    hide = recorded.get("payload_search") and not user.has_perm(REVEAL_PERMISSION)
    return [
        (name, REDACTED if hide and name == "q" else value)
        for name, value in recorded.items()
        if name != "payload_search"
    ]
