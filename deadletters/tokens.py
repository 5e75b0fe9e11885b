"""API tokens (deadletters.ApiToken): made, revoked and checked here, for the console's page,
`manage.py apitoken` and the JSON API alike.

A token's text is `rdr_<prefix>_<secret>`: the prefix (8 hex characters) finds the row, the
secret (32 random bytes) is kept only as its SHA-256 and compared in constant time. The text is
returned once, by `create`; nothing can show it again. Each create and revoke is audited
(jobqueue.store.audit, target kind "token").
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from jobqueue import store

from .models import ApiToken
from .roles import REVOKE_ANY_TOKEN

SCOPES = ("read", "act")
DEFAULT_DAYS = 90
MAX_DAYS = 366
NAME_CHARS = ApiToken._meta.get_field("name").max_length
_TEXT = re.compile(r"rdr_([0-9a-f]{8})_([A-Za-z0-9_-]{43})")


class TokenError(ValueError):
    """A token that cannot be made or revoked as asked; the message says why."""


class NotAuthenticated(Exception):
    """No usable token: missing, malformed, unknown, wrong, expired or revoked."""


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_scopes(text) -> str:
    """A scope list ("read", "read,act", ["act"]) as stored: known scopes only, in order; act
    implies read (a token that may act and not look would be refused every follow-up GET)."""
    items = text.split(",") if isinstance(text, str) else list(text or [])
    items = [str(s).strip() for s in items if str(s).strip()]
    unknown = [s for s in items if s not in SCOPES]
    if unknown:
        raise TokenError(
            f"Unknown scope {unknown[0][:40]!r}: a token's scopes are read and act "
            "(e.g. read or read,act)."
        )
    if not items:
        raise TokenError("Give a token at least one scope: read, or read,act.")
    chosen = set(items) | {"read"}
    return ",".join(s for s in SCOPES if s in chosen)


def checked_name(name) -> str:
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        raise TokenError("Name the token (what it is for, e.g. post-deploy replays).")
    if len(name) > NAME_CHARS:
        raise TokenError(f"A token's name is at most {NAME_CHARS} characters.")
    if any(not ch.isprintable() for ch in name):
        raise TokenError("A token's name is printable text (no control characters).")
    return name


def checked_days(days) -> int:
    try:
        days = int(days)
    except (TypeError, ValueError):
        raise TokenError("A token's lifetime is a whole number of days.") from None
    if not 1 <= days <= MAX_DAYS:
        raise TokenError(f"A token lives 1 to {MAX_DAYS} days.")
    return days


@dataclass
class Created:
    token: ApiToken
    text: str  # the whole token, shown once


def create(
    user, *, name, scopes="read", days=DEFAULT_DAYS, channel: str, now=None, operator=None
) -> Created:
    """Make a token for `user` (by `operator`, the user themselves unless said), audited as
    token.create; returns it with its text, which is shown this once."""
    name, scopes, days = checked_name(name), parse_scopes(scopes), checked_days(days)
    if not user.is_active:
        raise TokenError(f"{user.get_username()} is not an active user.")
    now = now or timezone.now()
    secret = secrets.token_urlsafe(32)  # 43 characters
    for _ in range(5):  # a prefix already taken: draw another
        prefix = secrets.token_hex(4)
        try:
            with transaction.atomic():
                token = ApiToken.objects.create(
                    user=user,
                    name=name,
                    prefix=prefix,
                    secret_hash=_hash(secret),
                    scopes=scopes,
                    created_at=now,
                    expires_at=now + timedelta(days=days),
                )
                store.audit.record(
                    "token.create",
                    actor=(operator or user).get_username(),
                    channel=channel,
                    target_kind="token",
                    targets=[token.pk],
                    params={
                        "user": user.get_username(),
                        "name": name,
                        "prefix": token.label,
                        "scopes": scopes,
                        "expires_at": token.expires_at.isoformat(),
                    },
                    at=now,
                )
        except IntegrityError:
            continue
        return Created(token, f"rdr_{prefix}_{secret}")
    raise TokenError("Could not draw an unused token prefix; try again.")


def may_revoke(operator, token: ApiToken) -> bool:
    return token.user_id == operator.pk or operator.has_perm(REVOKE_ANY_TOKEN)


def revoke(token_id, *, operator, channel: str, now=None) -> ApiToken:
    """Revoke a token, audited as token.revoke: its owner, or whoever may revoke any. A token
    revoked already is refused (nothing written); an unknown one is ApiToken.DoesNotExist."""
    now = now or timezone.now()
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token_id)
        if not may_revoke(operator, token):
            raise PermissionError(f"{operator.get_username()} may revoke only their own tokens.")
        if token.revoked_at is not None:
            raise TokenError(f"Token {token.label} was revoked already.")
        token.revoked_at = now
        token.save(update_fields=["revoked_at"])
        store.audit.record(
            "token.revoke",
            actor=operator.get_username(),
            channel=channel,
            target_kind="token",
            targets=[token.pk],
            params={"user": token.user.get_username(), "name": token.name, "prefix": token.label},
            at=now,
        )
    return token


def authenticate(text, *, now=None) -> ApiToken:
    """The live token `text` is, its last use noted (at most once a minute); NotAuthenticated
    saying why not."""
    if not isinstance(text, str) or not (match := _TEXT.fullmatch(text.strip())):
        raise NotAuthenticated("Not an API token (they read rdr_<prefix>_<secret>).")
    prefix, secret = match.groups()
    token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    # The hash is compared even for an unknown prefix, so timing does not tell which exist.
    expected = token.secret_hash if token else "0" * 64
    if not hmac.compare_digest(expected, _hash(secret)) or token is None:
        raise NotAuthenticated("Unknown or wrong API token.")
    now = now or timezone.now()
    if token.revoked_at is not None:
        raise NotAuthenticated(f"API token {token.label} was revoked.")
    if token.expires_at <= now:
        raise NotAuthenticated(f"API token {token.label} expired.")
    if not token.user.is_active:
        raise NotAuthenticated(f"API token {token.label}'s user is not active.")
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
