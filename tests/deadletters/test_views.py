import re

import pytest
from django.test import Client
from django.urls import reverse

from deadletters.models import ReplayItem, ReplayRun, Selection
from jobqueue.models import DeadLetter, DeadLetterState, Job
from tests.audit import run_events
from tests.factories import DeadLetterFactory, UserFactory

from .conftest import logged_in

pytestmark = pytest.mark.django_db

LIST = reverse("deadletters:list")
PREVIEW = reverse("deadletters:preview")
PAGES = [
    reverse("deadletters:overview"),
    LIST,
    reverse("deadletters:audit"),
]


def test_anonymous_is_redirected_to_login():
    letter = DeadLetterFactory()
    for url in [*PAGES, reverse("deadletters:detail", args=[letter.pk])]:
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login") + "?next=")
    response = Client().post(PREVIEW, {"action": "replay", "ids": [letter.pk]})
    assert response.status_code == 302
    assert not Selection.objects.exists()


def test_root_is_the_health_dashboard_behind_login():
    assert Client().get("/")["Location"].startswith(reverse("login") + "?next=/")


def test_login_page_logs_in(viewer):
    client = Client()
    page = client.get(reverse("login"))
    assert b'name="username"' in page.content
    response = client.post(reverse("login"), {"username": "viewer", "password": "pw-for-tests"})
    assert response["Location"] == "/deadletters/health/"  # where the brand links
    assert client.get("/deadletters/").status_code == 200


def test_user_without_the_view_permission_gets_403():
    client = logged_in(UserFactory(username="nobody"))
    for url in PAGES:
        assert client.get(url).status_code == 403


def test_viewer_sees_pages_without_action_buttons(viewer_client):
    letter = DeadLetterFactory()
    for url in [*PAGES, reverse("deadletters:detail", args=[letter.pk])]:
        response = viewer_client.get(url)
        assert response.status_code == 200, url
        assert b'value="replay"' not in response.content
        assert b'value="discard"' not in response.content
        assert b'name="ids"' not in response.content


def test_viewer_post_is_forbidden_and_changes_nothing(viewer_client, operator):
    letter = DeadLetterFactory()
    for action in ("replay", "discard"):
        response = viewer_client.post(PREVIEW, {"action": action, "ids": [letter.pk]})
        assert response.status_code == 403
    assert not Selection.objects.exists()
    # Nor can a viewer confirm or steer someone else's run.
    selection = Selection.objects.create(
        operator=operator,
        action="replay",
        ids=[letter.pk],
        created_at=letter.dead_lettered_at,
    )
    confirm = reverse("deadletters:confirm", args=[selection.pk])
    assert viewer_client.post(confirm, {"reason": "x"}).status_code in (403, 404)
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.PENDING
    assert not ReplayRun.objects.exists()


def test_operator_sees_action_buttons(operator_client):
    DeadLetterFactory()
    response = operator_client.get(LIST)
    assert b'value="replay"' in response.content
    assert b'value="discard"' in response.content
    assert b'class="select-page"' in response.content


def test_list_filters_live_in_the_url_and_htmx_gets_the_partial(viewer_client):
    wanted = DeadLetterFactory(task_path="shop.send_receipt", last_error="needle in haystack")
    DeadLetterFactory(task_path="shop.other", last_error="needle too")
    response = viewer_client.get(LIST, {"job_type": "shop.send_receipt", "q": "needle"})
    rows = re.findall(rb'href="/deadletters/(\d+)/"', response.content)
    assert rows == [str(wanted.pk).encode()]
    assert b"<html" in response.content
    partial = viewer_client.get(
        LIST, {"job_type": "shop.send_receipt"}, headers={"HX-Request": "true"}
    )
    assert b"<html" not in partial.content
    assert b'id="results"' in partial.content
    assert "HX-Request" in partial["Vary"] and "HX-Request" in response["Vary"]
    # Back button after a cache miss: htmx asks again with HX-Request and needs the whole page.
    restored = viewer_client.get(
        LIST,
        {"job_type": "shop.send_receipt"},
        headers={"HX-Request": "true", "HX-History-Restore-Request": "true"},
    )
    assert b"<html" in restored.content


