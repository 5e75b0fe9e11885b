"""Every listing and show of both apps' commands takes --json and prints one JSON document of
what the database holds: an array of objects for a listing, an object for a show, datetimes in
ISO 8601, payloads masked as the console masks them, nothing else on stdout. The walk below
finds every command and sub-command; a new one fails it until it is listed here, as a listing
(with a check of its JSON against the database) or as something else (with the reason)."""

import argparse
import json
from datetime import timedelta

import pytest
from django.db.models import Count, Max, Min
from django.utils import timezone

from deadletters import actions, redaction
from jobqueue import store
from jobqueue.models import (
    UNFINISHED,
    AuditEntry,
    DeadLetter,
    DeadLetterState,
    Job,
    JobState,
    JobStatus,
    Schedule,
    ScheduleRun,
    WorkerRecord,
    Workflow,
    WorkflowSignal,
    WorkflowStep,
)
from tests.cli import command, row_counts, run
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

APPS = ("jobqueue", "deadletters")
SECRET = "hunter2-not-for-the-terminal"

# (command, sub-command; "" for the command itself) that do not list or show, and why.
NOT_LISTINGS = {
    ("deadletters", "replay"): "an audited action: prints its preview and its run's outcome",
    ("deadletters", "discard"): "an audited action: prints its preview and its run's outcome",
    ("deadletters", "approve"): "an audited action on one run",
    ("deadletters", "export"): "writes CSV or JSON Lines itself (--format), to a file or stdout",
    ("deadletters", "sync"): "mirrors brokers' dead letters: one line per source",
    ("jobs", "run-now"): "an audited action",
    ("jobs", "cancel"): "an audited action",
    ("queues", "pause"): "an audited action",
    ("queues", "resume"): "an audited action",
    ("schedules", "pause"): "an audited action",
    ("schedules", "resume"): "an audited action",
    ("schedules", "run"): "an audited action",
    ("schedules", "sync"): "writes the declared schedules: one line per change",
    ("workflows", "signal"): "sends an event (its --json is the outcome, not a listing)",
    ("deploy", "mark"): "records a deploy marker (its --json is the marker)",
    ("audit", "verify"): "a check: its exit status and one line are the answer",
    ("enqueue", ""): "adds a job",
    ("runworker", ""): "a long-running process",
    ("runrelay", ""): "a long-running process",
    ("runchores", ""): "a long-running process",
    ("createoperator", ""): "creates or updates a user",
    ("act", "confirm"): "carries out a frozen selection (its --json is the outcome)",
    ("apitoken", "create"): "makes a token (its --json is the token, shown once)",
    ("apitoken", "revoke"): "revokes a token",
    # One sub-command for each action of the registry (deadletters.actions).
    **{
        ("act", name): "an action of the registry (its --json is the outcome)"
        for name in actions.REGISTRY
    },
}


def parsers():
    """(command, sub-command, parser) of every command of both apps: the command itself when
    it takes no sub-command or may be run without one (`jobs`), and each sub-command."""
    from django.core.management import get_commands

    for name, app in sorted(get_commands().items()):
        if app not in APPS:
            continue
        parser = command(name).create_parser("manage.py", name)
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not subs[0].required:
            yield name, "", parser
        for sub in subs:
            for subname, subparser in sub.choices.items():
                yield name, subname, subparser


def options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def iso(value):
    return value.isoformat() if value is not None else None


def as_json(argv) -> object:
    """What `manage.py *argv --json` printed, parsed; it must have succeeded with only JSON on
    stdout."""
    done = run(*argv, "--json")
    assert done.code == 0, done
    assert "Traceback" not in done.err
    return json.loads(done.out)


# --- the rows every check reads --------------------------------------------------------------


def die(task_path: str, message: str, *, kwargs=None, at=None) -> DeadLetter:
    """A job that dies through the store, as a worker's does: its letter (and the counters the
    overview and the causes read) written there."""
    job = JobFactory(running=True, task_path=task_path, kwargs=kwargs or {})
    at = at or timezone.now()
    entry = store.error_entry(job, class_path="shop.Refused", message=message, traceback="", now=at)
    assert store.fail(job, entry, retry_at=None, now=at)
    return DeadLetter.objects.get(job=job)


