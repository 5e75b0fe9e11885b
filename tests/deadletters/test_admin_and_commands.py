import json

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from deadletters.models import ReplayItem, ReplayRun
from jobqueue.models import DeadLetter, Job
from tests.factories import DeadLetterFactory, ReplayItemFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client():
    user = User.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(user)
    return client


def test_admin_is_read_only_and_cannot_delete_audit_rows(superuser_client):
    item = ReplayItemFactory()
    run = item.run
    for model, obj in (("replayrun", run), ("replayitem", item), ("selection", run.selection)):
        changelist = superuser_client.get(reverse(f"admin:deadletters_{model}_changelist"))
        assert changelist.status_code == 200
        assert b'name="action"' not in changelist.content  # no bulk actions, no delete_selected
        change = reverse(f"admin:deadletters_{model}_change", args=[obj.pk])
        assert superuser_client.get(change).status_code == 200  # view-only page
        assert superuser_client.post(change, {"reason": "rewritten"}).status_code == 403
        delete = reverse(f"admin:deadletters_{model}_delete", args=[obj.pk])
        assert superuser_client.post(delete, {"post": "yes"}).status_code == 403
        assert superuser_client.get(reverse(f"admin:deadletters_{model}_add")).status_code == 403
    run.refresh_from_db()
    assert run.reason == "receipt API fixed"
    assert ReplayRun.objects.count() == 1 and ReplayItem.objects.count() == 1


def test_a_run_in_the_admin_links_to_its_ledger_instead_of_inlining_it(superuser_client):
    item = ReplayItemFactory()
    other = ReplayItemFactory()
    page = superuser_client.get(reverse("admin:deadletters_replayrun_change", args=[item.run.pk]))
    ledger = f"/admin/deadletters/replayitem/?run__id__exact={item.run.pk}"
    assert f'"{ledger}"'.encode() in page.content.replace(b"&amp;", b"&")
    assert f"dead letter {other.dead_letter_id} in run".encode() not in page.content
    listed = superuser_client.get(ledger)
    assert listed.status_code == 200
    assert listed.context["cl"].result_count == 1


@pytest.mark.parametrize(
    "model, query",
    [
        # Into the payload the admin shows masked: a value, a key, a prefix, a regex.
        ("jobqueue_deadletter", "kwargs__password=hunter2"),
        ("jobqueue_deadletter", "kwargs__has_key=password"),
        ("jobqueue_deadletter", "kwargs__password__startswith=hun"),
        ("jobqueue_deadletter", "args__0__regex=^h"),
        # Lookups the database refuses, or Django cannot build.
        ("jobqueue_deadletter", "task_path__regex=("),
        ("jobqueue_deadletter", "args__contains=hunter"),
        ("jobqueue_deadletter", "id__range=1"),
        ("jobqueue_deadletter", "queue_name__exact=%00"),  # PostgreSQL refuses NUL in text
        ("deadletters_replayrun", "state__exact=a%00"),
        # A saved selection's search words, hidden from those who may not reveal.
        ("deadletters_replayrun", "filter__q=hunter2"),
        ("deadletters_selection", "filter__q__icontains=hunter"),
        ("deadletters_replayitem", "run__operator__password__startswith=pbkdf2"),
    ],
)
def test_the_admin_lists_filter_only_by_what_they_offer(superuser_client, model, query):
    DeadLetterFactory(kwargs={"password": "hunter2"})
    response = superuser_client.get(f"{reverse(f'admin:{model}_changelist')}?{query}")
    assert response.status_code == 400


def test_the_admin_lists_own_filters_and_links_still_work(superuser_client):
    letter = DeadLetterFactory(queue_name="receipts")
    item = ReplayItemFactory()
    pages = [
        ("jobqueue_deadletter", f"state__exact={letter.state}&queue_name__exact=receipts", 1),
        ("jobqueue_deadletter", "queue_name__exact=elsewhere", 0),
        ("jobqueue_deadletter", f"q={letter.task_path}&state__exact={letter.state}", 2),
        ("deadletters_replayrun", f"state__exact={item.run.state}", 1),
        ("deadletters_replayitem", f"run__id__exact={item.run.pk}", 1),
        ("deadletters_replayitem", f"outcome__exact={item.outcome}", 1),
    ]
    for model, query, count in pages:
        response = superuser_client.get(f"{reverse(f'admin:{model}_changelist')}?{query}")
        assert response.status_code == 200, (model, query)
        assert response.context["cl"].result_count == count, (model, query)