def test_list_pages_with_cursor_links(viewer_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "PAGE_SIZE": 2}
    letters = DeadLetterFactory.create_batch(5, task_path="t")
    first = viewer_client.get(LIST, {"job_type": "t"})
    next_link = re.search(rb'rel="next" href="\?([^"]+)"', first.content).group(1)
    query = next_link.decode().replace("&amp;", "&")
    assert "job_type=t" in query
    second = viewer_client.get(f"{LIST}?{query}")
    shown = [int(pk) for pk in re.findall(rb'href="/deadletters/(\d+)/"', second.content)]
    assert shown == [letters[2].pk, letters[1].pk]


def test_select_all_count(operator_client):
    DeadLetterFactory.create_batch(3, task_path="t")
    response = operator_client.get(reverse("deadletters:count"), {"job_type": "t"})
    assert b"Select all 3 matching" in response.content


def test_overview_polls_and_renders_chart(viewer_client):
    DeadLetterFactory(task_path="shop.send_receipt")
    page = viewer_client.get(reverse("deadletters:overview"))
    assert b'hx-trigger="redrive:refresh"' in page.content and b"data-poll=" in page.content
    assert b"<svg" in page.content and b"shop.send_receipt" in page.content
    partial = viewer_client.get(reverse("deadletters:overview"), headers={"HX-Request": "true"})
    assert partial.content.lstrip().startswith(b'<div id="groups"')


