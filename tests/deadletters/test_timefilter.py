"""The one parse of a time bound (deadletters.timefilter), and every time filter reading it: the
letters list and its API, the audit page and its API, the jobs browser and its API, the timing
windows, and the commands' --since/--until (issue 32)."""

import json
import re
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from deadletters import timefilter
from deadletters.forms import AuditFilterForm, FilterForm, JobFilterForm
from jobqueue import store
from jobqueue.models import AuditEntry, Deploy
from tests.cli import run
from tests.factories import DeadLetterFactory, JobFactory
from tests.properties import examples

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")
LIST = reverse("deadletters:list")
JOBS = reverse("deadletters:jobs")
AUDIT = reverse("deadletters:audit")
HEALTH = reverse("deadletters:health")


def parse(text, **kw):
    return timefilter.parse(text, now=NOW, zone=kw.pop("zone", UTC), **kw)


# --- the grammar --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "end", "at"),
    [
        ("2026-12-04", False, datetime(2026, 12, 4, tzinfo=UTC)),
        ("2026-12-04", True, datetime(2026, 12, 5, tzinfo=UTC)),  # the day included
        ("2026-12-04 14:30", False, datetime(2026, 12, 4, 14, 30, tzinfo=UTC)),
        ("2026-12-04T14:30:15", False, datetime(2026, 12, 4, 14, 30, 15, tzinfo=UTC)),
        ("2026-12-04 14:30", True, datetime(2026, 12, 4, 14, 30, tzinfo=UTC)),  # a moment
        ("2026-12-04T14:30:15.5Z", False, datetime(2026, 12, 4, 14, 30, 15, 500000, tzinfo=UTC)),
        ("2026-12-04T14:30+01:00", False, datetime(2026, 12, 4, 13, 30, tzinfo=UTC)),
        ("2026-12-04T14:30:00-0230", False, datetime(2026, 12, 4, 17, 0, tzinfo=UTC)),
        ("15m", False, NOW - timedelta(minutes=15)),
        ("1h", False, NOW - timedelta(hours=1)),
        ("6H", False, NOW - timedelta(hours=6)),
        ("24h", False, NOW - timedelta(hours=24)),
        ("7d", False, NOW - timedelta(days=7)),
        ("2w", False, NOW - timedelta(days=14)),
        ("last 15 min", False, NOW - timedelta(minutes=15)),
        ("90 minutes ago", False, NOW - timedelta(minutes=90)),
        ("  1   hour ", False, NOW - timedelta(hours=1)),
        ("now", True, NOW),
    ],
)
def test_each_form_names_its_moment(text, end, at):
    assert parse(text, end=end).at == at


def test_a_span_is_written_compactly_for_links_and_labelled_for_people():
    bound = parse("last 15 min")
    assert (bound.text, bound.label, bound.span) == ("15m", "the last 15 minutes", True)
    assert parse("1h").label == "the last hour"


def test_days_and_times_are_read_in_the_consoles_zone():
    # Midnight in Paris is 23:00 UTC the day before (winter).
    assert parse("2026-12-04", zone=PARIS).at == datetime(2026, 12, 3, 23, 0, tzinfo=UTC)
    assert parse("2026-12-04 14:30", zone=PARIS).at == datetime(2026, 12, 4, 13, 30, tzinfo=UTC)
    # An offset written says the zone itself.
    assert parse("2026-12-04T14:30Z", zone=PARIS).at == datetime(2026, 12, 4, 14, 30, tzinfo=UTC)


def test_the_console_zone_setting_is_the_default(settings):
    settings.REDRIVE = {**settings.REDRIVE, "TIME_ZONE": "Europe/Paris"}
    at = timefilter.parse("2026-07-01 12:00", now=NOW).at
    assert at == datetime(2026, 7, 1, 10, 0, tzinfo=UTC)  # summer: UTC+2


