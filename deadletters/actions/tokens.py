"""API token actions: create and revoke."""

from __future__ import annotations

from django import forms

from .. import tokens
from ..forms import (
    IdField,
)
from ..models import ApiToken
from ..roles import (
    REVOKE_ANY_TOKEN,
)
from .kernel import (
    Action,
    Actor,
    Conflict,
    Gone,
    Invalid,
    Missing,
    Outcome,
    register,
)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=tokens.NAME_CHARS, help_text="What it is for.")
    scopes = forms.MultipleChoiceField(
        choices=[("read", "read (every GET)"), ("act", "act (every POST)")],
        widget=forms.CheckboxSelectMultiple,
        initial=["read"],
    )
    days = forms.IntegerField(
        min_value=1, max_value=tokens.MAX_DAYS, initial=tokens.DEFAULT_DAYS, label="Expires in days"
    )


class TokenRevokeForm(forms.Form):
    token = IdField()


def _token_create(actor: Actor, cleaned) -> Outcome:
    try:
        made = tokens.create(
            actor.user,
            name=cleaned["name"],
            scopes=cleaned["scopes"],
            days=cleaned["days"],
            channel=actor.channel,
        )
    except tokens.TokenError as exc:
        raise Invalid(f"No token made: {exc}") from None
    token = made.token
    return Outcome(
        True,
        f"Token {token.label} made; its text is shown this once.",
        {
            "id": token.pk,
            "label": token.label,
            "scopes": token.scopes,
            "expires_at": token.expires_at.isoformat(),
            "token": made.text,
        },
        made,
    )


def _token_revoke(actor: Actor, cleaned) -> Outcome:
    token = ApiToken.objects.filter(pk=cleaned["token"]).first()
    if token is None:
        raise Gone("API token", cleaned["token"], "The API tokens page lists yours.")
    if not tokens.may_revoke(actor.user, token):
        raise Missing(REVOKE_ANY_TOKEN)
    try:
        tokens.revoke(token.pk, operator=actor.user, channel=actor.channel)
    except tokens.TokenError as exc:
        raise Conflict(f"Nothing changed: {exc}") from None
    return Outcome(True, f"Token {token.label} ({token.name}) revoked.", {"id": token.pk}, token)


register(
    Action(
        "token.create",
        "token",
        "Create",
        "Make an API token for yourself (its text is shown once), with scopes and an expiry.",
        (),
        TokenForm,
        _token_create,
        api=False,
        reveals=True,
    )
)
register(
    Action(
        "token.revoke",
        "token",
        "Revoke",
        "Revoke an API token: yours, or anyone's with the permission to.",
        (),
        TokenRevokeForm,
        _token_revoke,
    )
)