@pytest.fixture
def seeded():
    now = timezone.now()
    letters = [
        die("shop.charge", "order 1 not found", at=now - timedelta(hours=3), kwargs={"n": 1}),
        die("shop.charge", "order 2 not found", at=now - timedelta(hours=2)),
        die("shop.charge", "card declined", at=now - timedelta(hours=1)),
        die("shop.refund", "order 9 not found", kwargs={"password": SECRET, "note": "café"}),
    ]
    JobFactory(queue_name="mail", args=[SECRET], idempotency_key="mail:1")
    JobFactory(queue_name="mail", run_after=now + timedelta(hours=1))
    JobFactory(done=True, finished_at=now - timedelta(minutes=5))
    old_done = JobFactory(done=True, finished_at=now - timedelta(days=30))
    store.queues.pause("mail", actor="ana", reason="SMTP down")
    store.audit.record(
        "queue.resume", actor="bo", channel="cli", target_kind="queue", targets=["other"]
    )
    schedule = Schedule.objects.create(
        name="nightly",
        task_path="tests.tasks.noop",
        cron="0 3 * * *",
        next_run_at=now + timedelta(hours=5),
        last_tick_at=now - timedelta(hours=21),
        created_at=now,
        updated_at=now,
    )
    Schedule.objects.create(
        name="hourly",
        task_path="tests.tasks.noop",
        cron="0 * * * *",
        next_run_at=now + timedelta(minutes=5),
        paused_at=now,
        paused_by="ana",
        pause_reason="noisy",
        created_at=now,
        updated_at=now,
    )
    tick_job = JobFactory(done=True)
    ScheduleRun.objects.create(
        schedule=schedule,
        tick=now - timedelta(days=2),
        outcome="enqueued",
        job=tick_job,
        at=now - timedelta(days=2),
    )
    ScheduleRun.objects.create(
        schedule=schedule,
        tick=now - timedelta(hours=21),
        outcome="skipped",
        note="the last run was still live",
        at=now - timedelta(hours=21),
    )
    flow_job = JobFactory(task_path="tests.workflow_tasks.waiter")
    flow = Workflow.objects.create(
        id=flow_job.pk,
        task_path=flow_job.task_path,
        job=flow_job,
        state="waiting",
        step="wait:go",
        waiting_for="go",
        wake_at=now + timedelta(days=1),
        started_at=now - timedelta(minutes=3),
        updated_at=now - timedelta(minutes=1),
    )
    WorkflowStep.objects.create(
        workflow=flow,
        name="fetch",
        kind="step",
        state="done",
        attempts=1,
        result={"token": SECRET},
        started_at=now - timedelta(minutes=3),
        finished_at=now - timedelta(minutes=2),
    )
    WorkflowStep.objects.create(
        workflow=flow, name="wait:go", kind="wait", state="waiting", started_at=now
    )
    WorkflowSignal.objects.create(workflow=flow, name="early", payload={"k": SECRET}, sent_at=now)
    done_job = JobFactory(done=True, task_path="tests.workflow_tasks.three_steps")
    Workflow.objects.create(
        id=done_job.pk,
        task_path=done_job.task_path,
        job=done_job,
        state="done",
        started_at=now - timedelta(minutes=9),
        updated_at=now - timedelta(minutes=8),
    )
    WorkerRecord.objects.create(
        worker_id="gone:1",
        host="h",
        pid=1,
        started_at=now - timedelta(days=3),
        last_heartbeat_at=now - timedelta(days=2),
    )
    return {"letters": letters, "schedule": schedule, "flow": flow, "old_done": old_done}


# --- each listing's JSON against the database ------------------------------------------------


def check_deadletters_list(seeded):
    rows = as_json(["deadletters", "list"])
    letters = DeadLetter.objects.order_by("-dead_lettered_at", "-id")
    assert [row["id"] for row in rows] == [letter.pk for letter in letters]
    fields = ["source", "task_path", "queue_name", "state", "error_class", "attempts", "replays"]
    for row, letter in zip(rows, letters, strict=True):
        assert row == {
            "id": letter.pk,
            **{name: getattr(letter, name) for name in fields},
            "dead_lettered_at": letter.dead_lettered_at.isoformat(),
            "last_error": letter.last_error,
        }
    pending = as_json(["deadletters", "list", "--job-type", "shop.refund", "--state", "pending"])
    assert [row["id"] for row in pending] == [seeded["letters"][3].pk]


