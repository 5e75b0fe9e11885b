"""Queues across databases: several TASKS backends, each on its own database. The console and
the health page show every backend's dead letters and queues, filterable by backend; a replay
or discard goes to the letters' own database while its run, ledger and audit stay on default.

The second database, `queues_b`, is added by tests/conftest.py; ids repeat across the two
databases, which several tests below rely on to show that the right one is read.
"""

from unittest import mock

import pytest
from django.urls import reverse
from django.utils.http import urlencode

from deadletters import databases, services
from deadletters.models import ReplayItem, ReplayRun, Selection
from jobqueue.health import snapshot
from jobqueue.models import DeadLetter, Job, JobState, PausedQueue
from jobqueue.worker import Worker
from tests.conftest import SECOND_DATABASE
from tests.factories import TWO_BACKENDS, DeadLetterFactory, JobB, JobFactory, LetterB

from .conftest import logged_in, user_with_role

B = SECOND_DATABASE
BOTH = pytest.mark.django_db(databases=["default", B])
pytestmark = BOTH

LIST = reverse("deadletters:list")
PREVIEW = reverse("deadletters:preview")
NOOP = "tests.tasks.noop"


@pytest.fixture
def two_backends(settings):
    settings.TASKS = TWO_BACKENDS
    from django.tasks import task_backends

    # django.tasks rebuilds its backends when TASKS changes (its setting_changed receiver).
    assert task_backends["b"].database == B


@pytest.fixture
def chief(db):
    return user_with_role("admin", "chief")


@pytest.fixture
def client(chief):
    return logged_in(chief)


def detail_url(pk, backend=None):
    url = reverse("deadletters:detail", args=[pk])
    return f"{url}?backend={backend}" if backend else url


# --- which databases -------------------------------------------------------------------------


def test_the_queue_databases_are_the_redrive_backends_each_database_once_default_first(settings):
    settings.TASKS = {
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
        "b": TWO_BACKENDS["b"],
        "reports": {"BACKEND": "jobqueue.backend.DatabaseBackend", "OPTIONS": {"DATABASE": B}},
        "default": TWO_BACKENDS["default"],
    }
    found = databases.backends()
    assert [(b.name, b.database, b.aliases) for b in found] == [
        ("default", "default", ("default",)),
        ("b", B, ("b", "reports")),
    ]
    assert databases.named("reports") == found[1] and databases.named("") == found[0]
    assert databases.named("immediate") is None and databases.named("../x") is None
    assert databases.multiple()
    # The same list is jobqueue's own (it imports no other app): /metrics and queuehealth.
    from jobqueue.databases import queue_database, queue_databases

    assert [(b.name, b.database, b.aliases) for b in found] == [
        (q.name, q.database, q.aliases) for q in queue_databases()
    ]
    assert queue_database("reports").database == B
    assert queue_database("immediate") is None and queue_database("x" * 101) is None


def test_one_backend_looks_as_before(client):
    DeadLetterFactory()
    page = client.get(LIST)
    assert page.status_code == 200
    assert b'name="backend"' not in page.content and b"other-backends" not in page.content
    assert b"?backend=" not in page.content
    health = client.get(reverse("deadletters:health"))
    assert b"<th>Backend</th>" not in health.content


# --- list and detail by backend -------------------------------------------------------------


def test_the_list_of_backend_b_reads_its_database_only(two_backends, client):
    mine = DeadLetterFactory.create_batch(2, task_path="shop.a")
    theirs = LetterB.create_batch(3, task_path="shop.b")
    page = client.get(LIST, {"backend": "b"})
    assert page.status_code == 200
    rows = page.context["page"].rows
    assert {r.task_path for r in rows} == {"shop.b"}
    assert sorted(r.pk for r in rows) == sorted(letter.pk for letter in theirs)
    assert all(r._state.db == B for r in rows)
    # Each row's link names its backend; the Backend filter is shown; default's count beside.
    assert f'href="/deadletters/{theirs[0].pk}/?backend=b"'.encode() in page.content
    assert b'<select name="backend"' in page.content
    assert b'data-backend="default"' in page.content
    assert [(o.name, n) for o, n in page.context["other_backends"]] == [("default", len(mine))]


