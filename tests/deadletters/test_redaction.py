"""Masking by pattern (case-insensitive, nested, lists) in every place a payload is shown, and
the audited reveal for those with the permission."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from deadletters import redaction
from jobqueue.models import AuditEntry
from tests.audit import entries
from tests.factories import DeadLetterFactory

from .conftest import logged_in, user_with_role

pytestmark = pytest.mark.django_db

SECRETS = {
    "access_token": "tok-1",
    "client_secret": "cs-2",
    "db_password": "pw-3",
    "Authorization": "Bearer au-4",
    "X-Api-Key": "ak-5",
    "refresh_token": {"nested": "rt-6"},
}
PAYLOAD = {
    "args": [{"headers": {"X-Api-Key": "ak-7"}}, [{"PASSWORD": "pw-8"}]],
    "kwargs": {**SECRETS, "order": 42, "config": {"deep": [{"card_number": "4111-9"}]}},
}
CLEAR = ["tok-1", "cs-2", "pw-3", "au-4", "ak-5", "rt-6", "ak-7", "pw-8", "4111-9"]


def test_default_patterns_mask_the_usual_names_at_any_depth_and_in_lists():
    masked = redaction.redact(PAYLOAD)
    assert masked["kwargs"] == {
        **dict.fromkeys(SECRETS, "••••"),
        "order": 42,
        "config": {"deep": [{"card_number": "••••"}]},
    }
    assert masked["args"] == [{"headers": {"X-Api-Key": "••••"}}, [{"PASSWORD": "••••"}]]
    assert PAYLOAD["kwargs"]["access_token"] == "tok-1"  # a copy; the original is untouched


def test_patterns_are_case_insensitive_regular_expressions(settings):
    settings.REDRIVE = {**settings.REDRIVE, "REDACT_PATTERNS": ["^pin$", "card"]}
    assert redaction.redact({"PIN": 1, "spin": 2, "Credit-Card": 3}) == {
        "PIN": "••••",
        "spin": 2,
        "Credit-Card": "••••",
    }
    settings.REDRIVE = {**settings.REDRIVE, "REDACT_PATTERNS": []}
    assert redaction.redact({"password": "x"}) == {"password": "x"}


@pytest.fixture
def letter():
    return DeadLetterFactory(args=PAYLOAD["args"], kwargs=PAYLOAD["kwargs"])


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_the_console_detail_page_masks_for_every_role(role, letter):
    page = logged_in(user_with_role(role)).get(reverse("deadletters:detail", args=[letter.pk]))
    content = page.content.decode()
    assert page.status_code == 200
    assert [value for value in CLEAR if value in content] == []
    # The unmasked value, as the payload shows it (a timestamp cannot hold this).
    assert "&quot;order&quot;: 42," in content


def test_the_cli_show_masks(letter):
    out = StringIO()
    call_command("deadletters", "show", str(letter.pk), "--json", stdout=out)
    assert [value for value in CLEAR if value in out.getvalue()] == []
    assert json.loads(out.getvalue())["payload"] == redaction.redact(PAYLOAD)
    text = StringIO()
    call_command("deadletters", "show", str(letter.pk), stdout=text)
    assert [value for value in CLEAR if value in text.getvalue()] == []


def test_the_django_admin_masks_even_for_a_superuser(letter):
    from django.contrib.auth.models import User

    root = logged_in(User.objects.create_superuser("root", password="pw"))
    admin = logged_in(user_with_role("admin", "chief"))
    for client in (root, admin):
        page = client.get(reverse("admin:jobqueue_deadletter_change", args=[letter.pk]))
        content = page.content.decode()
        assert page.status_code == 200
        assert [value for value in CLEAR if value in content] == []
        assert "••••" in content and "order" in content


# --- reveal -------------------------------------------------------------------------------


def reveal_url(letter):
    return reverse("deadletters:reveal", args=[letter.pk])


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_reveal_is_refused_without_the_permission_and_records_nothing(role, letter):
    client = logged_in(user_with_role(role))
    detail = client.get(reverse("deadletters:detail", args=[letter.pk])).content.decode()
    assert reveal_url(letter) not in detail  # no control offered
    response = client.post(reveal_url(letter))
    assert response.status_code == 403
    assert "tok-1" not in response.content.decode()
    assert entries("letter.reveal") == []


def test_reveal_shows_the_values_and_records_who_which_when(letter):
    chief = user_with_role("admin", "chief")
    client = logged_in(chief)
    detail = client.get(reverse("deadletters:detail", args=[letter.pk])).content.decode()
    assert reveal_url(letter) in detail and "tok-1" not in detail
    assert client.get(reveal_url(letter)).status_code == 405  # a link never reveals
    response = client.post(reveal_url(letter))
    content = response.content.decode()
    assert response.status_code == 200
    assert [value for value in CLEAR if value not in content] == []
    assert "no-store" in response["Cache-Control"]
    assert entries("letter.reveal") == [
        (
            [str(letter.pk)],
            "chief",
            "console",
            "",
            {"via": "console", "task_path": letter.task_path},
        )
    ]
    assert redaction.has_seen(chief, letter)


def test_reveal_needs_csrf(letter):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(user_with_role("admin", "chief"))
    assert client.post(reveal_url(letter)).status_code == 403
    assert entries("letter.reveal") == []


def test_reveal_of_a_missing_letter_is_404_and_records_nothing():
    client = logged_in(user_with_role("admin", "chief"))
    assert client.post(reverse("deadletters:reveal", args=[999_999])).status_code == 404
    assert entries("letter.reveal") == []


def test_the_permission_can_be_granted_alone(letter):
    from django.contrib.auth.models import Permission

    viewer = user_with_role("viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_secrets"))
    assert logged_in(viewer).post(reveal_url(letter)).status_code == 200
    assert [actor for _, actor, *_ in entries("letter.reveal")] == ["viewer"]


def test_cli_reveal_needs_an_operator_with_the_permission_and_is_audited(letter):
    user_with_role("operator", "oncall")
    user_with_role("admin", "chief")
    show = ["deadletters", "show", str(letter.pk), "--json", "--reveal"]
    with pytest.raises(CommandError, match="--operator"):
        call_command(*show, stdout=StringIO())
    with pytest.raises(CommandError, match="view_secrets"):
        call_command(*show, "--operator", "oncall", stdout=StringIO())
    assert entries("letter.reveal") == []
    out = StringIO()
    call_command(*show, "--operator", "chief", stdout=out)
    assert json.loads(out.getvalue())["payload"] == PAYLOAD
    assert entries("letter.reveal") == [
        ([str(letter.pk)], "chief", "cli", "", {"via": "cli", "task_path": letter.task_path})
    ]


def test_reveals_are_read_only_in_the_admin(letter):
    chief = user_with_role("admin", "chief")
    reveal = redaction.record_reveal(chief, letter, via="console")
    client = logged_in(chief)
    listing = client.get(
        reverse("admin:jobqueue_auditentry_changelist"), {"action__exact": "letter.reveal"}
    )
    # The reveal's own row names chief (the page's header names the signed-in user anyway).
    assert listing.status_code == 200
    assert 'class="field-actor">chief</td>' in listing.content.decode()
    delete = reverse("admin:jobqueue_auditentry_delete", args=[reveal.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert list(AuditEntry.objects.values_list("action", flat=True)) == ["letter.reveal"]


def test_a_reveal_counts_for_its_user_and_its_letter_only(letter):
    chief = user_with_role("admin", "chief")
    other_admin = user_with_role("admin", "deputy")
    other_letter = DeadLetterFactory(kwargs=SECRETS)
    redaction.record_reveal(chief, letter, via="edit")
    assert redaction.has_seen(chief, letter)
    assert not redaction.has_seen(other_admin, letter)
    assert not redaction.has_seen(chief, other_letter)
    chief.is_active = False  # a reveal of before does not outlive the account's state
    assert not redaction.has_seen(chief, letter)


# --- the shapes secrets come in ---------------------------------------------------------------

# Names the default patterns mask, as settings, HTTP clients and card forms spell them.
MASKED_NAMES = [
    "smtp_pass", "SMTP_PASS", "dbPass", "passphrase", "passwd", "db_pwd", "pw", "secret_key",
    "jwt", "id_jwt", "bearer", "auth", "x-auth", "oauth_token", "basic_auth", "credentials",
    "Set-Cookie", "sessionid", "apikey", "x-api-key", "private_key", "signing_key",
    "aws_access_key_id", "credit_card", "creditCard", "card_number", "cardNo", "cc_num", "pan",
    "cvv2", "cvc", "iban", "account_number", "ssn", "social_security_number", "otp", "pin",
    "SENTRY_DSN", "dsn", "connection_string",
]  # fmt: skip
# Names that only look like them: shown as they are.
SHOWN_NAMES = [
    "author", "authority", "passenger", "passport", "passed", "username", "order", "amount",
    "idempotency_key", "ordering_key", "spin", "ping", "company", "email", "note", "span",
]  # fmt: skip


@pytest.mark.parametrize("name", MASKED_NAMES)
def test_the_default_patterns_mask_the_names_settings_and_clients_use(name):
    assert redaction.redact({name: "hidden-1"}) == {name: "••••"}


@pytest.mark.parametrize("name", SHOWN_NAMES)
def test_the_default_patterns_leave_names_that_only_look_sensitive(name):
    assert redaction.redact({name: "shown-1"}) == {name: "shown-1"}


SHAPES = {
    # HTTP clients take headers as a list of pairs (httpx, aiohttp, WSGI), HAR files and
    # Kubernetes env vars as {"name": …, "value": …}.
    "headers": [["Authorization", "Bearer hdr-pair-1"], ["Accept", "text/html"]],
    "har": [{"name": "Authorization", "value": "har-2"}, {"name": "Accept", "value": "*/*"}],
    "env": [{"Name": "DB_PASSWORD", "Value": "env-3"}, {"key": "X-Api-Key", "value": "env-4"}],
    "database": "postgres://app:url-pw-5@db.internal:5432/shop",
    "callback": "https://hooks.example/notify?api_key=query-6&order=42",
    "form_body": "user=ann&password=form-7",
    "raw_headers": "GET / HTTP/1.1\r\nHost: example\r\nAuthorization: Basic cmF3LTg=\r\n",
    "curl": ["Accept: */*", "X-Auth-Token: line-9"],
    "body": '{"order": 42, "card_number": "4111111111111111", "note": "keep"}',
    "repr": "{'token': 'repr-10', 'order': 42}",
    "log": "calling with Bearer bearer-11-abcdefgh",
    "jwt_text": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbm4ifQ.c2lnbmF0dXJlLTEy",
}
HIDDEN = [
    "hdr-pair-1", "har-2", "env-3", "env-4", "url-pw-5", "query-6", "form-7", "cmF3LTg",
    "line-9", "4111111111111111", "repr-10", "bearer-11", "c2lnbmF0dXJlLTEy",
]  # fmt: skip
KEPT = ["text/html", "*/*", "db.internal:5432/shop", "order=42", "user=ann", "keep", "Host"]


def test_header_pairs_urls_and_secrets_inside_text_are_masked():
    masked = redaction.redact(SHAPES)
    text = json.dumps(masked, ensure_ascii=False)
    assert [value for value in HIDDEN if value in text] == []
    assert [value for value in KEPT if value not in text] == []
    assert masked["headers"] == [["Authorization", "••••"], ["Accept", "text/html"]]
    assert masked["har"][0] == {"name": "Authorization", "value": "••••"}
    assert masked["database"] == "postgres://app:••••@db.internal:5432/shop"
    assert masked["callback"] == "https://hooks.example/notify?api_key=••••&order=42"
    assert masked["curl"] == ["Accept: */*", "X-Auth-Token: ••••"]
    assert masked["body"] == '{"order": 42, "card_number": "••••", "note": "keep"}'
    # A pair is a header only inside a list: two positional arguments are not one.
    assert redaction.redact(["token", "shown-2"]) == ["token", "shown-2"]


@pytest.fixture
def shaped_letter():
    return DeadLetterFactory(args=[SHAPES["database"]], kwargs=SHAPES)


def test_every_output_masks_the_shapes(shaped_letter, settings):
    from django.contrib.auth.models import User

    admin = logged_in(User.objects.create_superuser("root", password="pw"))
    operator = logged_in(user_with_role("operator"))
    outputs = {
        "detail": operator.get(reverse("deadletters:detail", args=[shaped_letter.pk])),
        "edit": logged_in(user_with_role("admin", "chief")).get(
            reverse("deadletters:edit", args=[shaped_letter.pk])
        ),
        "admin": admin.get(reverse("admin:jobqueue_deadletter_change", args=[shaped_letter.pk])),
        "csv": operator.post(reverse("deadletters:export"), {"format": "csv"}),
        "jsonl": operator.post(reverse("deadletters:export"), {"format": "jsonl"}),
    }
    texts = {}
    for name, response in outputs.items():
        assert response.status_code == 200, name
        body = b"".join(response.streaming_content) if response.streaming else response.content
        texts[name] = body.decode()
    out = StringIO()
    call_command("deadletters", "show", str(shaped_letter.pk), stdout=out)
    texts["cli"] = out.getvalue()
    for name, text in texts.items():
        assert [value for value in HIDDEN if value in text] == [], name
        assert "db.internal" in text, name