def test_deploy_is_the_newest_marker_and_deploy_version_that_versions():
    store.deploys.mark("v1", actor="ci", at=NOW - timedelta(hours=5))
    store.deploys.mark("v2", actor="ci", at=NOW - timedelta(hours=2))
    bound = parse("deploy")
    assert bound.at == NOW - timedelta(hours=2) and bound.deploy.version == "v2"
    assert bound.label.startswith("deploy v2 (") and bound.text == "deploy"
    for spelled in ("since deploy", "last deploy", "Since the last deploy", "DEPLOY"):
        assert parse(spelled).at == bound.at, spelled
    assert parse("deploy:v1").at == NOW - timedelta(hours=5)
    assert parse("deploy:v1").text == "deploy:v1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Empty"),
        ("yesterday", "Not a time: 'yesterday'. Write a day (2026-12-04)"),
        ("2026-02-30", "Enter a valid date: '2026-02-30' is no day of the calendar."),
        ("1899-12-31", "Enter a date between 1900-01-01 and 9998-12-31."),
        ("9999-12-31", "Enter a date between"),
        ("2026-12-04 24:00", "no such time of day"),
        ("2026-12-04T10:00+24:00", "an offset is from -23:59 to +23:59"),
        ("0m", "a span back from now is from 1 minute to 100 years"),
        ("9999999d", "a span back from now is from 1 minute to 100 years"),
        ("11/30/2026", "Not a time"),
        ("x" * 65, "longer than 64 characters"),
        ("\uff11h", "Not a time"),  # a fullwidth 1: not typed on purpose
        ("deploy", "No deploy is recorded yet: `manage.py deploy mark --version X`"),
        ("deploy:v9", "No deploy of 'v9' is recorded."),
    ],
)
def test_what_names_no_time_is_refused_saying_what_is_accepted(text, message):
    with pytest.raises(timefilter.BadBound) as refused:
        parse(text)
    assert message in str(refused.value)


@hsettings(max_examples=examples(300), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.one_of(
        st.text(max_size=80),
        st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([ T][0-9]{2}:[0-9]{2}(:[0-9]{2})?)?"),
        st.from_regex(r"(last )?[0-9]{1,8} ?(m|min|h|hours?|d|w)( ago)?"),
        st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}([+-][0-9]{2}:[0-9]{2}|Z)"),
    ),
    end=st.booleans(),
)
@example(text="0001-01-01T00:00+23:59", end=False)
@example(text="9998-12-31T23:59-23:59", end=True)
def test_any_text_is_a_bound_or_a_clean_refusal(text, end):
    """Whatever is typed: a Bound whose moment the databases can store and compare, or
    BadBound with a message; never another exception."""
    try:
        bound = timefilter.parse(text, end=end, now=NOW, zone=PARIS)
    except timefilter.BadBound as refused:
        assert str(refused)
        return
    assert bound.at.tzinfo is not None
    assert date(1899, 12, 30) <= bound.at.astimezone(UTC).date() <= date(9999, 1, 2)
    assert bound.text and len(bound.text) <= timefilter.MAX_CHARS
    # The text echoed into links reads back as the same moment.
    assert timefilter.parse(bound.text, end=end, now=NOW, zone=PARIS).at == bound.at


# --- every door -------------------------------------------------------------------------------


@pytest.fixture
def timeline():
    """Letters, jobs and audit entries an hour before a deploy, and just after it."""
    now = datetime.now(UTC)
    store.deploys.mark("v7", actor="ci", at=now - timedelta(minutes=30))
    before = now - timedelta(minutes=90)
    after = now - timedelta(minutes=10)
    old = DeadLetterFactory(dead_lettered_at=before, task_path="shop.old")
    new = DeadLetterFactory(dead_lettered_at=after, task_path="shop.new")
    old_job = JobFactory(enqueued_at=before, task_path="shop.old")
    new_job = JobFactory(enqueued_at=after, task_path="shop.new")
    store.audit.record(
        "queue.pause", actor="ana", channel="cli", target_kind="queue", targets=["q"], at=before
    )
    store.audit.record(
        "queue.resume", actor="bo", channel="cli", target_kind="queue", targets=["q"], at=after
    )
    return {"old": old, "new": new, "old_job": old_job, "new_job": new_job, "now": now}


