"""`manage.py workflows`: list, show (results hidden unless asked) and signal, run as the shell
would; refusals are status 2 in one line and change nothing."""

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from jobqueue.models import DeadLetter, Job, JobState, Workflow, WorkflowSignal, WorkflowState
from tests import workflow_tasks as wf
from tests.cli import row_counts, run
from tests.jobqueue.test_worker import burst

pytestmark = pytest.mark.django_db(transaction=True)

HUGE = str(2**64)
SECRET = "hunter2-secret"


# Who a signal is sent for and why: the command is audited, as the console's signal is.
AUDITED = ("--reason", "customer confirmed", "--operator", "ops")


@pytest.fixture(autouse=True)
def ops(transactional_db):
    from deadletters.roles import assign
    from tests.factories import UserFactory

    user = UserFactory(username="ops")
    assign(user, "operator")
    return user


@pytest.fixture
def sink(tmp_path, monkeypatch):
    monkeypatch.setenv("REDRIVE_TEST_SINK", str(tmp_path / "sink.log"))
    monkeypatch.setitem(wf.BROKEN, "step", True)


def waiting_workflow() -> int:
    result = wf.waiter.enqueue("w", 3600)
    burst()
    assert Workflow.objects.get(pk=result.id).state == WorkflowState.WAITING
    return int(result.id)


def snapshot() -> dict:
    """Everything a refused command must leave as it was, workflows included."""
    return {
        **row_counts(),
        "workflows": list(
            Workflow.objects.order_by("pk").values_list("pk", "state", "updated_at", "wake_at")
        ),
        "signals": WorkflowSignal.objects.count(),
        "jobs": list(Job.objects.order_by("pk").values_list("pk", "state", "run_after")),
    }


def test_list_newest_first_with_state_filter_limit_and_json(sink):
    assert run("workflows", "list").out.strip() == "no workflows"
    done = wf.three_steps.enqueue("k")
    burst()
    dead = wf.breaks_at_second.enqueue("z", permanent=True)
    burst()
    waiting = waiting_workflow()
    # The done one changed last.
    Workflow.objects.filter(pk=done.id).update(updated_at=timezone.now() + timedelta(seconds=5))

    lines = run("workflows", "list").out.splitlines()
    assert [int(line.split()[0]) for line in lines] == [int(done.id), waiting, int(dead.id)]
    # Field by field: "waiting" alone is in waiting_for=, and job=1 in job=12.
    row = next(line.split() for line in lines if int(line.split()[0]) == waiting)
    assert row[1:4] == ["waiting", "tests.workflow_tasks.waiter", "step='wait:go'"]
    assert row[4] == "waiting_for='go'" and row[5].startswith("until=")
    assert row[6:] == [f"job={waiting}"]
    assert "step='second'" in next(line.split() for line in lines if line.split()[1] == "dead")

    listed = json.loads(run("workflows", "list", "--json").out)
    assert [r["id"] for r in listed] == [int(done.id), waiting, int(dead.id)]
    assert listed[1] | {"wake_at": None, "started_at": None, "updated_at": None} == {
        "id": waiting,
        "task_path": "tests.workflow_tasks.waiter",
        "state": "waiting",
        "step": "wait:go",
        "wake_at": None,
        "waiting_for": "go",
        "job_id": waiting,
        "started_at": None,
        "updated_at": None,
    }
    assert listed[1]["wake_at"] is not None

    only_dead = json.loads(run("workflows", "list", "--state", "dead", "--json").out)
    assert [row["id"] for row in only_dead] == [int(dead.id)]
    limited = run("workflows", "list", "--limit", "1")
    assert limited.out.splitlines()[-1] == "… 2 more; use --limit"
    as_json = run("workflows", "list", "--limit", "1", "--json")
    assert [row["id"] for row in json.loads(as_json.out)] == [int(done.id)]
    assert as_json.err.strip() == "… 2 more; use --limit"
    assert run("workflows", "list", "--state", "sleeping").out.strip() == "no workflows"