def check_deadletters_show(seeded):
    letter = seeded["letters"][3]
    done = run("deadletters", "show", str(letter.pk), "--json")
    assert SECRET not in done.out
    shown = json.loads(done.out)
    assert (shown["id"], shown["task_path"], shown["state"]) == (
        letter.pk,
        "shop.refund",
        DeadLetterState.PENDING,
    )
    # Masked as the console's page masks it (the same function), the rest as it is.
    assert shown["payload"] == {
        "args": redaction.redact(letter.args),
        "kwargs": redaction.redact(letter.kwargs),
    }
    assert shown["payload"]["kwargs"]["note"] == "café"
    assert shown["dead_lettered_at"] == letter.dead_lettered_at.isoformat()
    assert shown["errors"] == [
        {k: v for k, v in e.items() if k != "traceback"} for e in letter.errors
    ]


def check_deadletters_types(seeded):
    rows = as_json(["deadletters", "types"])
    expected = (
        DeadLetter.objects.filter(state=DeadLetterState.PENDING)
        .values("task_path")
        .annotate(n=Count("id"), oldest=Min("dead_lettered_at"), newest=Max("dead_lettered_at"))
        .order_by("-n", "task_path")
    )
    assert [
        (row["task_path"], row["pending"], row["oldest"], row["newest"], row["died_again"])
        for row in rows
    ] == [(e["task_path"], e["n"], iso(e["oldest"]), iso(e["newest"]), 0) for e in expected]
    assert [(e["error_class"], e["pending"]) for e in rows[0]["top_errors"]] == [
        ("shop.Refused", 3)
    ]


def check_deadletters_causes(seeded):
    rows = as_json(["deadletters", "causes", "shop.charge"])
    expected = (
        DeadLetter.objects.filter(task_path="shop.charge", state=DeadLetterState.PENDING)
        .values("fingerprint")
        .annotate(n=Count("id"), first=Min("dead_lettered_at"), last=Max("dead_lettered_at"))
        .order_by("-n", "fingerprint")
    )
    assert [
        (row["fingerprint"], row["pending"], row["first_seen"], row["last_seen"]) for row in rows
    ] == [(e["fingerprint"], e["n"], iso(e["first"]), iso(e["last"])) for e in expected]
    assert [row["sample"] for row in rows] == ["order 2 not found", "card declined"]
    assert [row["pending"] for row in rows] == [2, 1]


def check_jobs(seeded):
    now = timezone.now()
    rows = as_json(["jobs", "--limit", "100"])
    jobs = list(Job.objects.order_by("-id"))
    assert [row["id"] for row in rows] == [job.pk for job in jobs]
    for row, job in zip(rows, jobs, strict=True):
        assert row == {
            "id": job.pk,
            "task_path": job.task_path,
            "queue_name": job.queue_name,
            "state": JobStatus.of(job, now).value,
            "attempts": job.attempts,
            "max_attempts": job.max_attempts,
            "idempotency_key": job.idempotency_key,
            "run_after": iso(job.run_after),
            "locked_until": iso(job.locked_until),
            "locked_by": job.locked_by,
            "enqueued_at": iso(job.enqueued_at),
            "finished_at": iso(job.finished_at),
            "last_error": job.errors[-1]["message"] if job.errors else None,
        }
    done = as_json(["jobs", "--state", "done"])
    assert [row["id"] for row in done] == list(
        Job.objects.filter(state=JobState.DONE).order_by("-id").values_list("id", flat=True)
    )
    assert as_json(["jobs", "list", "--limit", "100"]) == rows
    # Options before the sub-command count as after it.
    assert as_json(["jobs", "--state", "done", "list"]) == done
    # The paused queue's note goes to stderr, where it cannot break the document.
    listing = run("jobs", "--json")
    assert "queue mail is PAUSED" in listing.err and "PAUSED" not in listing.out