def letter_ids(html):
    return [int(pk) for pk in re.findall(r'href="/deadletters/(\d+)/"', html)]


@pytest.mark.parametrize("since", ["deploy", "45m", "1h", "since deploy"])
def test_the_letters_list_takes_the_new_forms(viewer_client, timeline, since):
    html = viewer_client.get(LIST, {"since": since}).content.decode()
    assert letter_ids(html) == [timeline["new"].pk], since
    assert "Ignored invalid filter" not in html


def test_the_letters_list_takes_a_time_of_day_range(viewer_client, timeline, settings):
    settings.REDRIVE = {**settings.REDRIVE, "TIME_ZONE": "Europe/Paris"}
    at = timeline["old"].dead_lettered_at.astimezone(PARIS)
    query = {
        "since": f"{at - timedelta(minutes=1):%Y-%m-%d %H:%M}",
        "until": f"{at + timedelta(minutes=1):%Y-%m-%d %H:%M}",
    }
    html = viewer_client.get(LIST, query).content.decode()
    assert letter_ids(html) == [timeline["old"].pk]
    # The links keep the text typed: a relative bound stays relative.
    html = viewer_client.get(LIST, {"since": "1h", "order": "oldest"}).content.decode()
    assert "<code>since=1h</code>" in html


def test_a_bad_bound_is_named_on_the_page_and_the_rest_applies(viewer_client, timeline):
    response = viewer_client.get(LIST, {"since": "soon", "job_type": "shop.new"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Ignored invalid filter" in html and "<code>since</code>" in html
    assert letter_ids(html) == [timeline["new"].pk]


def test_an_end_before_the_start_is_refused(viewer_client, timeline):
    html = viewer_client.get(LIST, {"since": "deploy", "until": "1h"}).content.decode()
    assert "<code>until</code>" in html and "is not after the start" in html


def test_the_jobs_browser_filters_by_enqueue_time(viewer_client, timeline):
    html = viewer_client.get(JOBS, {"since": "deploy"}).content.decode()
    found = {int(pk) for pk in re.findall(r'href="/deadletters/jobs/(\d+)/', html)}
    assert timeline["new_job"].pk in found and timeline["old_job"].pk not in found
    assert 'name="since"' in html and 'value="deploy"' in html
    html = viewer_client.get(JOBS, {"until": "deploy"}).content.decode()
    found = {int(pk) for pk in re.findall(r'href="/deadletters/jobs/(\d+)/', html)}
    assert timeline["old_job"].pk in found and timeline["new_job"].pk not in found


def test_the_audit_page_takes_the_new_forms(viewer_client, timeline):
    html = viewer_client.get(AUDIT, {"since": "deploy"}).content.decode()
    shown = {int(seq) for seq in re.findall(r'<tr id="entry-(\d+)"', html)}
    seqs = dict(AuditEntry.objects.values_list("action", "seq"))
    # The marker's own entry is at the deploy's moment: inside "since deploy".
    assert shown == {seqs["deploy.mark"], seqs["queue.resume"]}
    html = viewer_client.get(AUDIT, {"until": "deploy"}).content.decode()
    assert {int(s) for s in re.findall(r'<tr id="entry-(\d+)"', html)} == {seqs["queue.pause"]}


@pytest.mark.parametrize(
    "form_class", [FilterForm, AuditFilterForm, JobFilterForm], ids=lambda c: c.__name__
)
def test_every_filter_form_reads_the_one_parser(form_class, timeline):
    form = form_class({"since": "15m", "until": "now"})
    assert form.is_valid(), form.errors
    assert form.cleaned_data["since"].span and form.cleaned_data["until"].text == "now"
    bad = form_class({"since": "the day before"})
    assert not bad.is_valid() and "Not a time" in bad.errors["since"][0]


def test_the_api_takes_the_new_forms_and_refuses_bad_ones_with_400(timeline):
    from tests.api.conftest import api_as
    from tests.deadletters.conftest import user_with_role

    viewer_api = api_as(user_with_role("viewer"))
    found = viewer_api.get("letters", since="deploy").json()
    assert [row["id"] for row in found["letters"]] == [timeline["new"].pk]
    found = viewer_api.get("letters", since="2h", until="45m").json()
    assert [row["id"] for row in found["letters"]] == [timeline["old"].pk]
    refused = viewer_api.get("letters", since="tomorrow-ish")
    assert refused.status_code == 400
    assert refused.json()["detail"].startswith("Invalid filter: since: Not a time:")
    jobs = viewer_api.get("jobs", since="deploy").json()
    assert timeline["new_job"].pk in [j["id"] for j in jobs["jobs"]]
    assert timeline["old_job"].pk not in [j["id"] for j in jobs["jobs"]]
    assert viewer_api.get("jobs", until="not a time").status_code == 400


def test_the_cli_takes_the_new_forms(timeline):
    done = run("deadletters", "list", "--since", "deploy", "--json")
    assert done.code == 0, done
    assert [row["id"] for row in json.loads(done.out)] == [timeline["new"].pk]
    done = run("deadletters", "list", "--until", "45m", "--json")
    assert [row["id"] for row in json.loads(done.out)] == [timeline["old"].pk]
    refused = run("deadletters", "list", "--since", "soonish")
    assert refused.refused_cleanly and "Not a time" in refused.err


def test_the_cli_export_reads_the_bound_as_the_list_does(timeline, tmp_path):
    from tests.deadletters.conftest import user_with_role

    user_with_role("operator", username="ana")
    out = tmp_path / "since.jsonl"
    done = run(
        "deadletters", "export", "--format", "jsonl", "--since", "deploy",
        "--operator", "ana", "--output", str(out),
    )  # fmt: skip
    assert done.code == 0, done
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in rows] == [timeline["new"].pk]
    entry = AuditEntry.objects.filter(action="letters.export").get()
    assert entry.params["filter"]["since"] == Deploy.objects.get().at.isoformat()


def test_the_timing_window_takes_since_the_last_deploy(viewer_client, timeline):
    html = viewer_client.get(HEALTH, {"window": "deploy"}).content.decode()
    section = html.split('<section id="timing"')[1].split("</section>")[0]
    assert '<strong aria-current="true">since deploy</strong>' in section
    assert "Run time, since deploy v7 (" in section
    html = viewer_client.get(HEALTH, {"window": "15m"}).content.decode()
    assert "Run time, in the last 15m:" in html
    refused = viewer_client.get(HEALTH, {"window": "2030-01-01"})
    assert refused.status_code == 400 and "It starts after now." in refused.content.decode()


# --- the marks on the charts --------------------------------------------------------------


def marks(html):
    return re.findall(
        r'<g class="deploy-mark" data-version="([^"]*)"><title>([^<]*)</title>'
        r'<line x1="([0-9.]+)"',
        html,
    )


def test_each_minute_chart_of_the_health_page_marks_the_deploys_of_its_hour(viewer_client):
    now = datetime.now(UTC)
    store.deploys.mark("v7", actor="ci", note="receipts", at=now - timedelta(minutes=30))
    store.deploys.mark("v6", actor="ci", at=now - timedelta(hours=2))  # before the hour
    html = viewer_client.get(HEALTH).content.decode()
    charts = html.split('<div class="charts">')[1].split("</div>")[0]
    found = marks(charts)
    assert [version for version, _, _ in found] == ["v7"] * 3  # completed, failed, dead
    _, title, x = found[0]
    assert title.startswith("Deploy v7 at ") and title.endswith(" by ci: receipts")
    # 30 minutes before now on a 60-minute axis of 5 units a minute, from x=30.
    start = (now - timedelta(minutes=59)).replace(second=0, microsecond=0)
    expected = 30 + (now - timedelta(minutes=30) - start).total_seconds() / 60 * 5
    assert float(x) == pytest.approx(expected, abs=0.1)
    assert ">v7</text>" in charts
    assert "; deploys: Deploy v7 at" in charts  # said to a screen reader too


def test_a_long_version_is_cut_on_the_chart_and_whole_on_hover(viewer_client):
    store.deploys.mark("release-2026.12.04-abcdef", actor="ci")
    charts = viewer_client.get(HEALTH).content.decode().split('<div class="charts">')[1]
    assert ">release-202…</text>" in charts
    assert "Deploy release-2026.12.04-abcdef at" in charts


def test_a_version_is_escaped_on_every_chart(viewer_client):
    store.deploys.mark("<b>v1</b>", actor="ci")
    DeadLetterFactory(task_path="shop.x")
    for url in (HEALTH, reverse("deadletters:overview"), LIST + "?job_type=shop.x"):
        html = viewer_client.get(url).content.decode()
        assert "<b>v1</b>" not in html and "&lt;b&gt;v1&lt;/b&gt;" in html, url


def test_the_sparklines_mark_the_deploys_of_their_day(viewer_client):
    now = datetime.now(UTC)
    store.deploys.mark("v7", actor="ci", at=now - timedelta(hours=3))
    store.deploys.mark("v5", actor="ci", at=now - timedelta(hours=30))  # before the day
    DeadLetterFactory(task_path="shop.x")
    overview = viewer_client.get(reverse("deadletters:overview")).content.decode()
    assert [v for v, _, _ in marks(overview)] == ["v7"]
    causes = viewer_client.get(LIST, {"job_type": "shop.x"}).content.decode()
    spark = causes.split('<svg class="spark"')[1].split("</svg>")[0]
    assert [v for v, _, _ in marks(spark)] == ["v7"]
    start = (now - timedelta(hours=23)).replace(minute=0, second=0, microsecond=0)
    expected = (now - timedelta(hours=3) - start).total_seconds() / 3600 * 5
    assert float(marks(spark)[0][2]) == pytest.approx(expected, abs=0.1)


def test_the_timing_histograms_name_the_deploys_of_their_window(viewer_client):
    now = datetime.now(UTC)
    deploy = store.deploys.mark("v7", actor="ci", at=now - timedelta(minutes=20))
    html = viewer_client.get(HEALTH).content.decode()
    section = html.split('<section id="timing"')[1].split("</section>")[0]
    assert "Deploys in this window" in section and "<code>v7</code>" in section
    assert f"?window={deploy.at.isoformat().replace(':', '%3A').replace('+', '%2B')}" in section
    assert (
        "Deploys in this window"
        not in viewer_client.get(HEALTH, {"window": "15m"}).content.decode()
    )


def test_the_health_page_lists_the_deploys_with_links_since_each(viewer_client):
    store.deploys.mark("v6", actor="ci", note="first")
    store.deploys.mark_if_new("v7", actor="web-1:42")
    html = viewer_client.get(HEALTH).content.decode()
    section = html.split('<section id="deploys"')[1].split("</section>")[0]
    assert re.findall(r'<tr data-version="([^"]+)">', section) == ["v7", "v6"]
    assert 'web-1:42 <span class="muted">(A worker started with a new version)</span>' in section
    assert f'href="{LIST}?since=' in section
    # A poll of the health figures does not read them.
    poll = viewer_client.get(HEALTH, headers={"HX-Request": "true"}).content.decode()
    assert 'id="deploys"' not in poll
