"""API tokens: the user's own, made (the token shown this once) and revoked; an admin revokes
anyone's. Each create and revoke is audited (deadletters.tokens)."""

from django import forms
from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from .. import tokens
from ..forms import refusal
from ..models import ApiToken
from ..roles import REVOKE_ANY_TOKEN
from .base import CONSOLE, Missing, NotFound, console_view


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


def _page(request, form, *, made=None, status=200):
    user = request.user
    context = {
        "form": form,
        "made": made,
        "tokens": ApiToken.objects.filter(user=user).order_by("-created_at", "-id"),
        # Whoever may revoke anyone's sees everyone's live tokens.
        "others": ApiToken.objects.filter(revoked_at__isnull=True)
        .exclude(user=user)
        .select_related("user")
        .order_by("-created_at", "-id")[:500]
        if user.has_perm(REVOKE_ANY_TOKEN)
        else None,
    }
    return render(request, "deadletters/tokens.html", context, status=status)


@require_http_methods(["GET", "POST"])
@console_view
@never_cache
def token_list(request):
    """The user's API tokens; a POST makes one and shows its text this once (never in a URL,
    a redirect or a cache)."""
    if request.method == "GET":
        return _page(request, TokenForm())
    form = TokenForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"No token made ({refusal(form)}).")
        return _page(request, form, status=400)
    data = form.cleaned_data
    try:
        made = tokens.create(
            request.user,
            name=data["name"],
            scopes=data["scopes"],
            days=data["days"],
            channel=CONSOLE,
        )
    except tokens.TokenError as exc:
        messages.error(request, f"No token made ({exc}).")
        return _page(request, form, status=400)
    return _page(request, TokenForm(), made=made)


@require_POST
@console_view
def token_revoke(request, pk):
    token = ApiToken.objects.filter(pk=pk).first()
    if token is None:
        raise NotFound("API token", pk, "The API tokens page lists yours.")
    if not tokens.may_revoke(request.user, token):
        raise Missing(REVOKE_ANY_TOKEN)
    try:
        tokens.revoke(token.pk, operator=request.user, channel=CONSOLE)
    except tokens.TokenError as exc:
        messages.warning(request, f"Nothing changed: {exc}")
        return redirect("deadletters:tokens")
    messages.success(request, f"Token {token.label} ({token.name}) revoked.")
    # To its row, which now says so.
    return HttpResponseRedirect(reverse("deadletters:tokens") + f"#token-{token.pk}")