def test_the_default_list_shows_defaults_letters_and_says_how_many_wait_in_the_others(
    two_backends, client
):
    DeadLetterFactory.create_batch(2, task_path="shop.a")
    LetterB.create_batch(3, task_path="shop.b")
    LetterB(task_path="shop.b", discarded=True)  # not pending: not counted
    page = client.get(LIST)
    assert {r.task_path for r in page.context["page"].rows} == {"shop.a"}
    assert [(o.name, n) for o, n in page.context["other_backends"]] == [("b", 3)]
    assert b'href="/deadletters/list/?backend=b"' in page.content
    assert b'<span class="pending">3</span>' in page.content


def test_select_all_and_the_count_and_the_export_follow_the_backend(two_backends, client):
    DeadLetterFactory.create_batch(2, task_path="shop.a")
    LetterB.create_batch(3, task_path="shop.b")
    count = client.get(reverse("deadletters:count"), {"backend": "b"})
    assert count.context["count"] == 3
    export = client.post(reverse("deadletters:export"), {"backend": "b", "format": "jsonl"})
    lines = b"".join(export.streaming_content).decode().splitlines()
    assert len(lines) == 3 and all('"shop.b"' in line for line in lines)


def test_a_letters_page_is_read_from_its_backends_database(two_backends, client):
    here = DeadLetterFactory(task_path="shop.here")
    there = LetterB(task_path="shop.there", id=here.pk)  # the same id in the other database
    # An explicit id no default letter has: an automatic one could collide with `there` on
    # PostgreSQL, whose sequence knows nothing of the id given above.
    only_there = LetterB(task_path="shop.only_there", id=here.pk + 1_000_000)
    assert not DeadLetter.objects.filter(pk=only_there.pk).exists()

    page = client.get(detail_url(there.pk, "b"))
    assert page.status_code == 200
    assert page.context["letter"].task_path == "shop.there"
    assert b"shop.there" in page.content and b"shop.here" not in page.content
    # The replay form and the reveal say the backend too.
    assert b'<input type="hidden" name="backend" value="b">' in page.content
    assert f"/deadletters/{there.pk}/reveal/?backend=b".encode() in page.content
    assert client.get(detail_url(here.pk)).context["letter"].task_path == "shop.here"
    assert client.get(detail_url(here.pk, "default")).context["letter"].task_path == "shop.here"
    # A letter of b asked for on default (the wrong backend): the console's clean 404.
    wrong = client.get(detail_url(only_there.pk, "default"))
    assert wrong.status_code == 404 and b"dead letter" in wrong.content
    revealed = client.post(reverse("deadletters:reveal", args=[there.pk]) + "?backend=b")
    assert revealed.status_code == 200 and revealed.context["letter"].task_path == "shop.there"
    # Edit before replay is for default's letters only (its record points at one there).
    assert b"Edit the payload" not in page.content
    assert (
        client.get(reverse("deadletters:edit", args=[there.pk]) + "?backend=b").status_code == 404
    )


