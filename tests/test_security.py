"""Safe defaults: no start without a SECRET_KEY, CSP on every page, HTTPS settings clean under
`check --deploy`, failed logins locked out, server errors logged."""

import io
import logging
import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.test import Client
from django.urls import path, reverse

from config import secret_key
from tests.conftest import BASE_DIR, database_url
from tests.deadletters.conftest import logged_in, user_with_role
from tests.factories import DeadLetterFactory, ReplayItemFactory

PRODUCTION_KEY = "Zq8" + "x7-Lm_Pw2rT9vB4nK6yH1cJ5dF3gS0aQ" * 2


def environment(**extra):
    """The environment of a production start: only what is given (DEBUG off, no SECRET_KEY
    unless given), none of the variables the test run sets for itself."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def run(argv, env, timeout=120):
    return subprocess.run(
        [sys.executable, *argv],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


WEB_APPS = [["-c", "import config.wsgi"], ["-c", "import config.asgi"]]
COMMANDS = [
    ["manage.py", "runworker", "--burst"],
    ["manage.py", "runrelay", "--burst"],
    ["manage.py", "runchores", "--once"],
    ["manage.py", "qcluster", "--run-once"],
]
ENTRY_POINTS = ["wsgi", "asgi", "runworker", "runrelay", "runchores", "qcluster"]


@pytest.mark.parametrize("argv", WEB_APPS + COMMANDS, ids=ENTRY_POINTS)
def test_every_entry_point_refuses_to_start_without_a_secret_key(argv, tmp_path):
    # A database that does not exist: the refusal comes before any connection or write.
    env = environment(DATABASE_URL=f"sqlite:///{tmp_path / 'never.sqlite3'}")
    result = run(argv, env)
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr
    assert "SECRET_KEY environment variable" in result.stderr  # says how to set one
    if (tmp_path / "never.sqlite3").exists():  # opened perhaps, but nothing created in it
        with closing(sqlite3.connect(tmp_path / "never.sqlite3")) as db:
            assert db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("argv", WEB_APPS + COMMANDS, ids=ENTRY_POINTS)
def test_every_entry_point_starts_with_a_secret_key(argv):
    from django.db import connection

    env = environment(SECRET_KEY=PRODUCTION_KEY, DATABASE_URL=database_url(connection))
    result = run(argv, env)
    assert result.returncode == 0, result.stderr
    assert "SECRET_KEY" not in result.stderr


def test_settings_hold_no_key_of_their_own(monkeypatch, tmp_path):
    """The published fallback is gone: without the variable the key is empty with DEBUG off."""
    script = "import config.settings as s; print(repr(s.SECRET_KEY))"
    result = run(["-c", script], environment(REDRIVE_VAR_DIR=str(tmp_path)))
    assert result.stdout.strip() == "''"
    assert not (tmp_path / "secret_key").exists()
    debug = run(["-c", script], environment(DEBUG="1", REDRIVE_VAR_DIR=str(tmp_path)))
    assert len(eval(debug.stdout)) >= 50  # a random one, kept in var/ for the next start
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600


def test_load_or_create_keeps_one_key(tmp_path):
    key = secret_key.load_or_create(tmp_path / "sub" / "secret_key")
    assert secret_key.load_or_create(tmp_path / "sub" / "secret_key") == key
    assert key != secret_key.load_or_create(tmp_path / "other")


# --- check --deploy ----------------------------------------------------------------------

PRODUCTION = {
    "SECRET_KEY": PRODUCTION_KEY,
    "REDRIVE_HTTPS": "1",
    "ALLOWED_HOSTS": "redrive.example.com",
    "REDRIVE_METRICS_TOKEN": "a-long-random-token-for-the-scraper",
}


def test_check_deploy_is_clean_under_the_documented_production_settings(tmp_path):
    env = environment(**PRODUCTION, REDRIVE_VAR_DIR=str(tmp_path))
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_https_settings_come_from_the_environment(tmp_path):
    names = [
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_PROXY_SSL_HEADER",
    ]
    argv = [
        "-c",
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings'; "
        "django.setup(); from django.conf import settings as s; "
        f"print([getattr(s, n) for n in {names!r}])",
    ]
    plain = run(argv, environment(SECRET_KEY=PRODUCTION_KEY, REDRIVE_VAR_DIR=str(tmp_path)))
    assert plain.stdout.strip() == "[False, False, False, 0, None]", plain.stderr
    https = run(
        argv,
        environment(**PRODUCTION, REDRIVE_PROXY_SSL="1", REDRIVE_VAR_DIR=str(tmp_path)),
    )
    assert https.stdout.strip() == (
        "[True, True, True, 31536000, ('HTTP_X_FORWARDED_PROTO', 'https')]"
    ), https.stderr


@pytest.mark.django_db
def test_hsts_and_secure_cookies_over_https(settings, viewer):
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    client = Client()
    response = client.post(
        reverse("login"), {"username": "viewer", "password": "pw-for-tests"}, secure=True
    )
    assert response.status_code == 302
    assert "max-age=31536000" in response["Strict-Transport-Security"]
    assert response.cookies["sessionid"]["secure"] is True
    assert response.cookies["sessionid"]["httponly"] is True


# --- Content-Security-Policy -------------------------------------------------------------


@pytest.mark.django_db
def test_every_console_page_has_the_policy_and_no_inline_script(admin_client_):
    letter = DeadLetterFactory()
    run_ = ReplayItemFactory().run
    pages = [
        "/",
        reverse("deadletters:overview"),
        reverse("deadletters:list") + "?state=pending",
        reverse("deadletters:count"),
        reverse("deadletters:detail", args=[letter.pk]),
        reverse("deadletters:run", args=[run_.pk]),
        reverse("deadletters:audit"),
        "/admin/",
    ]
    for url in pages:
        response = admin_client_.get(url)
        assert response.status_code == 200, url
        policy = response["Content-Security-Policy"]
        assert "script-src 'self';" in policy + ";", (url, policy)
        assert "unsafe" not in policy, (url, policy)
        html = response.content.decode()
        # Scripts only from files; no handler attributes; no hx-trigger filter (needs eval).
        assert not re.search(r"<script(?![^>]*\ssrc=)[^>]*>", html), url
        assert not re.search(r"\son[a-z]+\s*=", html), url
        assert not re.search(r'hx-trigger="[^"]*\[', html), url
        assert not re.search(r"\shx-on[:-]", html), url
    login = Client().get(reverse("login"))
    assert "script-src 'self'" in login["Content-Security-Policy"]
    assert '"allowEval":false' in login.content.decode()


@pytest.fixture
def admin_client_(db):
    return logged_in(user_with_role("admin", "chief"))


# --- failed logins -----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def viewer(db):
    return user_with_role("viewer")


def attempt(client, password, username="viewer", address="10.0.0.1"):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address
    )


def test_the_sixth_attempt_after_five_failures_is_refused_even_with_the_right_password(viewer):
    client = Client()
    for _ in range(4):
        assert attempt(client, "wrong").status_code == 200  # the form again, with its error
    assert attempt(client, "wrong").status_code == 429  # the fifth failure locks
    refused = attempt(client, "pw-for-tests")
    assert refused.status_code == 429
    assert b"Too many failed logins" in refused.content
    assert "_auth_user_id" not in client.session
    # Per username and address: the same user from elsewhere, and others from here, still log in.
    elsewhere = attempt(Client(), "pw-for-tests", address="10.0.0.2")
    assert elsewhere.status_code == 302
    user_with_role("viewer", "other")
    assert attempt(Client(), "pw-for-tests", username="other").status_code == 302


def test_the_lockout_ends_after_its_cool_off(viewer, settings):
    from datetime import timedelta

    from axes.models import AccessAttempt

    client = Client()
    for _ in range(5):
        attempt(client, "wrong")
    assert attempt(client, "pw-for-tests").status_code == 429
    # Rather than wait 15 minutes, age the record past the cool-off.
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time
        - settings.AXES_COOLOFF_TIME
        - timedelta(seconds=1)
    )
    assert attempt(client, "pw-for-tests").status_code == 302


def test_a_success_resets_the_count(viewer):
    client = Client()
    for _ in range(4):
        attempt(client, "wrong")
    assert attempt(client, "pw-for-tests").status_code == 302
    for _ in range(4):
        assert attempt(Client(), "wrong").status_code == 200
    assert attempt(Client(), "pw-for-tests").status_code == 302


# What django-axes stores of an attempt (the username, User-Agent and Accept, in columns of
# fixed length) is made storable first: PostgreSQL refuses NUL and over-long values, which made
# such a sign-in a server error that axes never counted, so it could be repeated without limit.
UNSTORABLE = {
    "a 256-character username": {"username": "v" * 256},
    "a NUL in the User-Agent": {"HTTP_USER_AGENT": "Mozilla/5.0\x00evil"},
    "a NUL in Accept": {"HTTP_ACCEPT": "text/html\x00"},
}


def odd_attempt(client, password, *, username="viewer", **headers):
    return client.post(
        reverse("login"),
        {"username": username, "password": password},
        REMOTE_ADDR="10.0.0.9",
        **headers,
    )


@pytest.mark.parametrize("odd", UNSTORABLE.values(), ids=UNSTORABLE)
def test_an_unstorable_attempt_is_a_wrong_password_and_counts_toward_the_lockout(viewer, odd):
    client = Client(raise_request_exception=False)
    for _ in range(4):
        answer = odd_attempt(client, "wrong", **odd)
        assert answer.status_code == 200
        assert b"didn't match" in answer.content
    assert odd_attempt(client, "wrong", **odd).status_code == 429  # the fifth failure locks
    assert odd_attempt(client, "wrong", **odd).status_code == 429


@pytest.mark.parametrize("header", ["HTTP_USER_AGENT", "HTTP_ACCEPT"], ids=["User-Agent", "Accept"])
def test_a_nul_in_a_header_does_not_stop_a_right_password(viewer, header):
    client = Client(raise_request_exception=False)
    answer = odd_attempt(client, "pw-for-tests", **{header: "x\x00y"})
    assert answer.status_code == 302
    assert client.session["_auth_user_id"] == str(viewer.pk)
    from axes.models import AccessLog

    log = AccessLog.objects.get()
    assert "\x00" not in log.user_agent + log.http_accept


# --- server errors are logged ------------------------------------------------------------


def boom(request):
    raise RuntimeError("kaboom in a view")


def forbidden(request):
    raise PermissionDenied


urlpatterns = [path("boom/", boom), path("forbidden/", forbidden), path("ok/", HttpResponse)]


@pytest.mark.urls(__name__)
def test_a_server_error_is_logged_with_debug_off(settings):
    """Whatever the `django.request` records reach with DEBUG off (our handlers, Django's own
    filtered console and mail_admins, the root's) must write the error somewhere."""
    settings.DEBUG = False
    streams = []
    logger = logging.getLogger("django.request")
    while logger:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler):
                stream = io.StringIO()
                streams.append((handler, handler.setStream(stream), stream))
        logger = logger.parent if logger.propagate else None
    try:
        response = Client(raise_request_exception=False).get("/boom/")
        assert Client().get("/forbidden/").status_code == 403
    finally:
        for handler, original, _ in streams:
            handler.setStream(original)
    assert response.status_code == 500
    written = "".join(stream.getvalue() for _, _, stream in streams)
    assert "ERROR django.request Internal Server Error: /boom/" in written
    assert "RuntimeError: kaboom in a view" in written  # with its traceback
    assert "/forbidden/" not in written  # a 403 is not a server error
