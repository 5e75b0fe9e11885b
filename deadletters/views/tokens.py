"""API tokens: the user's own, made (the token shown this once) and revoked; an admin revokes
anyone's. Each create and revoke is audited (deadletters.tokens)."""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from .. import actions
from ..models import ApiToken
from ..roles import REVOKE_ANY_TOKEN
from .base import CONSOLE, console_view

TokenForm = actions.TokenForm


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
    try:
        outcome = actions.perform(
            "token.create", user=request.user, channel=CONSOLE, data=request.POST
        )
    except actions.Invalid as exc:
        form = TokenForm(request.POST)
        form.is_valid()  # the same messages, beside their fields
        messages.error(request, str(exc))
        return _page(request, form, status=400)
    return _page(request, TokenForm(), made=outcome.result)


@require_POST
@console_view
def token_revoke(request, pk):
    try:
        outcome = actions.perform(
            "token.revoke", user=request.user, channel=CONSOLE, data={"token": pk}
        )
    except actions.Conflict as exc:
        messages.warning(request, str(exc))
        return redirect("deadletters:tokens")
    token = outcome.result
    messages.success(request, outcome.message)
    # To its row, which now says so.
    return HttpResponseRedirect(reverse("deadletters:tokens") + f"#token-{token.pk}")
