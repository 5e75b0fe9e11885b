"""Links to pages the host project may or may not have: the console never reverses a URL name
it does not own, so it renders in any project, mounted at any prefix."""

from django import template
from django.conf import settings
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, reverse

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
