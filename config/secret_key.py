"""SECRET_KEY: from the environment, never from the repository.

Django signs sessions and password-reset links with it, and django-q2 signs the pickled task
packages its cluster unpickles: anyone holding the key can forge a package that runs code in
the cluster. So with DEBUG off there is no fallback: the web app (config/wsgi.py, asgi.py) and
every management command that runs the system checks (runworker, runrelay, qcluster, runserver,
...) refuse to start without one. `manage.py demo` makes a random key once and keeps it under
var/ (load_or_create), and the tests bring their own (tests/conftest.py).
"""

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

MESSAGE = (
    "SECRET_KEY is not set, and with DEBUG off Redrive will not start without one. Set the "
    "SECRET_KEY environment variable to a long random value, the same for the web app, every "
    "worker, relay and qcluster, and kept out of the repository: for example "
    "SECRET_KEY=\"$(python -c 'import secrets; print(secrets.token_urlsafe(50))')\". "
    "(`manage.py demo` makes its own under var/.)"
)
CHECK_ID = "config.E001"


def is_set() -> bool:
    from django.conf import settings

    try:
        return bool(settings.SECRET_KEY)
    except ImproperlyConfigured:  # Django refuses to read an empty key
        return False


def require() -> None:
    """Raise ImproperlyConfigured with MESSAGE unless a key is configured."""
    if not is_set():
        raise ImproperlyConfigured(MESSAGE)


def check(app_configs=None, **kwargs):
    """System check: runworker, runrelay, qcluster and runserver run it before they start."""
    from django.core.checks import Error

    return [] if is_set() else [Error(MESSAGE, id=CHECK_ID)]


def load_or_create(path: Path) -> str:
    """The key kept in `path`, made (random, mode 0600) the first time: a stable key for one
    machine's demo or development runs, so sessions survive a restart."""
    path = Path(path)
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        key = ""
    if key:
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    # O_EXCL: of two processes racing to make it, one writes and the other reads its key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip() or key
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    return key