HOSTILE = ["../x", "b/../default", "x" * 5000, "nope", "immediate", "\x00", "b\x00", " b", "é"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_backend_is_a_clean_refusal_never_a_server_error(two_backends, client, value):
    letter = LetterB()
    selections = Selection.objects.count()
    assert client.get(LIST, {"backend": value}).status_code == 404
    assert client.get(detail_url(letter.pk), {"backend": value}).status_code == 404
    assert client.get(reverse("deadletters:count"), {"backend": value}).status_code == 400
    reveal = client.post(
        reverse("deadletters:reveal", args=[letter.pk]) + "?" + urlencode({"backend": value})
    )
    assert reveal.status_code == 404
    export = client.post(reverse("deadletters:export"), {"backend": value, "format": "csv"})
    assert export.status_code == 400
    preview = client.post(PREVIEW, {"action": "replay", "ids": [letter.pk], "backend": value})
    assert preview.status_code == 302 and Selection.objects.count() == selections
    control = client.post(
        reverse("deadletters:queue-control"),
        {"backend": value, "action": "pause", "queue": "q", "reason": "r"},
    )
    assert control.status_code == 302
    assert not PausedQueue.objects.exists() and not PausedQueue.objects.using(B).exists()


# --- health and overview together -----------------------------------------------------------


def test_snapshot_reads_the_database_it_is_given(two_backends):
    JobFactory(queue_name="here")
    JobB.create_batch(2, queue_name="there")
    LetterB(queue_name="there", task_path="shop.b")
    assert {r.queue for r in snapshot().rows} == {"here"}
    b_rows = snapshot(using=B).rows
    assert {r.queue for r in b_rows} == {"there"}
    assert snapshot(using=B).totals["ready"] == 2
    assert snapshot(using=B).totals["dead_letters"] == 1


def test_the_health_page_shows_every_backends_queues_with_their_totals(two_backends, client):
    JobFactory(queue_name="here")
    JobB.create_batch(2, queue_name="there")
    LetterB(queue_name="there", task_path="shop.b")
    page = client.get(reverse("deadletters:health"))
    assert page.status_code == 200
    assert {(r.backend.name, r.queue) for r in page.context["rows"]} >= {
        ("default", "here"),
        ("b", "there"),
    }
    assert page.context["totals"]["ready"] == 3
    assert page.context["totals"]["dead_letters"] == 1
    assert b"<th>Backend</th>" in page.content
    assert b"state=pending&amp;backend=b" in page.content  # b's dead letters link to b's list


def test_the_overview_counts_each_backends_job_types(two_backends, client):
    DeadLetterFactory.create_batch(2, task_path="shop.a")
    LetterB.create_batch(3, task_path="shop.b")
    page = client.get(reverse("deadletters:overview"))
    assert [(s.backend.name, s.task_path, s.count) for s in page.context["summaries"]] == [
        ("b", "shop.b", 3),
        ("default", "shop.a", 2),
    ]
    assert b"job_type=shop.b&amp;state=pending&amp;backend=b" in page.content


def test_a_queue_of_backend_b_is_paused_in_its_database(two_backends, client):
    JobB(queue_name="there")  # known in b's database, not in default's
    refused = client.post(
        reverse("deadletters:queue-control"),
        {"action": "pause", "queue": "there", "reason": "maintenance"},
        follow=True,
    )
    assert b"no queue &#x27;there&#x27; has jobs" in refused.content
    response = client.post(
        reverse("deadletters:queue-control"),
        {"backend": "b", "action": "pause", "queue": "there", "reason": "maintenance"},
    )
    assert response.status_code == 302
    assert PausedQueue.objects.using(B).filter(queue_name="there").exists()
    assert not PausedQueue.objects.exists()


# --- replays go to the letters' own database --------------------------------------------------


def confirm(client, ids, action="replay", backend="b"):
    preview = client.post(PREVIEW, {"action": action, "ids": ids, "backend": backend})
    assert preview.status_code == 302, preview
    confirm_url = preview["Location"]
    shown = client.get(confirm_url)
    assert shown.status_code == 200
    done = client.post(confirm_url, {"reason": "receipts API fixed", "canary_size": 0})
    assert done.status_code == 302, done.content
    return ReplayRun.objects.get(pk=int(done["Location"].rstrip("/").rsplit("/", 1)[1])), shown


@pytest.mark.django_db(databases=["default", B], transaction=True)
def test_a_replay_of_bs_letters_goes_to_bs_database_and_bs_worker_runs_it(two_backends, client):
    theirs = LetterB.create_batch(2, task_path=NOOP)
    # The same ids on default, to be left alone.
    mine = [DeadLetterFactory(task_path=NOOP, id=letter.pk) for letter in theirs]
    run, shown = confirm(client, [letter.pk for letter in theirs])
    assert shown.context["preview"].will_act == 2
    assert b"Dead letters of backend <strong>b</strong>" in shown.content
    assert run.selection.database == B and run.state == "finished" and run.done == 2

    made = Job.objects.using(B).filter(replayed_from__in=[letter.pk for letter in theirs])
    assert made.count() == 2
    assert not Job.objects.filter(replayed_from__isnull=False).exists()  # none on default
    assert set(DeadLetter.objects.using(B).values_list("state", flat=True)) == {"replaying"}
    assert set(
        DeadLetter.objects.filter(pk__in=[m.pk for m in mine]).values_list("state", flat=True)
    ) == {"pending"}
    # The run, its ledger and the selection are default's, the ledger naming b's jobs.
    items = list(ReplayItem.objects.order_by("id"))
    assert [(i.outcome, i.job_id) for i in items] == [
        ("replayed", job.pk) for job in made.order_by("replayed_from")
    ]
    run_page = client.get(reverse("deadletters:run", args=[run.pk]))
    assert [i.job_outcome for i in run_page.context["items"]] == ["pending", "pending"]
    assert f"/deadletters/{theirs[0].pk}/?backend=b".encode() in run_page.content

    assert Worker(backend="b", burst=True, poll_interval=0.05).run() == 0
    assert set(made.values_list("state", flat=True)) == {JobState.DONE}
    assert set(DeadLetter.objects.using(B).values_list("state", flat=True)) == {"replayed"}
    run_page = client.get(reverse("deadletters:run", args=[run.pk]))
    assert [i.job_outcome for i in run_page.context["items"]] == ["done", "done"]
    # Each letter's history is its own database's: default's letter of the same id has none.
    assert len(client.get(detail_url(theirs[0].pk, "b")).context["d"].history) == 1
    assert client.get(detail_url(mine[0].pk)).context["d"].history == []


def test_a_discard_of_bs_letters_discards_them_there(two_backends, client):
    theirs = LetterB.create_batch(2)
    mine = DeadLetterFactory(id=theirs[0].pk)
    run, _ = confirm(client, [letter.pk for letter in theirs], action="discard")
    assert (run.state, run.done) == ("finished", 2)
    assert set(DeadLetter.objects.using(B).values_list("state", flat=True)) == {"discarded"}
    mine.refresh_from_db()
    assert mine.state == "pending"


def test_select_all_of_bs_filter_freezes_bs_letters(two_backends, client):
    LetterB.create_batch(3, task_path="shop.b")
    DeadLetterFactory.create_batch(5, task_path="shop.b")
    response = client.post(
        PREVIEW, {"action": "replay", "select_all": "1", "backend": "b", "job_type": "shop.b"}
    )
    assert response.status_code == 302
    selection = Selection.objects.get()
    assert selection.database == B and len(selection.ids) == 3
    assert selection.filter["backend"] == "b"


def test_a_crash_between_the_two_commits_never_replays_a_letter_twice(
    two_backends, chief, settings
):
    """The letters' database commits first: a crash before the run's commit leaves them
    replaying with the run where it was; the batch done again skips them."""
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 2}
    theirs = LetterB.create_batch(3, task_path=NOOP)
    selection = services.freeze_selection(
        operator=chief, action="replay", ids=[letter.pk for letter in theirs], database=B
    )
    run = services.start_run(operator=chief, selection=selection, reason="r", background=False)
    with (
        mock.patch.object(ReplayItem.objects, "bulk_create", side_effect=RuntimeError("crash")),
        pytest.raises(RuntimeError),
    ):
        services.process_batch(run.pk)
    run.refresh_from_db()
    assert (run.processed, ReplayItem.objects.count()) == (0, 0)
    assert Job.objects.using(B).filter(replayed_from__isnull=False).count() == 2

    services.carry_out(run.pk)
    run.refresh_from_db()
    assert (run.state, run.done, run.skipped) == ("finished", 1, 2)
    assert Job.objects.using(B).filter(replayed_from__isnull=False).count() == 3  # one each
    skipped = ReplayItem.objects.filter(outcome="skipped").values_list("skip_reason", flat=True)
    assert set(skipped) == {"an earlier replay is still pending"}


