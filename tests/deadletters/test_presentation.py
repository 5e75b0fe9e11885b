"""How the console presents what it reads: times, the live run page, charts, error pages and
the small wordings operators tripped over (issue 15)."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.checks import run_checks
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from deadletters import services, views
from deadletters.models import ReplayRun
from deadletters.templatetags.console import relative, when
from jobqueue.models import JobCounter, WorkerRecord
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db

LIST = reverse("deadletters:list")
PREVIEW = reverse("deadletters:preview")
STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [A-Z]{2,5}")
TIME_ELEMENT = re.compile(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>')


# --- time ---------------------------------------------------------------------------------


def test_one_time_format_in_a_time_element_with_the_age_on_hover():
    moment = datetime(2026, 11, 30, 14, 49, 17, 123456, tzinfo=UTC)
    html = str(when(moment))
    stamp, title, text = TIME_ELEMENT.fullmatch(html).groups()
    assert text == "2026-11-30 14:49:17 UTC"  # no microseconds, the zone named
    assert stamp == "2026-11-30T14:49:17.123456Z"
    assert title.endswith(" ago")
    beside = str(when(moment, "beside"))
    assert beside.startswith(html) and re.search(r'<span class="ago">\(.+ ago\)</span>$', beside)
    # Attempt records keep their times as ISO text with an offset: shown the same way.
    assert TIME_ELEMENT.fullmatch(str(when("2026-11-30T15:49:17+01:00"))).group(3) == (
        "2026-11-30 14:49:17 UTC"
    )
    assert when(None) == "—"


def test_times_follow_the_consoles_zone_setting(settings):
    settings.REDRIVE = {**settings.REDRIVE, "TIME_ZONE": "Europe/Paris"}
    moment = datetime(2026, 11, 30, 14, 49, 17, tzinfo=UTC)
    assert when(moment, "plain") == "2026-11-30 15:49:17 CET"
    assert 'datetime="2026-11-30T14:49:17Z"' in str(when(moment))


def test_an_unknown_zone_stops_manage_py(settings):
    settings.REDRIVE = {**settings.REDRIVE, "TIME_ZONE": "Mars/Olympus"}
    assert "redrive.E021" in [e.id for e in run_checks()]


def test_relative_ages_never_say_zero_minutes():
    now = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
    assert relative(now - timedelta(seconds=2), now) == "just now"
    assert relative(now - timedelta(seconds=42), now) == "42 s ago"
    assert relative(now - timedelta(minutes=3, seconds=5), now) == "3 min ago"
    assert relative(now - timedelta(hours=2, minutes=5), now) == "2 h 5 min ago"
    assert relative(now - timedelta(days=3, hours=4), now) == "3 d 4 h ago"
    assert relative(now + timedelta(minutes=5), now) == "in 5 min"


def test_every_page_writes_times_one_way(operator_client):
    now = timezone.now()
    letter = DeadLetterFactory(discarded=True)
    pending = DeadLetterFactory()
    confirm = operator_client.post(PREVIEW, {"action": "replay", "ids": [pending.pk]})
    run_url = operator_client.post(confirm["Location"], {"reason": "back"})["Location"]
    DeadLetterFactory()  # one still pending, for the overview
    WorkerRecord.objects.create(
        worker_id="w:1", host="w", pid=1, started_at=now, last_heartbeat_at=now
    )
    JobCounter.objects.create(
        minute=now.replace(second=0, microsecond=0),
        queue_name="default",
        task_path="t",
        succeeded=1,
        last_success_at=now,
    )
    pages = [
        reverse("deadletters:health"),
        reverse("deadletters:overview"),
        LIST,
        reverse("deadletters:detail", args=[letter.pk]),
        reverse("deadletters:detail", args=[pending.pk]),
        reverse("deadletters:audit"),
        run_url,
    ]
    for url in pages:
        html = operator_client.get(url).content.decode()
        times = re.findall(r"<time[^>]*>[^<]*</time>", html)
        assert times, url
        for element in times:
            match = TIME_ELEMENT.fullmatch(element)
            assert match and STAMP.fullmatch(match.group(3)), (url, element)
        visible = re.sub(r"<[^>]+>", " ", html)
        assert "0 minutes ago" not in visible, url
        # No raw ISO (with a T or an offset) nor microseconds outside the datetime attributes.
        assert not re.search(r"\d{2}:\d{2}:\d{2}(\.\d+|[+-]\d{2}:\d{2})", visible), url


def test_date_filters_are_iso_text_inputs_read_in_the_consoles_zone(viewer_client, settings):
    html = viewer_client.get(LIST).content.decode()
    since = re.search(r'<input[^>]*name="since"[^>]*>', html).group(0)
    # Text, not type="date" (the browser's locale): a day, a time, "1h" or "deploy".
    assert 'type="text"' in since and 'placeholder="1h, deploy, 2026-12-04 14:30"' in since
    assert 'list="id_since-choices"' in since and '<datalist id="id_since-choices">' in html
    # US order is not a second accepted spelling: it is named as an invalid filter.
    refused = viewer_client.get(LIST, {"since": "11/30/2026"}).content.decode()
    assert "Ignored invalid filter" in refused
    # A day is the console zone's day: 23:30 UTC on the 29th is the 30th in Paris.
    settings.REDRIVE = {**settings.REDRIVE, "TIME_ZONE": "Europe/Paris"}
    DeadLetterFactory(dead_lettered_at=datetime(2026, 11, 29, 23, 30, tzinfo=UTC))
    found = viewer_client.get(LIST, {"since": "2026-11-30", "until": "2026-11-30"})
    assert len(re.findall(r'href="/deadletters/(\d+)/"', found.content.decode())) == 1


# --- the live run page --------------------------------------------------------------------


def _operator_run(operator_client, n, settings, batch_size=2):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": batch_size}
    letters = DeadLetterFactory.create_batch(n)
    confirm = operator_client.post(PREVIEW, {"action": "replay", "ids": [dl.pk for dl in letters]})
    operator_client.post(confirm["Location"], {"reason": "go"})
    return ReplayRun.objects.get()


def test_progress_and_ledger_are_one_polled_partial(operator_client, settings):
    run = _operator_run(operator_client, 5, settings)
    services.process_batch(run.pk, generation=run.generation)
    url = reverse("deadletters:run", args=[run.pk])
    partial = operator_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert partial.startswith('<div id="live"') and 'data-poll="1"' in partial
    assert 'id="progress"' in partial and '<table class="grid ledger">' in partial
    assert "<html" not in partial
    assert '<span class="processed">2</span>' in partial
    assert len(re.findall(r'<td class="new-job">', partial)) == 2


def test_the_ledger_shows_only_the_batches_the_progress_counts(operator_client, settings):
    """A batch committing between the two reads must not show in one and not the other."""
    run = _operator_run(operator_client, 6, settings)
    services.process_batch(run.pk, generation=run.generation)
    seen = ReplayRun.objects.get()  # the page's read of the run...
    services.process_batch(run.pk, generation=run.generation)  # ...then a batch commits
    request = RequestFactory().get("/")
    request.user = seen.operator
    context = views.runs._run_context(request, seen)
    assert seen.processed == 2 and len(context["items"]) == 2


def test_a_finished_run_polls_until_its_jobs_settle_then_stops(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "OVERVIEW_POLL_SECONDS": 7}
    run = _operator_run(operator_client, 2, settings)
    run.refresh_from_db()
    assert run.state == "finished"  # small enough to run inside the request
    url = reverse("deadletters:run", args=[run.pk])
    page = operator_client.get(url).content.decode()
    assert 'data-poll="7"' in page and "(pending)" in page
    from jobqueue.models import Job

    Job.objects.filter(pk__in=run.items.values("job_id")).update(state="done")
    page = operator_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "(done)" in page and "(pending)" not in page
    assert "hx-trigger" not in page and "data-poll" not in page


def test_run_controls_swap_the_whole_live_partial(operator_client, settings):
    run = _operator_run(operator_client, 5, settings)
    pause = reverse("deadletters:run-control", args=[run.pk, "pause"])
    partial = operator_client.post(pause, headers={"HX-Request": "true"}).content.decode()
    assert partial.startswith('<div id="live"') and "Ledger" in partial
    assert 'hx-target="#live"' in partial and "hx-trigger" not in partial  # paused: no poll


# --- error pages and the favicon ----------------------------------------------------------


def test_a_403_names_the_missing_permission_in_the_consoles_layout(viewer_client):
    from tests.deadletters.conftest import logged_in
    from tests.factories import UserFactory

    response = logged_in(UserFactory(username="nobody")).get(LIST)
    html = response.content.decode()
    assert response.status_code == 403
    assert 'class="topbar"' in html and "deadletters/console.css" in html
    assert "deadletters.view_deadletter" in html and "browse the dead-letter console" in html
    assert "<strong>viewer</strong> role" in html
    letter = DeadLetterFactory()
    response = viewer_client.post(PREVIEW, {"action": "replay", "ids": [letter.pk]})
    html = response.content.decode()
    assert response.status_code == 403
    assert "deadletters.replay_deadletter" in html and "<strong>operator</strong> role" in html
    assert reverse("deadletters:audit") in html  # somewhere to go


def test_a_404_says_what_was_not_found_and_where_to_go(viewer_client):
    response = viewer_client.get(reverse("deadletters:detail", args=[987654]))
    html = response.content.decode()
    assert response.status_code == 404 and "There is no dead letter #987654." in html
    assert 'class="topbar"' in html and f'href="{LIST}?state=pending"' in html
    response = viewer_client.get(reverse("deadletters:run", args=[55]))
    assert response.status_code == 404 and "There is no replay run #55." in response.text
    assert "audit log lists every run" in response.text
    # The example project hands its own 404s (an unknown path) to the console's page too.
    response = viewer_client.get("/deadletters/no/such/page/")
    assert response.status_code == 404
    assert "Nothing is served at <code>/deadletters/no/such/page/</code>" in response.text


def test_every_console_page_links_the_favicon_and_the_project_serves_it(viewer_client):
    html = viewer_client.get(LIST).content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+)"', html).group(1)
    assert icon.endswith("deadletters/favicon.svg")
    response = viewer_client.get("/favicon.ico")
    assert response.status_code == 302 and response["Location"] == icon
    from django.contrib.staticfiles import finders

    assert finders.find("deadletters/favicon.svg")  # shipped in the app's static files


# --- the smaller items --------------------------------------------------------------------


def test_cancel_on_the_confirm_page_goes_back_to_the_filtered_list(operator_client):
    letter = DeadLetterFactory(task_path="t")
    back = f"{LIST}?job_type=t&state=pending"
    confirm = operator_client.post(PREVIEW, {"action": "replay", "ids": [letter.pk], "back": back})[
        "Location"
    ]
    html = operator_client.get(confirm).content.decode()
    assert '<a href="/deadletters/list/?job_type=t&amp;state=pending">Cancel</a>' in html
    # Another site's address is never a Cancel target.
    confirm = operator_client.post(
        PREVIEW, {"action": "replay", "ids": [letter.pk], "back": "https://evil.example/"}
    )["Location"]
    assert f'<a href="{LIST}">Cancel</a>' in operator_client.get(confirm).content.decode()


def test_an_invalid_filter_is_marked_on_its_field_and_offers_no_select_all(operator_client):
    DeadLetterFactory(task_path="t")
    html = operator_client.get(LIST, {"job_type": "t", "since": "30/11/2026"}).content.decode()
    since = re.search(r'<input[^>]*name="since"[^>]*>', html).group(0)
    assert 'aria-invalid="true"' in since and 'aria-describedby="id_since_error"' in since
    assert 'id="id_since_error"' in html
    applied = re.search(r'<p class="muted applied">(.*?)</p>', html).group(1)
    assert applied.strip() == "Applied: <code>job_type=t</code>"
    assert "Correct the filter to select all" in html and 'hx-trigger="load"' not in html
    valid = operator_client.get(LIST, {"job_type": "t"}).content.decode()
    assert 'hx-trigger="load"' in valid and "aria-invalid" not in valid


def test_the_filter_form_swaps_with_the_rows_so_its_errors_follow(viewer_client):
    htmx = {"HX-Request": "true", "HX-Target": "listing"}
    partial = viewer_client.get(LIST, {"since": "nope"}, headers=htmx).content.decode()
    assert partial.lstrip().startswith('<div id="listing">') and 'aria-invalid="true"' in partial
    rows_only = viewer_client.get(LIST, headers={"HX-Request": "true"}).content.decode()
    assert rows_only.lstrip().startswith('<div id="results">')


def test_the_preview_counts_one_in_the_singular(operator_client, settings):
    letter = DeadLetterFactory(replays=1)
    confirm = operator_client.post(PREVIEW, {"action": "replay", "ids": [letter.pk]})["Location"]
    text = re.sub(r"\s+", " ", operator_client.get(confirm).content.decode())
    assert "1 of these was replayed before and died again — it may be poison." in text
    assert "exactly this 1 id, nothing" in text
    two = DeadLetterFactory.create_batch(2, replays=1)
    confirm = operator_client.post(PREVIEW, {"action": "replay", "ids": [d.pk for d in two]})
    text = re.sub(r"\s+", " ", operator_client.get(confirm["Location"]).content.decode())
    assert "2 of these were replayed before and died again — they may be poison." in text
    assert "exactly these 2 ids, nothing" in text


def test_a_letter_that_died_again_tells_each_jobs_attempts_apart(viewer_client):
    from tests.factories import JobFactory, _error

    letter = DeadLetterFactory(attempts=2, replays=1)
    replay = JobFactory(dead=True, replayed_from=letter)
    letter.errors = [_error(1), _error(2), _error(1)]
    letter.save(update_fields=["errors"])
    html = viewer_client.get(reverse("deadletters:detail", args=[letter.pk])).content.decode()
    headings = re.findall(r'<h3 class="attempt-group">([^<]+)</h3>', html)
    assert headings == [
        f"Original job — job {letter.original_job_id}",
        f"Replay 1 — job {replay.pk}",
    ]
    assert "Attempt 1</strong> of original job" in html
    assert "Attempt 1</strong> of replay 1" in html


# --- the health page's charts and queues --------------------------------------------------


def test_charts_have_axes_legends_and_each_minutes_value_on_hover(viewer_client):
    now = timezone.now()
    minute = now.replace(second=0, microsecond=0)
    JobCounter.objects.create(
        minute=minute - timedelta(minutes=3),
        queue_name="default",
        task_path="shop.send_receipt",
        succeeded=37,
        last_success_at=now,
    )
    html = viewer_client.get(reverse("deadletters:health")).content.decode()
    completed = re.search(r'<figure class="chart ok">(.*?)</figure>', html, re.S).group(1)
    assert '<span class="swatch" aria-hidden="true"></span> Completed per minute' in completed
    assert '<strong class="total">37</strong>' in completed
    # Value axis: 0, the middle and a round top above the peak (37 -> 50).
    ticks = re.findall(r'<text class="tick"[^>]*text-anchor="end"[^>]*>(\d+)</text>', completed)
    assert ticks == ["0", "25", "50"]
    # Time axis: clock times at the quarter hours of the last hour.
    clock = re.findall(r'text-anchor="middle">(\d{2}:\d{2})</text>', completed)
    assert 3 <= len(clock) <= 4 and all(int(t[3:]) % 15 == 0 for t in clock)
    # Every minute has a hover target saying its time and value, zero minutes too.
    titles = re.findall(r"<g class=\"minute\"><title>([^<]+)</title>", completed)
    assert len(titles) == 60
    at = (minute - timedelta(minutes=3)).strftime("%Y-%m-%d %H:%M")
    assert f"{at} UTC: 37 completed" in titles
    assert titles.count(f"{at} UTC: 37 completed") == 1
    assert sum(t.endswith(": 0 completed") for t in titles) == 59


def test_the_replay_runners_queue_is_apart_and_idle_queues_are_left_out(viewer_client):
    now = timezone.now()
    JobFactory(task_path="shop.send_receipt", queue_name="receipts")
    JobFactory(task_path="deadletters.tasks.carry_out_run", queue_name="deadletters")
    minute = now.replace(second=0, microsecond=0)
    JobCounter.objects.create(  # the runner's finished work must not fill the charts
        minute=minute,
        queue_name="deadletters",
        task_path="deadletters.tasks.carry_out_run",
        succeeded=9,
        last_success_at=now,
    )
    JobCounter.objects.create(  # a queue that only ever dead-lettered: nothing to show now
        minute=minute,
        queue_name="unused",
        task_path="shop.gone",
        dead=0,
    )
    # Task names are identifiers (|ident): read without their break opportunities.
    html = viewer_client.get(reverse("deadletters:health")).content.decode().replace("<wbr>", "")
    main_table = html.split('<details class="internal">')[0]
    assert "shop.send_receipt" in main_table
    assert "carry_out_run" not in main_table and "shop.gone" not in html
    internal = html.split('<details class="internal">')[1]
    assert "deadletters.tasks.carry_out_run" in internal.split("</details>")[0]
    assert '<strong class="total">0</strong>' in html  # the runner's 9 are not charted


def test_django_q2_rows_say_not_counted_rather_than_zero(viewer_client):
    DeadLetterFactory(
        source="django_q2", job=None, original_job_id=None, task_path="demo.q2tasks.sync_ledger"
    )
    DeadLetterFactory(task_path="shop.send_receipt")  # ours: 0 / 0 is a real count
    html = viewer_client.get(reverse("deadletters:health")).content.decode().replace("<wbr>", "")
    row = re.search(
        r'<tr>\s*<td>[^<]*</td><td><code class="ident">demo.q2tasks.sync_ledger.*?</tr>', html, re.S
    )
    assert "not counted" in row.group(0) and "0 / 0" not in row.group(0)
    ours = re.search(
        r'<tr>\s*<td>[^<]*</td><td><code class="ident">shop.send_receipt.*?</tr>', html, re.S
    )
    assert "0 / 0" in ours.group(0)


def test_a_refusal_answered_with_the_console_page_still_rolls_back(operator, monkeypatch):
    """Under ATOMIC_REQUESTS the 403 page is a normal return of the view: what the request
    wrote before the refusal must be rolled back all the same."""
    from django.db import connection
    from django.test import Client

    from deadletters.models import Selection

    letter = DeadLetterFactory(replays=5)
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[letter.pk], filter={}
    )
    own_selection = views.selections._own_selection

    def own_selection_and_write(request, pk):  # a write before the refusal
        Selection.objects.filter(pk=pk).update(filter={"written": True})
        return own_selection(request, pk)

    monkeypatch.setattr(views.selections, "_own_selection", own_selection_and_write)
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    client = Client()
    client.force_login(operator)
    url = reverse("deadletters:confirm", args=[selection.pk])
    # An operator may not bypass the poison limit: refused with the console's 403 page.
    response = client.post(url, {"reason": "x", "allow_poisoned": "on"})
    assert response.status_code == 403 and "deadletters.replay_poisoned" in response.text
    assert Selection.objects.get(pk=selection.pk).filter == {}
