"""The console's API tokens page: the user's own tokens, a new one shown once, revoke with CSRF;
an admin revokes anyone's; each change audited under the console channel."""

import re

import pytest
from django.test import Client

from deadletters import tokens
from deadletters.models import ApiToken
from jobqueue.models import AuditEntry
from tests.deadletters.conftest import logged_in, user_with_role

from .conftest import Api

pytestmark = pytest.mark.django_db


def test_make_a_token_shown_once_that_works():
    viewer = user_with_role("viewer")
    client = logged_in(viewer)
    response = client.post(
        "/deadletters/tokens/", {"name": "grafana", "scopes": ["read"], "days": "30"}
    )
    assert response.status_code == 200
    text = re.search(r"<pre><code>(rdr_[0-9a-f]{8}_[A-Za-z0-9_-]{43})</code></pre>", response.text)
    assert text is not None
    assert Api(text[1]).get("letters").status_code == 200
    again = client.get("/deadletters/tokens/").content.decode()
    assert text[1] not in again
    token = ApiToken.objects.get()
    assert f"<code>{token.label}_…</code>" in again
    entry = AuditEntry.objects.get(action="token.create")
    assert (entry.actor, entry.channel) == ("viewer", "console")


def test_a_bad_form_makes_nothing():
    client = logged_in(user_with_role("viewer"))
    response = client.post("/deadletters/tokens/", {"name": "", "scopes": ["write"], "days": "0"})
    assert response.status_code == 400
    assert not ApiToken.objects.exists()
    assert not AuditEntry.objects.exists()


def test_revoke_needs_csrf_and_is_the_owners_or_an_admins():
    ann = user_with_role("operator", "ann")
    made = tokens.create(ann, name="x", channel="code")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(ann)
    assert strict.post(f"/deadletters/tokens/{made.token.pk}/revoke/").status_code == 403
    eve = logged_in(user_with_role("operator", "eve"))
    refused = eve.post(f"/deadletters/tokens/{made.token.pk}/revoke/")
    assert refused.status_code == 403
    assert ApiToken.objects.get().revoked_at is None
    admin = logged_in(user_with_role("admin", "chief"))
    assert f"token-{made.token.pk}" in admin.get("/deadletters/tokens/").content.decode()
    done = admin.post(f"/deadletters/tokens/{made.token.pk}/revoke/")
    assert done.status_code == 302
    assert ApiToken.objects.get().revoked_at is not None
    entry = AuditEntry.objects.get(action="token.revoke")
    assert (entry.actor, entry.channel) == ("chief", "console")
    assert logged_in(ann).post("/deadletters/tokens/999/revoke/").status_code == 404


def test_the_page_needs_a_login():
    response = Client().get("/deadletters/tokens/")
    assert response.status_code == 302
