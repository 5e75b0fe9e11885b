"""What django-axes records of a sign-in attempt, made storable before it is recorded.

axes keeps an attempt's username (255 characters), User-Agent and Accept in columns PostgreSQL
holds to their length and refuses NUL in. Stored as sent, a 256-character username or a NUL in
either header made the sign-in a server error after the password was checked, and the failure
was never counted: the lock-out could be walked around for ever.
"""

from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessAttempt
from django.conf import settings

USERNAME_LENGTH = AccessAttempt._meta.get_field("username").max_length


def username(request, credentials=None):
    """settings.AXES_USERNAME_CALLABLE: the username axes counts and stores, as axes reads it
    (the credentials, else the POST), cut to its column and without NUL. Longer names are not
    any user's (Django's own stop at 150), so cutting them only merges a stranger's guesses."""
    field = settings.AXES_USERNAME_FORM_FIELD
    if credentials:
        value = credentials.get(field)
    else:
        value = getattr(request, "data", request.POST).get(field)
    return storable(value)[:USERNAME_LENGTH] if isinstance(value, str) else value


def storable(text: str) -> str:
    return text.replace("\x00", "0x00")  # axes' own spelling of NUL in what it stores


class Handler(AxesDatabaseHandler):
    """settings.AXES_HANDLER: axes' database handler, given the request's User-Agent and Accept
    without NUL (axes itself cuts them to their columns' length)."""

    def is_allowed(self, request, credentials=None):
        return super().is_allowed(_cleaned(request), credentials)

    def is_locked(self, request, credentials=None):
        return super().is_locked(_cleaned(request), credentials)

    def get_failures(self, request, credentials=None):
        return super().get_failures(_cleaned(request), credentials)

    def user_login_failed(self, sender, credentials, request=None, **kwargs):
        return super().user_login_failed(sender, credentials, _cleaned(request), **kwargs)

    def user_logged_in(self, sender, request, user, **kwargs):
        return super().user_logged_in(sender, _cleaned(request), user, **kwargs)

    def user_logged_out(self, sender, request, user, **kwargs):
        return super().user_logged_out(sender, _cleaned(request), user, **kwargs)


def _cleaned(request):
    """The request, its axes_* header values (set by axes before each call) made storable."""
    for name in ("axes_user_agent", "axes_http_accept", "axes_path_info"):
        value = getattr(request, name, None)
        if isinstance(value, str) and "\x00" in value:
            setattr(request, name, storable(value))
    return request