# --- the command line --------------------------------------------------------------------


def test_the_cli_lists_shows_and_replays_the_letters_of_the_backend_it_is_given(two_backends):
    from tests.cli import run

    user_with_role("operator", "olga")
    mine = LetterB(task_path=NOOP)
    theirs = DeadLetterFactory(task_path="tests.tasks.add")  # default's, perhaps the same id

    listed = run("deadletters", "list", "--backend", "b")
    assert listed.code == 0 and NOOP in listed.out and "tests.tasks.add" not in listed.out
    shown = run("deadletters", "show", str(mine.pk), "--backend", "b", "--json")
    assert shown.code == 0 and f'"task_path": "{NOOP}"' in shown.out

    done = run(
        "deadletters", "replay", str(mine.pk), "--backend", "b",
        "--operator", "olga", "--reason", "fixed", "--canary", "0",
    )  # fmt: skip
    assert done.code == 0, done.err
    assert Job.objects.using(B).filter(replayed_from_id=mine.pk, state=JobState.READY).exists()
    assert not Job.objects.filter(replayed_from_id=mine.pk).exists()  # nothing on default
    assert Selection.objects.get().database == B
    theirs.refresh_from_db()
    assert theirs.state == "pending"

    unknown = run("deadletters", "list", "--backend", "nope")
    assert unknown.code == 2 and "no Redrive TASKS backend 'nope'" in unknown.err
