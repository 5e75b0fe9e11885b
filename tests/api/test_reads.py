"""Every read of the console through the API: the data the database holds, payloads masked as
the pages mask them, and a bad filter a 400 with the form's message (never ignored)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from deadletters import redaction, services
from deadletters.models import Selection
from jobqueue import store
from jobqueue.models import DeadLetter, Job, Schedule, Workflow
from tests.deadletters.conftest import logged_in, user_with_role
from tests.factories import DeadLetterFactory, JobFactory, ReplayItemFactory, ReplayRunFactory

pytestmark = pytest.mark.django_db

SECRET_KWARGS = {"password": "hunter2", "order": 42, "nested": {"api_key": "k-1", "ok": "shown"}}


def test_letters_list_is_the_databases_newest_first_and_pages_by_keyset(viewer_api, settings):
    settings.REDRIVE = {**settings.REDRIVE, "PAGE_SIZE": 2}
    now = timezone.now()
    letters = [
        DeadLetterFactory(dead_lettered_at=now - timedelta(minutes=n), queue_name=f"q{n}")
        for n in range(3)
    ]
    first = viewer_api.get("letters").json()
    assert [row["id"] for row in first["letters"]] == [letters[0].pk, letters[1].pk]
    row = first["letters"][0]
    assert (row["task_path"], row["queue"], row["state"], row["attempts"]) == (
        letters[0].task_path,
        "q0",
        "pending",
        5,
    )
    second = viewer_api.get("letters", after=first["next"]).json()
    assert [row["id"] for row in second["letters"]] == [letters[2].pk]
    assert second["next"] is None
    back = viewer_api.get("letters", before=second["prev"]).json()
    assert [row["id"] for row in back["letters"]] == [letters[0].pk, letters[1].pk]


def test_filters_and_search_select_what_the_console_selects(viewer_api):
    DeadLetterFactory(queue_name="emails", last_error="SMTP refused")
    match = DeadLetterFactory(queue_name="billing", last_error="card declined by bank")
    DeadLetterFactory(queue_name="billing", last_error="timeout")
    found = viewer_api.get("letters", queue="billing", q="declined").json()
    assert [row["id"] for row in found["letters"]] == [match.pk]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "yesterday"}, "Invalid filter: since: Not a time: 'yesterday'. Write a day"),
        (
            {"fingerprint": "xyz"},
            "Invalid filter: fingerprint: an error fingerprint is 16 hex characters",
        ),
        ({"after": "not-a-cursor"}, "Invalid filter: after: Not a page cursor of this list."),
        ({"state": "gone"}, "Invalid filter: state: Select a valid choice. gone is not one"),
        ({"backend": "nowhere"}, "Invalid filter: backend: Select a valid choice. nowhere is"),
    ],
)
def test_a_bad_filter_is_400_with_the_forms_message(viewer_api, params, message):
    DeadLetterFactory()
    response = viewer_api.get("letters", **params)
    assert response.status_code == 400
    assert response.json()["detail"].startswith(message)


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("jobs", {"after": "x"}),
        ("jobs", {"state": "nope"}),
        ("runs", {"since": "2026-13-01"}),
        ("runs/1/items", {"after": "-1"}),
        ("workflows", {"state": "nope"}),
        ("audit", {"after": "abc"}),
        ("letters/causes", {}),
        ("letters/1", {"backend": "nowhere"}),
    ],
)
def test_every_list_refuses_a_bad_parameter(viewer_api, path, params):
    ReplayRunFactory(pk=1) if path.startswith("runs/") else None
    response = viewer_api.get(path, **params)
    assert response.status_code == 400, response.content
    assert response.json()["detail"].startswith("Invalid filter: ")


def test_a_letter_is_masked_exactly_as_its_page_masks_it(viewer_api):
    viewer = viewer_api.user
    letter = DeadLetterFactory(args=["a", {"token": "t-9"}], kwargs=SECRET_KWARGS)
    body = viewer_api.get(f"letters/{letter.pk}").json()
    assert body["payload"] == {
        "args": ["a", {"token": redaction.REDACTED}],
        "kwargs": {
            "password": redaction.REDACTED,
            "order": 42,
            "nested": {"api_key": redaction.REDACTED, "ok": "shown"},
        },
    }
    assert "hunter2" not in str(body) and "k-1" not in str(body) and "t-9" not in str(body)
    page = logged_in(viewer).get(f"/deadletters/{letter.pk}/").content.decode()
    # The page's payload block shows the same masked JSON.
    shown = redaction.pretty(body["payload"])
    from django.utils.html import escape

    assert escape(shown) in page
    assert (body["id"], body["fingerprint"], body["original_job_id"]) == (
        letter.pk,
        letter.fingerprint,
        letter.original_job_id,
    )
    assert [e["attempt"] for e in body["errors"]] == [1, 2, 3, 4, 5]


def test_an_unknown_or_malformed_id_is_404(viewer_api):
    for path in ("letters/999999", "letters/abc", "letters/99999999999999999999", "jobs/0"):
        response = viewer_api.get(path)
        assert response.status_code == 404, path
        assert response.json()["detail"].startswith("No ")


def test_letters_by_type_and_by_cause(viewer_api):
    DeadLetterFactory.create_batch(2, task_path="app.a", last_error="boom")
    DeadLetterFactory(task_path="app.a", last_error="other")
    DeadLetterFactory(task_path="app.b")
    types = viewer_api.get("letters/types").json()["types"]
    assert [(t["task_path"], t["count"]) for t in types] == [("app.a", 3), ("app.b", 1)]
    causes = viewer_api.get("letters/causes", job_type="app.a").json()
    assert [(c["pending"], c["sample"]) for c in causes["causes"]] == [(2, "boom"), (1, "other")]
    fingerprints = set(
        DeadLetter.objects.filter(task_path="app.a").values_list("fingerprint", flat=True)
    )
    assert {c["fingerprint"] for c in causes["causes"]} == fingerprints


def test_runs_and_a_runs_items(viewer_api):
    run = ReplayRunFactory(reason="receipt API fixed")
    items = [ReplayItemFactory(run=run, batch=1) for _ in range(2)]
    run.batches = 1
    run.save()
    listed = viewer_api.get("runs").json()["runs"]
    assert [(r["id"], r["reason"]) for r in listed] == [(run.pk, "receipt API fixed")]
    assert viewer_api.get(f"runs/{run.pk}").json()["state"] == run.state
    got = viewer_api.get(f"runs/{run.pk}/items").json()
    assert [i["id"] for i in got["items"]] == [i.pk for i in items]
    assert [i["dead_letter_id"] for i in got["items"]] == [i.dead_letter_id for i in items]


def test_jobs_and_a_job_masked(viewer_api):
    older = JobFactory(queue_name="a")
    job = JobFactory(queue_name="b", kwargs=SECRET_KWARGS)
    listed = viewer_api.get("jobs").json()
    assert [row["id"] for row in listed["jobs"]] == [job.pk, older.pk]
    assert viewer_api.get("jobs", queue="a").json()["jobs"][0]["id"] == older.pk
    body = viewer_api.get(f"jobs/{job.pk}").json()
    assert body["payload"]["kwargs"]["password"] == redaction.REDACTED
    assert body["payload"]["kwargs"]["order"] == 42
    assert body["state"] == "ready"


def test_queues_and_health(viewer_api):
    JobFactory.create_batch(3, queue_name="mail", task_path="app.send")
    store.queues.pause("mail", actor="operator", reason="maintenance", channel="code")
    queues = viewer_api.get("queues").json()
    row = next(r for r in queues["queues"] if r["queue"] == "mail")
    assert (row["task"], row["ready"], row["paused"]) == ("app.send", 3, True)
    assert [(p["queue"], p["paused_by"], p["reason"]) for p in queues["paused"]] == [
        ("mail", "operator", "maintenance")
    ]
    health = viewer_api.get("health").json()
    assert health["totals"]["ready"] == 3


def test_schedules_with_arguments_masked(viewer_api):
    now = timezone.now()
    Schedule.objects.create(
        name="nightly",
        task_path="app.report",
        cron="0 3 * * *",
        kwargs={"password": "p"},
        next_run_at=now,
        created_at=now,
        updated_at=now,
    )
    listed = viewer_api.get("schedules").json()["schedules"]
    assert [(s["name"], s["kwargs"]) for s in listed] == [
        ("nightly", {"password": redaction.REDACTED})
    ]


def test_workflows_and_a_workflow(viewer_api):
    job = JobFactory()
    now = timezone.now()
    Workflow.objects.create(
        id=job.pk, task_path="app.flow", job=job, state="running", started_at=now, updated_at=now
    )
    Workflow.objects.get(pk=job.pk).steps.create(
        name="fetch_token", kind="step", state="done", result={"t": 1}, started_at=now
    )
    listed = viewer_api.get("workflows").json()["workflows"]
    assert [w["id"] for w in listed] == [job.pk]
    body = viewer_api.get(f"workflows/{job.pk}").json()
    # A step named like a secret shows nothing of what it returned, as on its page.
    assert [(s["name"], s["result"]) for s in body["steps"]] == [
        ("fetch_token", redaction.REDACTED)
    ]


def test_audit_entries_newest_first_by_keyset(viewer_api, settings):
    for n in range(3):
        store.audit.record(
            "queue.pause", actor=f"op{n}", channel="code", target_kind="queue", targets=["q"]
        )
    # The token's own creation is an entry too (the fixture made it).
    page = viewer_api.get("audit").json()
    actors = [e["actor"] for e in page["entries"]]
    assert actors[:3] == ["op2", "op1", "op0"]
    only = viewer_api.get("audit", operator="op1").json()["entries"]
    assert [e["actor"] for e in only] == ["op1"]
    assert only[0]["token"] == ""  # recorded by code, not through the API


def test_a_selection_of_another_user_is_not_found(viewer_api):
    operator = user_with_role("operator")
    selection = services.freeze_selection(operator=operator, action="replay", ids=[1])
    assert Selection.objects.filter(pk=selection.pk).exists()
    response = viewer_api.get(f"selections/{selection.pk}")
    assert response.status_code == 404
    assert Job.objects.count() == 0


def test_audit_entries_filter_by_the_audit_pages_fields(viewer_api):
    store.audit.record("queue.pause", actor="a", channel="cli", target_kind="queue", targets=["q"])
    store.audit.record("job.cancel", actor="b", channel="code", target_kind="job", targets=[7])
    by_channel = viewer_api.get("audit", channel="cli").json()["entries"]
    assert [(e["actor"], e["action"]) for e in by_channel] == [("a", "queue.pause")]
    by_target = viewer_api.get("audit", target_kind="job", target="7").json()["entries"]
    assert [e["actor"] for e in by_target] == ["b"]
    assert viewer_api.get("audit", channel="pigeon").status_code == 400
