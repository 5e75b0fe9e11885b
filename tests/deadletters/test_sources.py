"""Dead-letter sources: a new one is one module and one settings entry, and every caller
(store, console, CLI) reaches it through the registry, never by its name."""

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from deadletters import selectors
from deadletters.apps import register_sources
from deadletters.checks import console_setup
from deadletters.forms import FilterForm
from jobqueue import store
from jobqueue.models import DeadLetter, Job
from jobqueue.store import sources
from tests.deadletters.workflow_source import STUCK
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db
PATH = "tests.deadletters.workflow_source.WorkflowLetters"


@pytest.fixture
def workflow(monkeypatch):
    """The registry as it is, plus the workflow source from its settings entry."""
    monkeypatch.setattr(sources, "_paths", dict(sources._paths))
    monkeypatch.setattr(sources, "_loaded", dict(sources._loaded))
    with override_settings(REDRIVE={"SOURCES": ["jobqueue", PATH]}):
        register_sources()
        yield sources.get("workflow")


def test_a_settings_entry_registers_a_source_that_replays_and_discards(workflow):
    ours = DeadLetterFactory()
    theirs = DeadLetterFactory(source="workflow", task_path="wf.checkout")
    cancelled = DeadLetterFactory(source="workflow", kwargs={"cancelled": True})
    outcome = store.replay([ours.pk, theirs.pk, cancelled.pk])
    assert outcome.refs == {theirs.pk: f"wf-{theirs.pk}"}
    assert outcome.skipped == {cancelled.pk: STUCK}
    assert isinstance(outcome.done[ours.pk], Job) and outcome.done[theirs.pk] is None
    theirs.refresh_from_db()
    assert (theirs.state, theirs.replays, theirs.replay_ref) == ("replaying", 1, f"wf-{theirs.pk}")
    assert DeadLetter.objects.get(pk=cancelled.pk).state == "pending"  # a skip writes nothing
    assert store.discard([cancelled.pk]).done == {cancelled.pk: None}
    assert workflow.discarded == [cancelled.pk]


def test_the_console_describes_and_filters_a_registered_source(workflow):
    letter = DeadLetterFactory(source="workflow", task_path="wf.checkout")
    origin = selectors.detail(letter.pk).origin
    assert (origin.label, origin.reference_name, origin.reference) == (
        "Workflow",
        "run",
        "wf.checkout",
    )
    form = FilterForm({"source": "workflow"})
    assert form.is_valid() and form.to_filter().source == "workflow"
    assert ("workflow", "Workflow") in form.fields["source"].choices


def test_the_cli_accepts_a_registered_source(workflow, capsys):
    DeadLetterFactory(source="workflow", task_path="wf.checkout")
    DeadLetterFactory(task_path="tests.tasks.noop")
    call_command("deadletters", "list", "--source", "workflow", "--json")
    out = capsys.readouterr().out
    assert "wf.checkout" in out and "tests.tasks.noop" not in out


@override_settings(REDRIVE={"SOURCES": ["jobqueue", "tests.deadletters.no_such.Source"]})
def test_a_source_that_does_not_import_is_refused_at_start_up(monkeypatch):
    monkeypatch.setattr(sources, "_paths", dict(sources._paths))
    assert "redrive.E005" in [error.id for error in console_setup()]


@pytest.mark.parametrize("command", [["check"], ["runworker", "--burst"]])
def test_a_source_that_does_not_import_stops_a_process_with_the_check_not_a_traceback(command):
    """Named in the settings a process starts with (not changed after the apps loaded): the
    apps load, and the check says what is wrong."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "REDRIVE_SOURCES": "jobqueue,tests.deadletters.no_such.Source",
    }
    env.setdefault("SECRET_KEY", "x")
    done = subprocess.run(
        [sys.executable, "manage.py", *command],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "redrive.E005" in done.stderr and "tests.deadletters.no_such.Source" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_letter_of_an_unregistered_source_is_skipped_not_guessed():
    letter = DeadLetterFactory(source="retired")
    reason = "no dead-letter source 'retired' is registered"
    assert store.replay([letter.pk]).skipped == {letter.pk: reason}
    assert store.discard([letter.pk]).skipped == {letter.pk: reason}
    assert DeadLetter.objects.get(pk=letter.pk).state == "pending"


def test_a_letter_of_an_unregistered_source_is_still_shown():
    letter = DeadLetterFactory(source="retired")
    assert selectors.detail(letter.pk).origin.label == "retired"


def test_the_ledger_names_what_a_replay_made_through_its_source(workflow, operator_client):
    """No caller tells outbox from django-q2 from a host's source by name: the source says
    what its replay made (the run page, the detail page and `deadletters show`)."""
    from deadletters import services
    from deadletters.models import ReplayItem
    from tests.factories import UserFactory

    letters = [DeadLetterFactory(source="workflow", task_path="wf.checkout")]
    operator = UserFactory(username="ledger-op")
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters]
    )
    run = services.start_run(operator=operator, selection=selection, reason="fixed")
    items = {item.dead_letter_id: item for item in ReplayItem.objects.filter(run=run)}
    wf_made = items[letters[0].pk].made_elsewhere
    assert (wf_made.what, wf_made.reference) == ("Workflow reference", f"wf-{letters[0].pk}")
    # (an outbox replay's ledger line: tests/outbox/test_relay.py)
    assert sources.made("outbox", "outbox:2") == sources.Made("message republished")
    assert sources.made("django_q2", "abc") == sources.Made("django-q2 task", "abc")
    assert sources.made("gone", "x-1") == sources.Made("reference", "x-1")
    page = operator_client.get(f"/deadletters/runs/{run.pk}/").content.decode()
    assert f'Workflow reference <code class="external-id">wf-{letters[0].pk}</code>' in page
    detail = operator_client.get(f"/deadletters/{letters[0].pk}/").content.decode()
    assert f"→ Workflow reference wf-{letters[0].pk} (" in detail