def test_show_prints_steps_in_order_and_hides_results_unless_asked(sink):
    result = wf.three_steps.enqueue(SECRET)
    burst()
    hidden = run("workflows", "show", str(result.id))
    assert hidden.code == 0, hidden
    assert SECRET not in hidden.out.lower()
    lines = hidden.out.splitlines()
    assert lines[0] == f"workflow {result.id} tests.workflow_tasks.three_steps"
    assert "state    done" in hidden.out
    steps = [line for line in lines if "attempts=" in line]
    assert [line.split()[1] for line in steps] == ["'a'", "'b'", "'c'"]
    assert all("[call] done attempts=1" in line and "finished=" in line for line in steps)
    assert "result object {'key', 'first'}" in hidden.out  # its shape, not its values
    assert "result string (16 bytes)" in hidden.out
    assert "(values hidden: --results prints them)" in hidden.out

    shown = run("workflows", "show", str(result.id), "--results")
    assert SECRET in shown.out and SECRET.upper() in shown.out
    assert "values hidden" not in shown.out

    data = json.loads(run("workflows", "show", str(result.id), "--json").out)
    assert (data["state"], data["job_state"], data["dead_letter"]) == ("done", "done", None)
    assert [s["name"] for s in data["steps"]] == ["a", "b", "c"]
    assert data["steps"][1]["result_summary"] == {
        "type": "object",
        "keys": ["key", "first"],
        "key_count": 2,
        "bytes": len(json.dumps({"key": SECRET, "first": True})),
    }
    assert "result" not in data["steps"][1] and SECRET not in json.dumps(data).lower()
    revealed = json.loads(run("workflows", "show", str(result.id), "--json", "--results").out)
    assert revealed["steps"][1]["result"] == {"key": SECRET, "first": True}


def test_show_of_a_dead_workflow_names_the_error_and_the_letter_to_replay(sink):
    result = wf.breaks_at_second.enqueue("z", permanent=True)
    burst()
    out = run("workflows", "show", str(result.id)).out
    letter = DeadLetter.objects.get(original_job_id=result.id)
    assert "state    dead" in out and "step     'second'" in out
    assert "error  jobqueue.errors.PermanentError: z refused" in out
    assert f"letter   {letter.pk} (pending)" in out
    assert f"manage.py deadletters replay {letter.pk} --reason" in out
    data = json.loads(run("workflows", "show", str(result.id), "--json").out)
    assert data["dead_letter"] == {"id": letter.pk, "state": "pending"}
    assert data["steps"][1]["last_error"]["class"] == "jobqueue.errors.PermanentError"
    assert data["steps"][1]["state"] == "dead"


def test_signal_wakes_a_waiting_workflow_and_a_second_one_is_already_sent(sink):
    workflow_id = waiting_workflow()
    before = Job.objects.get(pk=workflow_id).run_after
    assert before > timezone.now() + timedelta(minutes=59)
    result = run("workflows", "signal", str(workflow_id), "go", "--payload", '{"ok": 1}', *AUDITED)
    assert result.code == 0, result
    assert (
        result.out
        == f"Workflow {workflow_id}: 'go' sent; it was waiting for it and runs again now.\n"
    )
    assert Job.objects.get(pk=workflow_id).run_after <= timezone.now()

    again = run(
        "workflows", "signal", str(workflow_id), "go", "--payload", '{"ok": 2}', "--json", *AUDITED
    )
    assert again.code == 0, again
    assert json.loads(again.out) == {
        "changed": False,
        "message": f"Workflow {workflow_id} already had 'go': nothing changed.",
        "workflow": workflow_id,
        "event": "go",
        "woke": False,
        "state": "waiting",
    }
    burst()
    job = Job.objects.get(pk=workflow_id)
    assert job.state == JobState.DONE and job.return_value == {"got": {"ok": 1}}
    # Shown afterwards: the signal with its payload hidden.
    out = run("workflows", "show", str(workflow_id)).out
    assert "signal 'go' sent" in out and "object {'ok'}" in out


def test_signal_to_a_workflow_not_waiting_for_it_is_kept_for_later(sink):
    done = wf.three_steps.enqueue("k")
    burst()
    result = run("workflows", "signal", str(done.id), "late", *AUDITED)
    assert result.code == 0 and "the workflow is done: nothing will read it" in result.out
    data = json.loads(
        run(
            "workflows", "signal", str(done.id), "other", "--payload", "[1]", "--json", *AUDITED
        ).out
    )
    assert (data["changed"], data["woke"], data["state"]) == (True, False, "done")
    assert WorkflowSignal.objects.filter(workflow_id=done.id).count() == 2
    assert WorkflowSignal.objects.get(name="late").payload == {}  # no --payload: {}