def check_jobs_show(seeded):
    letter = seeded["letters"][0]
    job = Job.objects.get(pk=letter.original_job_id)
    done = run("jobs", "show", str(job.pk), "--json")
    assert done.code == 0, done
    shown = json.loads(done.out)
    assert (shown["id"], shown["state"], shown["attempts"], shown["dead_letter"]) == (
        job.pk,
        JobState.DEAD,
        job.attempts,
        letter.pk,
    )
    assert shown["finished_at"] == job.finished_at.isoformat()
    assert shown["kwargs_summary"] == {
        "type": "object",
        "keys": ["n"],
        "key_count": 1,
        "bytes": len(b'{"n": 1}'),
    }
    assert [(a["attempt"], a["class"], a["message"]) for a in shown["attempts_failed"]] == [
        (e["attempt"], e["exception_class_path"], e["message"]) for e in job.errors
    ]
    assert json.loads(run("jobs", "--json", "show", str(job.pk)).out) == shown
    holding = Job.objects.get(idempotency_key="mail:1")
    revealing = run("jobs", "show", str(holding.pk), "--json")
    assert SECRET not in revealing.out
    assert json.loads(revealing.out)["args_summary"]["items"] == 1


def check_queues_list(seeded):
    rows = as_json(["queues", "list"])
    now = timezone.now()
    queues = sorted(set(Job.objects.values_list("queue_name", flat=True)))
    expected = []
    for queue in queues:
        figures = {
            status.value: Job.objects.filter(status.q(now), queue_name=queue).count()
            for status in UNFINISHED
        }
        if queue == "mail" or any(figures.values()):
            expected.append((queue, figures))
    assert [(row["queue"], {s.value: row[s.value] for s in UNFINISHED}) for row in rows] == (
        expected
    )
    [mail] = [row for row in rows if row["queue"] == "mail"]
    assert (mail["paused"], mail["paused_by"], mail["reason"]) == (True, "ana", "SMTP down")
    assert (mail["ready"], mail["scheduled"]) == (1, 1)


def check_queuehealth(seeded):
    shown = as_json(["queuehealth"])
    now = timezone.now()
    for status in UNFINISHED:
        assert shown["totals"][status.value] == Job.objects.filter(status.q(now)).count(), status
    assert list(shown["paused"]) == ["mail"]


def check_schedules_list(seeded):
    rows = as_json(["schedules", "list"])
    assert [(row["name"], row["state"], row["paused_by"]) for row in rows] == [
        ("hourly", "paused", "ana"),
        ("nightly", "active", None),
    ]
    for row in rows:
        schedule = Schedule.objects.get(name=row["name"])
        assert (row["id"], row["cron"], row["next_run_at"], row["last_tick_at"]) == (
            schedule.pk,
            schedule.cron,
            schedule.next_run_at.isoformat(),
            iso(schedule.last_tick_at),
        )


def check_schedules_show(seeded):
    shown = as_json(["schedules", "show", "nightly"])
    schedule = seeded["schedule"]
    assert (shown["name"], shown["cron"], shown["next_run_at"]) == (
        "nightly",
        "0 3 * * *",
        schedule.next_run_at.isoformat(),
    )
    runs = ScheduleRun.objects.filter(schedule=schedule).order_by("-at", "-id")
    assert [(r["id"], r["tick"], r["outcome"], r["job_id"]) for r in shown["runs"]] == [
        (run.pk, run.tick.isoformat(), run.outcome, run.job_id) for run in runs
    ]
    assert shown["runs"][1]["job_state"] == JobState.DONE


def check_workflows_list(seeded):
    rows = as_json(["workflows", "list"])
    flows = Workflow.objects.order_by("-updated_at", "-id")
    assert [row["id"] for row in rows] == [flow.pk for flow in flows]
    assert rows[0] == {
        "id": seeded["flow"].pk,
        "task_path": "tests.workflow_tasks.waiter",
        "state": "waiting",
        "step": "wait:go",
        "wake_at": seeded["flow"].wake_at.isoformat(),
        "waiting_for": "go",
        "job_id": seeded["flow"].job_id,
        "started_at": seeded["flow"].started_at.isoformat(),
        "updated_at": seeded["flow"].updated_at.isoformat(),
    }


def check_workflows_show(seeded):
    flow = seeded["flow"]
    done = run("workflows", "show", str(flow.pk), "--json")
    assert done.code == 0 and SECRET not in done.out, done
    shown = json.loads(done.out)
    assert (shown["id"], shown["state"], shown["job_state"]) == (flow.pk, "waiting", "ready")
    assert [(s["name"], s["state"]) for s in shown["steps"]] == [
        ("fetch", "done"),
        ("wait:go", "waiting"),
    ]
    assert shown["steps"][0]["result_summary"]["keys"] == ["token"]
    assert [s["name"] for s in shown["signals"]] == ["early"]


