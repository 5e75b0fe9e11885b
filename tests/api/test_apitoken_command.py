"""`manage.py apitoken`: create (the token printed once), revoke, list; each change audited
under the command-line channel; bad arguments refused with nothing written."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from deadletters.models import ApiToken
from jobqueue.models import AuditEntry
from tests.deadletters.conftest import user_with_role

from .conftest import Api

pytestmark = pytest.mark.django_db


def run(*args):
    out, err = StringIO(), StringIO()
    call_command("apitoken", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_prints_a_working_token_once_and_audits_it():
    user_with_role("operator", "ann")
    out, err = run("create", "--user", "ann", "--name", "deploys", "--scopes", "read,act")
    text = out.strip()
    assert text.startswith("rdr_")
    token = ApiToken.objects.get()
    assert (token.name, token.scopes, token.user.username) == ("deploys", "read,act", "ann")
    assert "shown this once" in err
    assert Api(text).get("letters").status_code == 200
    entry = AuditEntry.objects.get(action="token.create")
    assert (entry.actor, entry.channel, entry.targets) == ("ann", "cli", [str(token.pk)])


def test_create_json_and_list_json():
    user_with_role("viewer", "bob")
    out, _ = run("create", "--user", "bob", "--name", "grafana", "--days", "7", "--json")
    made = json.loads(out)
    assert made["token"].startswith(f"{made['prefix']}_")
    assert made["scopes"] == ["read"]
    listed, _ = run("list", "--json")
    rows = json.loads(listed)
    assert [(r["id"], r["name"]) for r in rows] == [(made["id"], "grafana")]
    assert "token" not in rows[0]


def test_revoke_by_its_owner_and_the_audit():
    user_with_role("operator", "ann")
    run("create", "--user", "ann", "--name", "x")
    token = ApiToken.objects.get()
    out, _ = run("revoke", str(token.pk), "--operator", "ann")
    assert out.strip() == f"Token {token.label} (x) of ann revoked."
    assert ApiToken.objects.get().revoked_at is not None
    assert AuditEntry.objects.filter(action="token.revoke", channel="cli").count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "--user", "nobody", "--name", "x"], "No user 'nobody'"),
        (["create", "--user", "ann", "--name", "x", "--scopes", "write"], "Unknown scope"),
        (["create", "--user", "ann", "--name", "x", "--days", "0"], "between 1 and 366"),
        (["create", "--user", "ann", "--name", " "], "may not be empty"),
        (["revoke", "999", "--operator", "ann"], "No API token 999"),
    ],
)
def test_bad_arguments_are_refused_and_write_nothing(args, message):
    user_with_role("operator", "ann")
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not ApiToken.objects.exists()
    assert not AuditEntry.objects.exists()


def test_another_users_token_is_not_theirs_to_revoke():
    user_with_role("operator", "ann")
    user_with_role("operator", "eve")
    run("create", "--user", "ann", "--name", "x")
    token = ApiToken.objects.get()
    with pytest.raises(CommandError, match="eve may revoke only their own tokens"):
        run("revoke", str(token.pk), "--operator", "eve")
    assert ApiToken.objects.get().revoked_at is None