def test_everything_from_errors_and_payloads_is_escaped(viewer_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REDACT_PATTERNS": ["password"]}
    attack = "<script>alert('x')</script>"
    letter = DeadLetterFactory(
        task_path="t",
        last_error=attack,
        error_class="<b>Bold</b>",
        args=[attack],
        kwargs={"password": "hunter2", "note": attack},
    )
    for url in (LIST, reverse("deadletters:detail", args=[letter.pk])):
        content = viewer_client.get(url).content.decode()
        assert attack not in content
        assert "&lt;script&gt;" in content
        assert "<b>Bold</b>" not in content
    detail = viewer_client.get(reverse("deadletters:detail", args=[letter.pk])).content.decode()
    assert "hunter2" not in detail
    assert "••••" in detail
    assert "Traceback" in detail and '<details class="traceback-view">' in detail


def test_detail_shows_jobs_and_history(operator_client, operator):
    letter = DeadLetterFactory()
    selection = operator_client.post(PREVIEW, {"action": "replay", "ids": [letter.pk]})
    operator_client.post(selection["Location"], {"reason": "fixed the API"})
    detail = operator_client.get(reverse("deadletters:detail", args=[letter.pk])).content.decode()
    job = Job.objects.get(replayed_from=letter)
    job_link = f'<a href="{reverse("deadletters:job", args=[job.pk])}">{job.pk}</a>'
    assert f"<tr><td>{job_link}</td><td>replay 1</td>" in detail
    # Its history row's cells (the page names who is logged in anyway).
    assert "<td>operator</td>" in detail and "<td>fixed the API</td>" in detail
    assert "Replay pending" in detail


def test_missing_letter_is_404(viewer_client):
    assert viewer_client.get(reverse("deadletters:detail", args=[424242])).status_code == 404


def test_replay_flow_preview_then_confirm(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_REPLAYS": 3}
    fresh = DeadLetterFactory(task_path="a")
    again = DeadLetterFactory(task_path="a", replays=1)
    poison = DeadLetterFactory(task_path="b", replays=3)
    busy = DeadLetterFactory(task_path="b", replaying=True)
    response = operator_client.post(
        PREVIEW, {"action": "replay", "ids": [fresh.pk, again.pk, poison.pk, busy.pk]}
    )
    confirm_url = response["Location"]
    preview = operator_client.get(confirm_url).content.decode()
    assert re.search(r'class="will-act">2<', preview)
    assert re.search(r'class="will-skip">2<', preview)
    assert "may be poison" in preview
    assert "an earlier replay is still pending" in preview
    assert "allow_poisoned" not in preview  # an operator may not bypass the limit
    missing_reason = operator_client.post(confirm_url, {"reason": ""})
    assert missing_reason.status_code == 400
    assert not ReplayRun.objects.exists()
    # Bypass without the permission is refused by the server, not only hidden.
    forged = operator_client.post(confirm_url, {"reason": "x", "allow_poisoned": "on"})
    assert forged.status_code == 403
    done = operator_client.post(confirm_url, {"reason": "receipt API is back"})
    run = ReplayRun.objects.get()
    assert done["Location"] == reverse("deadletters:run", args=[run.pk])
    assert (run.done, run.skipped, run.reason) == (2, 2, "receipt API is back")
    # Confirming twice does not start a second run.
    assert operator_client.post(confirm_url, {"reason": "again"})["Location"] == done["Location"]
    assert ReplayRun.objects.count() == 1


def test_admin_role_may_bypass_poison(admin_client_, settings):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_REPLAYS": 1}
    poison = DeadLetterFactory(replays=1)
    confirm_url = admin_client_.post(PREVIEW, {"action": "replay", "ids": [poison.pk]})["Location"]
    assert b'name="allow_poisoned"' in admin_client_.get(confirm_url).content
    admin_client_.post(confirm_url, {"reason": "really fixed", "allow_poisoned": "on"})
    poison.refresh_from_db()
    assert poison.replays == 2


def test_select_all_matching_freezes_the_filter_result(operator_client):
    matching = DeadLetterFactory.create_batch(3, task_path="t", error_class="E")
    DeadLetterFactory(task_path="t", error_class="Other")
    response = operator_client.post(
        PREVIEW, {"action": "discard", "select_all": "1", "job_type": "t", "error_class": "E"}
    )
    selection = Selection.objects.get()
    assert response["Location"] == reverse("deadletters:confirm", args=[selection.pk])
    assert sorted(selection.ids) == sorted(dl.pk for dl in matching)
    assert selection.filter == {"job_type": "t", "error_class": "E", "order": "newest"}
    operator_client.post(response["Location"], {"reason": "duplicates of order 17"})
    assert DeadLetter.objects.filter(state="discarded").count() == 3
    assert ReplayRun.objects.get().filter["error_class"] == "E"


def test_empty_selection_is_refused_with_a_message(operator_client):
    response = operator_client.post(PREVIEW, {"action": "replay"}, follow=True)
    assert b"Select at least one dead letter" in response.content
    assert not Selection.objects.exists()


def test_a_refused_selection_goes_back_only_to_this_site(operator_client):
    here = operator_client.post(PREVIEW, {"action": "replay", "back": f"{LIST}?job_type=t"})
    assert here["Location"] == f"{LIST}?job_type=t"
    away = operator_client.post(PREVIEW, {"action": "replay", "back": "https://evil.example/"})
    assert away["Location"] == LIST


def test_csrf_is_enforced_and_htmx_sends_the_token(operator):
    letter = DeadLetterFactory()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(PREVIEW, {"action": "replay", "ids": [letter.pk]}).status_code == 403
    assert not Selection.objects.exists()
    page = client.get(LIST).content.decode()
    token = re.search(r"hx-headers='\{\"X-CSRFToken\": \"([^\"]+)\"\}'", page).group(1)
    response = client.post(
        PREVIEW, {"action": "replay", "ids": [letter.pk]}, headers={"X-CSRFToken": token}
    )
    assert response.status_code == 302
    assert Selection.objects.count() == 1


def test_run_page_progress_and_controls(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 2}
    letters = DeadLetterFactory.create_batch(5)
    confirm_url = operator_client.post(
        PREVIEW, {"action": "replay", "ids": [dl.pk for dl in letters]}
    )["Location"]
    run_url = operator_client.post(confirm_url, {"reason": "big one"})["Location"]
    page = operator_client.get(run_url).content.decode()
    assert "Queued" in page and 'data-poll="1"' in page
    run = ReplayRun.objects.get()
    pause = reverse("deadletters:run-control", args=[run.pk, "pause"])
    partial = operator_client.post(pause, headers={"HX-Request": "true"}).content.decode()
    assert "Paused" in partial and "Resume" in partial and "<html" not in partial
    run.refresh_from_db()
    assert run.state == "paused"
    again = operator_client.post(pause, headers={"HX-Request": "true"}).content.decode()
    assert "The run is paused; nothing to pause." in again  # in the swapped partial itself
    resume = reverse("deadletters:run-control", args=[run.pk, "resume"])
    operator_client.post(resume, headers={"HX-Request": "true"})
    operator_client.post(reverse("deadletters:run-control", args=[run.pk, "cancel"]))
    run.refresh_from_db()
    assert run.state == "cancelled"
    # Every control is on record, in order, with who did it (the run keeps only the last).
    assert run_events(run) == [
        ("paused", "operator"),
        ("resumed", "operator"),
        ("cancelled", "operator"),
    ]
    page = operator_client.get(run_url).content.decode()
    assert "Paused by operator" in page and "Resumed by operator" in page


def test_viewer_cannot_control_runs(viewer_client, operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 1}
    letters = DeadLetterFactory.create_batch(2)
    confirm_url = operator_client.post(
        PREVIEW, {"action": "replay", "ids": [dl.pk for dl in letters]}
    )["Location"]
    operator_client.post(confirm_url, {"reason": "x"})
    run = ReplayRun.objects.get()
    page = viewer_client.get(reverse("deadletters:run", args=[run.pk])).content.decode()
    assert reverse("deadletters:run-control", args=[run.pk, "pause"]) not in page
    for command in ("pause", "cancel", "resume"):
        url = reverse("deadletters:run-control", args=[run.pk, command])
        assert viewer_client.post(url).status_code == 403
    run.refresh_from_db()
    assert run.state == "queued"


def runs_section(response) -> str:
    """The Audit page's replay runs (the job type filter narrows them, not the entries)."""
    found = re.search(r'<section class="runs".*?</section>', response.content.decode(), re.S)
    return found[0] if found else ""


def test_audit_page_lists_runs_and_filters(viewer_client, operator_client, admin_client_):
    a = DeadLetterFactory(task_path="a")
    b = DeadLetterFactory(task_path="b")
    for client, letter, reason in (
        (operator_client, a, "reason-a"),
        (admin_client_, b, "reason-b"),
    ):
        confirm_url = client.post(PREVIEW, {"action": "replay", "ids": [letter.pk]})["Location"]
        client.post(confirm_url, {"reason": reason})
    audit = reverse("deadletters:audit")
    page = viewer_client.get(audit).content.decode()
    assert "reason-a" in page and "reason-b" in page
    assert "reason-b" not in viewer_client.get(audit, {"operator": "operator"}).content.decode()
    by_type = runs_section(viewer_client.get(audit, {"job_type": "b"}))
    assert "reason-b" in by_type and "reason-a" not in by_type
    run = ReplayRun.objects.get(reason="reason-a")
    ledger = viewer_client.get(reverse("deadletters:run", args=[run.pk])).content.decode()
    item = ReplayItem.objects.get(run=run)
    job_link = f'<a href="{reverse("deadletters:job", args=[item.job_id])}">{item.job_id}</a>'
    assert f">#{a.pk}</a>" in ledger and f'"new-job">{job_link} (pending)</td>' in ledger
    Job.objects.filter(pk=item.job_id).update(state="dead")  # the replay died too
    ledger = viewer_client.get(reverse("deadletters:run", args=[run.pk])).content.decode()
    assert f'"new-job">{job_link} (dead again)</td>' in ledger


def test_audit_finds_a_run_by_job_type_before_its_first_batch(
    viewer_client, operator_client, settings
):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 2}
    letters = DeadLetterFactory.create_batch(5, task_path="shop.slow_one")
    confirm_url = operator_client.post(
        PREVIEW, {"action": "replay", "ids": [dl.pk for dl in letters]}
    )["Location"]
    operator_client.post(confirm_url, {"reason": "queued for the runner"})
    assert not ReplayItem.objects.exists()  # nothing processed yet: the runner has not run
    found = viewer_client.get(reverse("deadletters:audit"), {"job_type": "shop.slow_one"})
    assert "queued for the runner" in runs_section(found)
    other = viewer_client.get(reverse("deadletters:audit"), {"job_type": "shop.slow"})
    assert "queued for the runner" not in runs_section(other)


def test_audit_has_no_write_endpoints(operator_client):
    letter = DeadLetterFactory()
    confirm_url = operator_client.post(PREVIEW, {"action": "replay", "ids": [letter.pk]})[
        "Location"
    ]
    operator_client.post(confirm_url, {"reason": "x"})
    audit = reverse("deadletters:audit")
    for method in (operator_client.post, operator_client.put, operator_client.delete):
        assert method(audit).status_code == 405
    run = ReplayRun.objects.get()
    assert operator_client.delete(reverse("deadletters:run", args=[run.pk])).status_code == 405
    assert ReplayRun.objects.count() == 1 and ReplayItem.objects.count() == 1


def test_a_stalled_run_offers_a_runner_restart(operator_client, settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 1}
    settings.REDRIVE = {**settings.REDRIVE, "STALL_SECONDS": 60}
    letters = DeadLetterFactory.create_batch(2)
    confirm_url = operator_client.post(
        PREVIEW, {"action": "replay", "ids": [dl.pk for dl in letters]}
    )["Location"]
    run_url = operator_client.post(confirm_url, {"reason": "x"})["Location"]
    assert b"Restart runner" not in operator_client.get(run_url).content
    run = ReplayRun.objects.get()
    ReplayRun.objects.filter(pk=run.pk).update(updated_at=timezone.now() - timedelta(minutes=2))
    assert b"Restart runner" in operator_client.get(run_url).content
    operator_client.post(reverse("deadletters:run-control", args=[run.pk, "resume"]))
    run.refresh_from_db()
    assert run.generation == 1
    runners = Job.objects.filter(task_path="deadletters.tasks.carry_out_run")
    assert sorted(runners.values_list("args", flat=True)) == [[run.pk, 0], [run.pk, 1]]


def test_an_invalid_filter_field_is_named_and_the_valid_ones_still_apply(viewer_client):
    wanted = DeadLetterFactory(task_path="t")
    DeadLetterFactory(task_path="other")
    response = viewer_client.get(LIST, {"job_type": "t", "since": "not-a-date"})
    content = response.content.decode()
    assert "Ignored invalid filter" in content and "<code>since</code>" in content
    rows = re.findall(r'href="/deadletters/(\d+)/"', content)
    assert rows == [str(wanted.pk)]


def test_hand_picked_selection_records_no_filter(operator_client):
    letter = DeadLetterFactory()
    operator_client.post(PREVIEW, {"action": "replay", "ids": [letter.pk], "job_type": "x"})
    assert Selection.objects.get().filter == {}


def test_audit_date_filter(viewer_client, operator_client):
    from datetime import timedelta

    from django.utils import timezone

    letter = DeadLetterFactory()
    confirm_url = operator_client.post(PREVIEW, {"action": "replay", "ids": [letter.pk]})[
        "Location"
    ]
    operator_client.post(confirm_url, {"reason": "dated"})
    audit = reverse("deadletters:audit")
    today = timezone.now().date()
    row = '<td class="reason">dated</td>'
    assert row in viewer_client.get(audit, {"since": today, "until": today}).content.decode()
    tomorrow = today + timedelta(days=1)
    assert row not in viewer_client.get(audit, {"since": tomorrow}).content.decode()
    assert row in viewer_client.get(audit, {"since": "garbage"}).content.decode()