def check_audit_list(seeded):
    rows = as_json(["audit", "list"])
    entries = AuditEntry.objects.order_by("-id")
    assert [row["id"] for row in rows] == [entry.pk for entry in entries]
    for row, entry in zip(rows, entries, strict=True):
        assert (row["seq"], row["at"], row["actor"], row["action"], row["hash"]) == (
            entry.seq,
            entry.at.isoformat(),
            entry.actor,
            entry.action,
            entry.hash,
        )
    assert [(row["action"], row["targets"]) for row in rows] == [
        ("queue.resume", ["other"]),
        ("queue.pause", ["mail"]),
    ]


def check_deploy_list(seeded):
    from jobqueue.models import Deploy

    store.deploys.mark("v1", actor="ci", note="first")
    store.deploys.mark_if_new("v2", actor="worker-1")
    rows = as_json(["deploy", "list"])
    assert rows == [
        {
            "seq": d.seq,
            "version": d.version,
            "at": d.at.isoformat(),
            "note": d.note,
            "source": d.source,
            "recorded_by": d.recorded_by,
        }
        for d in Deploy.objects.order_by("-seq")
    ]
    assert [row["version"] for row in rows] == ["v2", "v1"]


def check_prune(seeded):
    before = Job.objects.filter(state=JobState.DONE).count()
    report = as_json(["prune"])
    assert report["jobs"] == {"deleted": 1, "older_than_days": 14.0}
    assert report["workers"] == {"deleted": 1, "older_than_days": 1.0}
    assert not Job.objects.filter(pk=seeded["old_done"].pk).exists()
    assert Job.objects.filter(state=JobState.DONE).count() == before - 1
    assert not WorkerRecord.objects.exists()


def check_act_list(seeded):
    rows = as_json(["act", "list"])
    assert [row["name"] for row in rows] == list(actions.REGISTRY)
    assert rows == [actions.as_json(action) for action in actions.REGISTRY.values()]


def check_apitoken_list(seeded):
    from deadletters import tokens
    from deadletters.models import ApiToken
    from tests.factories import UserFactory

    for name in ("grafana", "deploys"):
        tokens.create(UserFactory(username="ana"), name=name, channel="code")
    rows = as_json(["apitoken", "list"])
    tokens_ = ApiToken.objects.order_by("-created_at", "-id")
    assert [row["id"] for row in rows] == [t.pk for t in tokens_] and rows
    for row, token in zip(rows, tokens_, strict=True):
        assert (row["user"], row["name"], row["prefix"], row["expires_at"]) == (
            token.user.username,
            token.name,
            token.label,
            token.expires_at.isoformat(),
        )
        assert "secret_hash" not in row and "token" not in row


# Each listing, how to check its JSON, and an argument it refuses (after --json).
LISTINGS = {
    ("deadletters", "list"): (check_deadletters_list, ["deadletters", "list", "--limit", "0"]),
    ("deadletters", "show"): (check_deadletters_show, ["deadletters", "show", "999999"]),
    ("deadletters", "types"): (
        check_deadletters_types,
        ["deadletters", "types", "--backend", "nope"],
    ),
    ("deadletters", "causes"): (
        check_deadletters_causes,
        ["deadletters", "causes", "shop.charge", "--limit", "-1"],
    ),
    ("jobs", ""): (check_jobs, ["jobs", "--state", "lost"]),
    ("jobs", "list"): (check_jobs, ["jobs", "list", "--limit", "x"]),
    ("jobs", "show"): (check_jobs_show, ["jobs", "show", "999999"]),
    ("queues", "list"): (check_queues_list, ["queues", "list", "--bogus"]),
    ("queuehealth", ""): (check_queuehealth, ["queuehealth", "--fail-if", "nope>1"]),
    ("schedules", "list"): (check_schedules_list, ["schedules", "list", "extra"]),
    ("schedules", "show"): (check_schedules_show, ["schedules", "show", "nope"]),
    ("workflows", "list"): (check_workflows_list, ["workflows", "list", "--state", "sad"]),
    ("workflows", "show"): (check_workflows_show, ["workflows", "show", "x"]),
    ("audit", "list"): (check_audit_list, ["audit", "list", "--limit", "10001"]),
    ("deploy", "list"): (check_deploy_list, ["deploy", "list", "--limit", "0"]),
    ("prune", ""): (check_prune, ["prune", "--older-than", "-1"]),
    ("act", "list"): (check_act_list, ["act", "list", "--bogus"]),
    ("apitoken", "list"): (check_apitoken_list, ["apitoken", "list", "--user", "nobody"]),
}