def test_dead_letter_admin_is_read_only(superuser_client):
    letter = DeadLetterFactory()
    change = reverse("admin:jobqueue_deadletter_change", args=[letter.pk])
    assert superuser_client.get(change).status_code == 200
    assert superuser_client.post(change, {"state": "discarded"}).status_code == 403
    delete = reverse("admin:jobqueue_deadletter_delete", args=[letter.pk])
    assert superuser_client.post(delete, {"post": "yes"}).status_code == 403
    letter.refresh_from_db()
    assert letter.state == "pending"


def test_createoperator_roles():
    call_command("createoperator", "vic", role="viewer", password="s3cret-pass")
    vic = User.objects.get(username="vic")
    assert vic.check_password("s3cret-pass")
    assert vic.has_perm("deadletters.view_deadletter")
    assert not vic.has_perm("deadletters.replay_deadletter")
    call_command("createoperator", "vic", role="operator")
    vic = User.objects.get(username="vic")  # fresh permission cache
    assert vic.has_perm("deadletters.replay_deadletter")
    assert vic.has_perm("deadletters.discard_deadletter")
    assert not vic.has_perm("deadletters.replay_poisoned")
    assert vic.check_password("s3cret-pass")  # unchanged without --password
    call_command("createoperator", "ada", role="admin", password="pw-pw-pw")
    ada = User.objects.get(username="ada")
    assert ada.is_staff and ada.has_perm("deadletters.replay_poisoned")
    assert ada.has_perm("jobqueue.view_deadletter")
    assert ada.groups.count() == 1


def test_createoperator_never_takes_away_what_the_host_gave_a_user():
    """A superuser (or any staff member) given a console role keeps their admin sign-in: the
    role's groups change, the user's own flags do not."""
    User.objects.create_superuser("root", password="pw-pw-pw")
    for role in ("operator", "viewer", "admin", "viewer"):
        call_command("createoperator", "root", role=role)
        root = User.objects.get(username="root")
        assert root.is_staff and root.is_superuser, role
        assert [g.name for g in root.groups.all()] == [f"Dead-letter {role}s"]
    call_command("createoperator", "newcomer", role="operator", password="pw-pw-pw")
    assert not User.objects.get(username="newcomer").is_staff


def test_createoperator_needs_a_password_without_a_terminal():
    with pytest.raises(CommandError, match="--password"):
        call_command("createoperator", "ghost", role="viewer")
    assert not User.objects.filter(username="ghost").exists()


@pytest.fixture
def cli_operator():
    call_command("createoperator", "oncall", role="operator", password="pw-pw-pw")


def run_cli(*args):
    from io import StringIO

    out = StringIO()
    call_command("deadletters", *args, stdout=out)
    return out.getvalue()


def test_cli_list_and_show(cli_operator):
    letter = DeadLetterFactory(task_path="shop.receipt", kwargs={"password": "hunter2"})
    DeadLetterFactory(task_path="shop.other")
    rows = json.loads(run_cli("list", "--job-type", "shop.receipt", "--json"))
    assert [row["id"] for row in rows] == [letter.pk]
    shown = json.loads(run_cli("show", str(letter.pk), "--json"))
    assert shown["payload"]["kwargs"]["password"] == "••••"
    assert shown["idempotency_key"] == letter.idempotency_key
    with pytest.raises(CommandError):
        run_cli("show", "999999")


def test_cli_lists_and_filters_by_source(cli_operator):
    ours = DeadLetterFactory(task_path="shop.receipt")
    theirs = DeadLetterFactory(task_path="legacy.sync", source="django_q2")
    listed = json.loads(run_cli("list", "--source", "django_q2", "--json"))
    assert [row["id"] for row in listed] == [theirs.pk]
    assert ours.pk in [row["id"] for row in json.loads(run_cli("list", "--json"))]
    with pytest.raises(CommandError):
        run_cli("list", "--source", "celery")


