"""Masking by pattern (case-insensitive, nested, lists) in every place a payload is shown, and
the audited reveal for those with the permission."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from deadletters import redaction
from deadletters.models import Reveal
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
    assert "order" in content and "42" in content


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
    assert not Reveal.objects.exists()


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
    reveal = Reveal.objects.get()
    assert (reveal.dead_letter_id, reveal.operator, reveal.operator_name, reveal.via) == (
        letter.pk,
        chief,
        "chief",
        "console",
    )
    assert reveal.task_path == letter.task_path and reveal.at is not None


def test_reveal_needs_csrf(letter):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(user_with_role("admin", "chief"))
    assert client.post(reveal_url(letter)).status_code == 403
    assert not Reveal.objects.exists()


def test_reveal_of_a_missing_letter_is_404_and_records_nothing():
    client = logged_in(user_with_role("admin", "chief"))
    assert client.post(reverse("deadletters:reveal", args=[999_999])).status_code == 404
    assert not Reveal.objects.exists()


def test_the_permission_can_be_granted_alone(letter):
    from django.contrib.auth.models import Permission

    viewer = user_with_role("viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_secrets"))
    assert logged_in(viewer).post(reveal_url(letter)).status_code == 200
    assert Reveal.objects.get().operator_name == "viewer"


def test_cli_reveal_needs_an_operator_with_the_permission_and_is_audited(letter):
    user_with_role("operator", "oncall")
    user_with_role("admin", "chief")
    show = ["deadletters", "show", str(letter.pk), "--json", "--reveal"]
    with pytest.raises(CommandError, match="--operator"):
        call_command(*show, stdout=StringIO())
    with pytest.raises(CommandError, match="view_secrets"):
        call_command(*show, "--operator", "oncall", stdout=StringIO())
    assert not Reveal.objects.exists()
    out = StringIO()
    call_command(*show, "--operator", "chief", stdout=out)
    assert json.loads(out.getvalue())["payload"] == PAYLOAD
    reveal = Reveal.objects.get()
    assert (reveal.operator_name, reveal.via, reveal.dead_letter_id) == ("chief", "cli", letter.pk)


def test_reveals_are_read_only_in_the_admin(letter):
    chief = user_with_role("admin", "chief")
    redaction.record_reveal(chief, letter, via="console")
    client = logged_in(chief)
    listing = client.get(reverse("admin:deadletters_reveal_changelist"))
    assert listing.status_code == 200 and "chief" in listing.content.decode()
    reveal = Reveal.objects.get()
    delete = reverse("admin:deadletters_reveal_delete", args=[reveal.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert Reveal.objects.count() == 1