def test_signal_is_audited_as_the_consoles_and_refused_without_its_permission(sink):
    """Issue 47: the command is an alias of `act workflow.signal`, so it writes the registry's
    entry (channel cli, the payload masked as the console masks it), once per delivered signal;
    without the action's permissions, or without --reason/--operator, nothing is sent or
    written."""
    from jobqueue.models import AuditEntry
    from tests.factories import UserFactory

    workflow_id = waiting_workflow()
    UserFactory(username="nobody")
    before = snapshot()
    lacking = run("workflows", "signal", str(workflow_id), "go", "--reason", "r", "--operator",
                  "nobody")  # fmt: skip
    assert lacking.refused_cleanly, lacking
    assert "Not allowed: this needs the permission deadletters.view_deadletter." in lacking.err
    unsaid = run("workflows", "signal", str(workflow_id), "go")
    assert unsaid.refused_cleanly and "--reason" in unsaid.err, unsaid
    assert snapshot() == before and not AuditEntry.objects.exists()

    payload = f'{{"password": "{SECRET}", "plan": "pro"}}'
    assert (
        run("workflows", "signal", str(workflow_id), "go", "--payload", payload, *AUDITED).code == 0
    )
    assert run("workflows", "signal", str(workflow_id), "go", *AUDITED).code == 0  # already sent
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.channel, entry.actor, entry.reason) == (
        "workflow.signal", "cli", "ops", "customer confirmed"
    )  # fmt: skip
    assert (entry.target_kind, entry.targets) == ("workflow", [str(workflow_id)])
    assert entry.params["event"] == "go"
    assert entry.params["payload"]["plan"] == "pro"
    assert SECRET not in str(entry.params)  # masked, as the console's entry


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "abc"], "must be a workflow id"),
        (["show", HUGE], "must be between 1 and"),
        (["show", "0"], "must be between 1 and"),
        (["show", "-5"], None),
        (["show", "424242"], "no workflow 424242"),
        (["signal", "abc", "go"], "must be a workflow id"),
        (["signal", HUGE, "go"], "must be between 1 and"),
        (["signal", "424242", "go"], "no workflow #424242"),
        (["signal", "{id}", "go", "--payload", "{"], "payload: Not JSON"),
        (["signal", "{id}", "go", "--payload", '{"x": NaN}'], "payload must be JSON"),
        (["signal", "{id}", "go", "--payload", "[1e999]"], "payload must be JSON"),
        (["signal", "{id}", "go", "--payload", '"a\\u0000b"'], "NUL"),
        (["signal", "{id}", "go", "--payload", '"\\ud800"'], "payload must be JSON"),
        (["signal", "{id}", "go", "--payload", "[" * 100_000], "nests deeper than 64 levels"),
        (["signal", "{id}", "go", "--payload", json.dumps("x" * 2_000_000)], "over the"),
        (["signal", "{id}", ""], "may not be empty"),
        (["signal", "{id}", "  "], "may not be empty"),
        (["signal", "{id}", "e" * 201], "at most 200 characters"),
        (["signal", "{id}", "a\x00b"], "NUL"),
        (["signal", "{id}"], "required"),
        (["list", "--state", "ready"], "invalid choice"),
        (["list", "--limit", "0"], "--limit"),
        (["list", "--limit", HUGE], "--limit"),
        (["explode"], "invalid choice"),
    ],
)
def test_hostile_arguments_are_refused_cleanly_and_change_nothing(sink, argv, message):
    workflow_id = waiting_workflow()
    argv = [a.replace("{id}", str(workflow_id)) for a in argv]
    if argv[0] == "signal" and len(argv) > 2:
        argv += AUDITED
    before = snapshot()
    result = run("workflows", *argv)
    assert result.refused_cleanly, result
    assert "Traceback" not in result.err
    if message:
        assert message in result.err, result.err
    assert snapshot() == before


def test_a_workflow_not_begun_is_named_by_show_and_takes_a_signal(sink):
    result = wf.waiter.enqueue("early", 60)  # not run yet: no workflow row
    refused = run("workflows", "show", str(result.id))
    assert refused.refused_cleanly, refused
    assert f"no workflow {result.id} (job {result.id} exists" in refused.err
    sent = run(
        "workflows", "signal", str(result.id), "go", "--payload", '{"early": true}', *AUDITED
    )
    assert sent.code == 0, sent
    assert WorkflowSignal.objects.get().payload == {"early": True}
    burst()
    assert Job.objects.get(pk=result.id).return_value == {"got": {"early": True}}


def test_call_command_refusals_are_command_errors_with_status_2(sink):
    workflow_id = waiting_workflow()
    for argv in (
        ["show", "nope"],
        ["show", "99999"],
        ["signal", str(workflow_id), "go", "--payload", "[NaN]", *AUDITED],
        ["signal", str(workflow_id), "", *AUDITED],
    ):
        with pytest.raises(CommandError) as info:
            call_command("workflows", *argv)
        assert info.value.returncode == 2, argv
    assert not WorkflowSignal.objects.exists()