def test_cli_replay_by_filter_uses_the_same_bounds_and_audit(cli_operator, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 2}
    letters = DeadLetterFactory.create_batch(5, task_path="shop.receipt")
    out = run_cli(
        "replay",
        "--job-type",
        "shop.receipt",
        "--limit",
        "4",
        "--reason",
        "API back",
        "--operator",
        "oncall",
        "--dry-run",
    )
    assert "4 selected, 4 to replay" in out
    assert not ReplayRun.objects.exists()
    out = run_cli(
        "replay",
        "--job-type",
        "shop.receipt",
        "--limit",
        "4",
        "--reason",
        "API back",
        "--operator",
        "oncall",
    )
    run = ReplayRun.objects.get()
    assert (run.operator_name, run.reason, run.done, run.batches) == ("oncall", "API back", 4, 2)
    assert f"run {run.pk} finished" in out
    assert Job.objects.filter(replayed_from__isnull=False).count() == 4
    # Oldest first: the newest one stays pending.
    assert DeadLetter.objects.get(state="pending") == letters[-1]
    # The CLI drove the run itself. The runner act's confirm queued (as every door's confirm
    # does) finds it done and changes nothing.
    from deadletters import services

    runner = Job.objects.get(task_path="deadletters.tasks.carry_out_run")
    assert services.run_due(*runner.args).handled == 0
    run.refresh_from_db()
    assert (run.state, run.done, run.batches) == ("finished", 4, 2)
    assert Job.objects.filter(replayed_from__isnull=False).count() == 4


def test_cli_discard_by_ids_and_refusals(cli_operator):
    letter = DeadLetterFactory()
    call_command("createoperator", "peek", role="viewer", password="pw-pw-pw")
    # The registry's check and message (as `act letters.discard` refuses them).
    with pytest.raises(CommandError, match=r"needs the permission deadletters\.discard_deadletter"):
        run_cli("discard", str(letter.pk), "--reason", "x", "--operator", "peek")
    with pytest.raises(CommandError, match="reason"):
        run_cli("discard", str(letter.pk), "--reason", " ", "--operator", "oncall")
    with pytest.raises(CommandError, match="--limit"):
        run_cli("discard", "--job-type", "x", "--reason", "r", "--operator", "oncall")
    with pytest.raises(CommandError, match="poison"):
        run_cli(
            "replay", str(letter.pk), "--reason", "r", "--operator", "oncall", "--allow-poisoned"
        )
    run_cli("discard", str(letter.pk), "--reason", "dupe", "--operator", "oncall")
    letter.refresh_from_db()
    assert letter.state == "discarded"
    assert ReplayItem.objects.get().outcome == "discarded"


def test_cli_plain_list_and_ids_with_a_filter_refused(cli_operator):
    letter = DeadLetterFactory(task_path="shop.receipt", last_error="first line\nsecond line")
    out = run_cli("list")
    assert f"{letter.pk:>8} pending" in out and "'first line'" in out
    with pytest.raises(CommandError, match="not both"):
        run_cli(
            "replay", str(letter.pk), "--job-type", "shop.receipt",
            "--reason", "r", "--operator", "oncall",
        )  # fmt: skip
    assert not ReplayRun.objects.exists()


@pytest.mark.parametrize("command", ["deadletters", "act"])
def test_an_inactive_operator_is_refused_by_name_not_with_a_traceback(command):
    """An inactive user holds no permission at all: the refusal says the account is inactive
    (it once indexed an empty list of missing permissions and raised IndexError)."""
    letter = DeadLetterFactory()
    User.objects.create_user("gone", password="pw-pw-pw", is_active=False)
    if command == "act":
        argv = ["act", "letter.reveal", "--letter", str(letter.pk)]
    else:
        argv = ["deadletters", "discard", str(letter.pk), "--reason", "r"]
    with pytest.raises(CommandError, match="gone is not an active user"):
        call_command(*argv, "--operator", "gone")
    letter.refresh_from_db()
    assert letter.state == "pending"
