"""API tokens: hashed at rest, shown once, expiring, revocable, scoped; each create and revoke
audited; every refusal a 401 or 403 whose JSON says why."""

import hashlib
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from deadletters import tokens
from deadletters.models import ApiToken
from jobqueue.models import AuditEntry
from tests.deadletters.conftest import user_with_role

from .conftest import Api, api_as

pytestmark = pytest.mark.django_db


def test_the_secret_is_not_in_the_database_only_its_hash(viewer_api):
    text = viewer_api.text
    prefix, secret = text.split("_")[1], text.split("_", 2)[2]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM deadletters_apitoken")
        rows = cursor.fetchall()
    assert len(rows) == 1
    stored = " ".join(str(value) for value in rows[0])
    assert secret not in stored
    assert text not in stored
    token = ApiToken.objects.get()
    assert token.prefix == prefix
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest()


def test_a_token_reads_as_its_user(viewer_api):
    response = viewer_api.get("letters")
    assert response.status_code == 200
    assert response.json()["letters"] == []


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "Authentication required: send Authorization: Bearer <API token>."),
        ("Basic abc", "Send the API token as Authorization: Bearer <API token>."),
        ("Bearer nope", "Not an API token (they read rdr_<prefix>_<secret>)."),
        ("Bearer rdr_00000000_" + "a" * 43, "Unknown or wrong API token."),
    ],
)
def test_missing_or_bad_tokens_are_401_saying_why(db, header, message):
    client = Api().client
    headers = {"Authorization": header} if header else {}
    response = client.get("/api/letters", headers=headers)
    assert response.status_code == 401
    assert response.json() == {"detail": message}


def test_a_wrong_secret_with_a_real_prefix_is_401(viewer_api):
    text = viewer_api.text
    wrong = text[:-1] + ("A" if text[-1] != "A" else "B")
    response = Api(wrong).get("letters")
    assert response.status_code == 401
    assert response.json() == {"detail": "Unknown or wrong API token."}


def test_an_expired_token_is_401(viewer_api):
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = viewer_api.get("letters")
    assert response.status_code == 401
    assert response.json() == {"detail": f"API token {viewer_api.token.label} expired."}


def test_a_revoked_token_is_401_and_the_revoke_is_audited(viewer_api):
    tokens.revoke(viewer_api.token.pk, operator=viewer_api.user, channel="cli")
    response = viewer_api.get("letters")
    assert response.status_code == 401
    assert response.json() == {"detail": f"API token {viewer_api.token.label} was revoked."}
    entry = AuditEntry.objects.get(action="token.revoke")
    assert (entry.actor, entry.channel, entry.target_kind, entry.targets) == (
        "viewer",
        "cli",
        "token",
        [str(viewer_api.token.pk)],
    )


def test_a_create_is_audited_without_the_secret(viewer_api):
    entry = AuditEntry.objects.get(action="token.create")
    assert entry.targets == [str(viewer_api.token.pk)]
    assert entry.params["prefix"] == viewer_api.token.label
    assert viewer_api.text.split("_", 2)[2] not in str(entry.params)


def test_a_read_token_may_not_act_and_the_answer_names_the_scope(db):
    api = api_as(user_with_role("operator"), scopes="read")
    response = api.post("actions/queue.pause", {"queue": "default", "reason": "x"})
    assert response.status_code == 403
    assert response.json() == {
        "detail": f"Not allowed: API token {api.token.label} lacks the scope 'act'."
    }
    assert api.get("letters").status_code == 200


def test_act_implies_read():
    assert tokens.parse_scopes("act") == "read,act"
    with pytest.raises(tokens.TokenError, match="Unknown scope 'write'"):
        tokens.parse_scopes("read,write")


def test_the_users_permissions_still_apply(viewer_api):
    response = viewer_api.post("actions/queue.pause", {"queue": "default", "reason": "x"})
    assert response.status_code == 403
    assert "jobqueue.pause_queue" in response.json()["detail"]
    assert not AuditEntry.objects.filter(action="queue.pause").exists()


def test_a_user_without_the_view_permission_is_refused(db):
    from tests.factories import UserFactory

    api = api_as(UserFactory(username="nobody"))
    response = api.get("letters")
    assert response.status_code == 403
    assert "deadletters.view_deadletter" in response.json()["detail"]


def test_only_the_owner_or_an_admin_revokes(viewer_api):
    other = user_with_role("operator", "someone")
    with pytest.raises(PermissionError):
        tokens.revoke(viewer_api.token.pk, operator=other, channel="cli")
    assert ApiToken.objects.get().revoked_at is None
    admin = user_with_role("admin", "chief")
    tokens.revoke(viewer_api.token.pk, operator=admin, channel="cli")
    assert ApiToken.objects.get().revoked_at is not None
    with pytest.raises(tokens.TokenError, match="revoked already"):
        tokens.revoke(viewer_api.token.pk, operator=admin, channel="cli")
    assert AuditEntry.objects.filter(action="token.revoke").count() == 1
