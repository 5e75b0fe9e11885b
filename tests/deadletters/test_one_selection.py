"""One frozen selection (deadletters.Selection) for dead letters and queued jobs: each kind is
confirmed only by its own flow, and the jobs selections of before move in."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from deadletters import services
from deadletters.models import ReplayRun, Selection
from jobqueue.models import Job, JobState
from tests import development_migrations
from tests.deadletters.conftest import user_with_role
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db


def test_a_selection_is_confirmed_only_by_the_flow_of_its_kind(client):
    operator = user_with_role("operator", "olga")
    job = JobFactory(run_after=timezone.now() + timedelta(hours=1))
    letter = DeadLetterFactory()
    jobs = services.freeze_selection(operator=operator, kind="jobs", action="cancel", ids=[job.pk])
    letters = services.freeze_selection(operator=operator, action="replay", ids=[letter.pk])

    with pytest.raises(services.RefusedError, match="of jobs, not dead letters"):
        services.start_run(operator=operator, selection=jobs, reason="wrong flow")
    with pytest.raises(services.RefusedError, match="of dead letters, not jobs"):
        services.apply_job_selection(letters, reason="wrong flow")
    assert not ReplayRun.objects.exists()
    assert Job.objects.get(pk=job.pk).state == JobState.READY

    client.force_login(operator)
    # Each confirmation page finds only a selection of its own kind.
    assert client.get(f"/deadletters/selections/{jobs.pk}/").status_code == 404
    assert client.get(f"/deadletters/jobs/selections/{letters.pk}/").status_code == 404
    assert client.get(f"/deadletters/jobs/selections/{jobs.pk}/").status_code == 200
    assert services.apply_job_selection(jobs, reason="campaign off") == [job.pk]
    assert Selection.objects.get(pk=jobs.pk).applied_at is not None


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_every_jobs_selection_in():
    before = [("deadletters", "0014_run_events_in_the_audit_log")]
    development_migrations.executor().migrate(before)
    apps = development_migrations.executor().loader.project_state(before).apps
    at = timezone.now().replace(microsecond=0)
    user = apps.get_model("auth", "User").objects.create(username="sel")
    apps.get_model("deadletters", "Selection").objects.create(
        operator=user, action="discard", dead_letter_ids=[4, 5], created_at=at
    )
    apps.get_model("deadletters", "JobSelection").objects.create(
        operator=user,
        action="cancel",
        job_ids=[7, 8, 9],
        database="default",
        filter={"task": "shop.mail"},
        created_at=at,
        applied_at=at,
        reason="campaign off",
        changed=2,
    )
    try:
        call_command("migrate", verbosity=0)
    finally:
        call_command("migrate", verbosity=0)
    rows = [
        (s.kind, s.action, s.ids, s.filter, s.reason, s.changed, s.applied_at is not None)
        for s in Selection.objects.order_by("id")
    ]
    assert rows == [
        ("letters", "discard", [4, 5], {}, "", 0, False),
        ("jobs", "cancel", [7, 8, 9], {"task": "shop.mail"}, "campaign off", 2, True),
    ]


def _confirm_page(client, selection):
    page = client.get(f"/deadletters/selections/{selection.pk}/")
    assert page.status_code == 200
    return page.content.decode()


def test_the_letters_confirm_page_says_how_they_were_chosen_and_lists_them(client):
    operator = user_with_role("operator", "olga")
    client.force_login(operator)
    letters = DeadLetterFactory.create_batch(3, task_path="shop.send_receipt")
    filtered = services.freeze_selection(
        operator=operator,
        action="replay",
        ids=[dl.pk for dl in letters],
        filter={"job_type": "shop.send_receipt", "error_class": "TimeoutError"},
    )
    html = _confirm_page(client, filtered)
    assert "Chosen by the filter <code>job_type=shop.send_receipt</code>" in html
    assert "<code>error_class=TimeoutError</code>" in html
    assert "<h2>All 3</h2>" in html
    for letter in letters:  # each a link to its letter
        assert f'<a href="/deadletters/{letter.pk}/">{letter.pk}</a>' in html

    ticked = services.freeze_selection(operator=operator, action="discard", ids=[letters[0].pk])
    html = _confirm_page(client, ticked)
    assert "Chosen by ticking 1 row by hand." in html
    assert "<h2>The letter</h2>" in html


def test_a_replay_starts_at_the_rate_last_used_for_its_job_type(client):
    operator = user_with_role("operator", "olga")
    client.force_login(operator)

    def frozen(task_path):
        letter = DeadLetterFactory(task_path=task_path)
        return services.freeze_selection(operator=operator, action="replay", ids=[letter.pk])

    first = frozen("shop.send_receipt")
    assert 'name="rate" value' not in _confirm_page(client, first)  # nothing to go by: empty
    run = services.start_run(operator=operator, selection=first, reason="paced", rate=2.5)
    services.start_run(
        operator=operator, selection=frozen("shop.other"), reason="other task", rate=9.0
    )

    html = _confirm_page(client, frozen("shop.send_receipt"))
    assert 'name="rate" value="2.5"' in html
    assert f'the rate of run <a href="/deadletters/runs/{run.pk}/">#{run.pk}</a>' in html
    # A discard has no rate to fill in.
    discard = services.freeze_selection(
        operator=operator, action="discard", ids=[DeadLetterFactory(task_path="shop.x").pk]
    )
    assert 'name="rate"' not in _confirm_page(client, discard)