def test_every_command_of_both_apps_is_a_listing_or_says_why_not():
    found = {(name, sub) for name, sub, _ in parsers()}
    assert not set(LISTINGS) & set(NOT_LISTINGS)
    assert sorted(found - set(LISTINGS) - set(NOT_LISTINGS)) == []  # unclassified
    assert sorted((set(LISTINGS) | set(NOT_LISTINGS)) - found) == []  # gone


def test_every_listing_and_show_takes_json():
    found = {(name, sub): parser for name, sub, parser in parsers()}
    assert sorted(key for key in LISTINGS if "--json" not in options(found[key])) == []


@pytest.mark.parametrize("key", sorted(LISTINGS), ids=lambda key: " ".join(filter(None, key)))
def test_the_json_of_each_listing_is_what_the_database_holds(seeded, key):
    check, _ = LISTINGS[key]
    check(seeded)


@pytest.mark.parametrize("key", sorted(LISTINGS), ids=lambda key: " ".join(filter(None, key)))
def test_a_refused_argument_under_json_is_one_line_on_stderr(seeded, key):
    _, argv = LISTINGS[key]
    before = row_counts()
    refused = run(*argv, "--json")
    assert refused.refused_cleanly, refused  # status 2, one line on stderr, nothing on stdout
    assert "Traceback" not in refused.err
    assert row_counts() == before  # prune's refusal deletes nothing


@pytest.mark.parametrize(
    "argv",
    [["deadletters", "list"], ["jobs", "--state", "cancelled"], ["workflows", "list"]],
    ids=" ".join,
)
def test_an_empty_listing_is_an_empty_array(argv):
    done = run(*argv, "--json")
    assert (done.code, done.out, done.err) == (0, "[]\n", "")


def test_a_listing_is_one_array_with_one_row_to_a_line_and_its_note_on_stderr(seeded):
    done = run("deadletters", "list", "--limit", "2", "--json")
    lines = done.out.splitlines()
    assert (lines[0], lines[-1], len(lines)) == ("[", "]", 4)
    assert [json.loads(line.rstrip(","))["id"] for line in lines[1:3]] == [
        row["id"] for row in json.loads(done.out)
    ]
    assert done.err.strip() == "… 2 more; use --limit"


def test_the_new_listings_print_text_without_json(seeded):
    """jobs show, schedules show, deadletters types and causes: the same values, as lines."""
    letter = seeded["letters"][0]
    job = Job.objects.get(pk=letter.original_job_id)
    lines = run("jobs", "show", str(job.pk)).out.splitlines()
    assert f"finished_at: {job.finished_at.isoformat()}" in lines
    assert (
        f"dead_letter: {letter.pk}" in lines and "kwargs_summary: object {'n'} (8 bytes)" in lines
    )
    schedule = seeded["schedule"]
    [skipped, enqueued] = [
        line
        for line in run("schedules", "show", "nightly").out.splitlines()
        if line.startswith("  tick ")
    ]
    [first, second] = ScheduleRun.objects.filter(schedule=schedule).order_by("at")
    assert skipped == (
        f"  tick {second.tick.isoformat()} at {second.at.isoformat()} skipped: "
        "the last run was still live"
    )
    assert enqueued == (
        f"  tick {first.tick.isoformat()} at {first.at.isoformat()} enqueued job "
        f"{first.job_id} (done)"
    )
    types = run("deadletters", "types").out.splitlines()
    assert [line.split()[:2] for line in types] == [["3", "shop.charge"], ["1", "shop.refund"]]
    causes = run("deadletters", "causes", "shop.charge").out.splitlines()
    assert [(line.split()[0], line.split()[1]) for line in causes] == [
        ("2", seeded["letters"][1].fingerprint),
        ("1", seeded["letters"][2].fingerprint),
    ]
    assert run("deadletters", "causes", "shop.none").out == "no pending dead letters of shop.none\n"
