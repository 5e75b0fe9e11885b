import json

import pytest
from django.db import connection
from django.test import Client

from deadletters import tokens
from tests.deadletters.conftest import user_with_role


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


class Api:
    """The API as a script calls it: JSON in, JSON out, a bearer token."""

    def __init__(self, text=None):
        self.text = text
        self.client = Client()

    def headers(self, key=None):
        found = {}
        if self.text:
            found["Authorization"] = f"Bearer {self.text}"
        if key is not None:
            found["Idempotency-Key"] = key
        return found

    def get(self, path, **params):
        return self.client.get(f"/api/{path}", params, headers=self.headers())

    def post(self, path, body=None, key=None, raw=None):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(
            f"/api/{path}", data, content_type="application/json", headers=self.headers(key)
        )


def api_as(user, scopes="read,act"):
    made = tokens.create(user, name="tests", scopes=scopes, channel="code")
    api = Api(made.text)
    api.token = made.token
    api.user = user
    return api


@pytest.fixture
def viewer_api(db):
    return api_as(user_with_role("viewer"))


@pytest.fixture
def operator_api(db):
    return api_as(user_with_role("operator"))


@pytest.fixture
def admin_api(db):
    return api_as(user_with_role("admin", "chief"))


def rows_written() -> int:
    """Rows inserted, updated or deleted so far by this test's connection (SQLite: since it
    opened; PostgreSQL: in this transaction, which the test is), triggers' writes included:
    one cheap query, so every case is checked."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT total_changes()")
        else:
            cursor.execute(
                "SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0)"
                " FROM pg_stat_xact_user_tables"
            )
        return int(cursor.fetchone()[0])
