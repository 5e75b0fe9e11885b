"""Issue 32: replaying dead letters to another queue than the one they died on, as SQS's redrive
offers a destination. One check (services.check_destination) for every door: the console's
confirm form, the API, `manage.py act confirm` and `manage.py deadletters replay`; the run keeps
its destination, the audit names it, the jobs go there through the one insert path and run from
there. Letters whose source replays them where they came from refuse the whole selection, and a
queue the console does not know is refused unless the operator says they mean a new one."""

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from deadletters import services
from deadletters.forms import ConfirmForm
from deadletters.models import ReplayItem, ReplayRun, Selection
from jobqueue import store
from jobqueue.models import AuditEntry, DeadLetter, DeadLetterState, Job, JobState, WorkerRecord
from jobqueue.store import sources
from jobqueue.worker import Worker
from tests.api.conftest import api_as
from tests.audit import entries
from tests.cli import row_counts, run
from tests.factories import DeadLetterFactory

from .conftest import user_with_role

pytestmark = pytest.mark.django_db

PREVIEW = reverse("deadletters:preview")


def serving(*queues, worker="web-1:7"):
    """A worker that takes from these queues (what makes a queue one the console knows)."""
    now = timezone.now()
    return WorkerRecord.objects.create(
        worker_id=worker, host="web-1", pid=7, queues=list(queues), concurrency=2,
        started_at=now, last_heartbeat_at=now,
    )  # fmt: skip


def letters(n=2, **fields):
    return DeadLetterFactory.create_batch(n, task_path="tests.tasks.noop", args=[1], **fields)


def freeze(operator, chosen, action="replay"):
    return services.freeze_selection(operator=operator, action=action, ids=[dl.pk for dl in chosen])


def nothing_written(chosen, before_entries=0):
    assert not ReplayRun.objects.exists()
    assert not Job.objects.filter(replayed_from__in=chosen).exists()
    assert AuditEntry.objects.filter(action="letters.replay").count() == before_entries
    assert {dl.state for dl in DeadLetter.objects.filter(pk__in=[d.pk for d in chosen])} == {
        DeadLetterState.PENDING
    }


# --- the sources' flag -------------------------------------------------------------------------


def test_only_job_letters_may_go_to_another_queue():
    assert {name: sources.replays_to_queue(name) for name in sources.BUILTIN} == {
        "jobqueue": True,
        "outbox": False,
        "django_q2": False,
        "rabbitmq": False,
        "sqs": False,
    }
    assert sources.replays_to_queue(sources.get("jobqueue"))
    assert not sources.replays_to_queue("no-such-source")


# --- the form ----------------------------------------------------------------------------------


def form(**data):
    return ConfirmForm({"reason": "fixed", **data})


def test_the_confirm_form_takes_a_queue_or_none():
    blank = form()
    assert blank.is_valid(), blank.errors
    assert (blank.cleaned_data["to_queue"], blank.cleaned_data["allow_unknown_queue"]) == (
        "",
        False,
    )
    chosen = form(to_queue="emails-slow", allow_unknown_queue="on")
    assert chosen.is_valid(), chosen.errors
    assert chosen.cleaned_data["to_queue"] == "emails-slow"
    assert chosen.cleaned_data["allow_unknown_queue"] is True


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("   ", "a queue name is 1 to 100 characters"),
        ("q" * 101, "at most 100 characters"),
        ("a\x00b", "Null characters are not allowed"),
        ("a\ud800", "no NUL"),
    ],
)
def test_the_confirm_form_refuses_what_is_no_queue_name(typed, why):
    refused = form(to_queue=typed)
    assert not refused.is_valid()
    assert why in " ".join(refused.errors["to_queue"])


# --- the one check -------------------------------------------------------------------------------


def test_no_queue_named_is_each_letters_own(operator):
    chosen = letters()
    assert services.check_destination("", ids=[dl.pk for dl in chosen]) == ""
    assert services.check_destination(None, ids=[dl.pk for dl in chosen]) == ""


def test_a_queue_a_worker_takes_from_or_a_setting_names_is_known(operator, settings):
    ids = [dl.pk for dl in letters()]
    serving("slow")
    assert services.check_destination("slow", ids=ids) == "slow"
    settings.REDRIVE = {**settings.REDRIVE, "RATE_LIMITS": {"throttled": 5}}
    assert services.check_destination("throttled", ids=ids) == "throttled"


def test_an_unknown_queue_is_refused_unless_the_operator_means_a_new_one(operator):
    ids = [dl.pk for dl in letters()]
    serving("emails")
    with pytest.raises(services.RefusedError) as refused:
        services.check_destination("emials", ids=ids)
    assert refused.value.code == "unknown_queue"
    assert "no queue 'emials' has jobs or is configured (did you mean 'emails'?" in str(
        refused.value
    )
    assert services.check_destination("emials", ids=ids, allow_unknown=True) == "emials"


def test_a_selection_with_letters_that_cannot_change_queue_is_refused_whole(operator):
    serving("slow")
    mixed = [*letters(2), DeadLetterFactory(source="django_q2"), DeadLetterFactory(source="outbox")]
    with pytest.raises(services.RefusedError) as refused:
        services.check_destination("slow", ids=[dl.pk for dl in mixed], allow_unknown=True)
    assert refused.value.code == "cannot_change_queue"
    assert str(refused.value) == (
        "Not replayed to slow: 1 letter of source django_q2, 1 letter of source outbox can only "
        "be replayed where they came from, and a selection goes to one place whole. Leave the "
        "queue empty, or select only jobqueue letters."
    )
    # Their own queues are still theirs to go back to.
    assert services.check_destination("", ids=[dl.pk for dl in mixed]) == ""


def test_a_queue_the_letters_backend_does_not_take_is_refused_even_when_allowed(settings):
    settings.TASKS = {
        "default": {
            "BACKEND": "jobqueue.backend.DatabaseBackend",
            "QUEUES": ["default", "slow"],
            "OPTIONS": {},
        }
    }
    ids = [dl.pk for dl in letters()]
    assert services.check_destination("slow", ids=ids) == "slow"  # its QUEUES name it
    with pytest.raises(services.RefusedError) as refused:
        services.check_destination("fast", ids=ids, allow_unknown=True)
    assert refused.value.code == "queue_not_allowed"
    assert "backend default takes only the queues default, slow" in str(refused.value)


def test_a_discard_goes_to_no_queue_and_a_bad_name_is_refused_in_the_service_too(operator):
    ids = [dl.pk for dl in letters()]
    serving("slow")
    with pytest.raises(services.RefusedError, match="A discard sends nothing"):
        services.check_destination("slow", ids=ids, action="discard")
    for bad in ("  ", "q" * 101, "a\x00b", 7):
        with pytest.raises(services.RefusedError) as refused:
            services.check_destination(bad, ids=ids)
        assert refused.value.code == "invalid_queue"


# --- the run, its jobs and the audit -------------------------------------------------------------


def test_a_run_to_a_queue_puts_its_jobs_there_and_the_letters_keep_their_own(operator):
    serving("slow")
    chosen = letters(3, queue_name="default")
    run = services.start_run(
        operator=operator, selection=freeze(operator, chosen), reason="slow lane", to_queue="slow"
    )
    assert (run.to_queue, run.done) == ("slow", 3)
    jobs = Job.objects.filter(replayed_from__in=chosen)
    assert sorted(jobs.values_list("queue_name", flat=True)) == ["slow"] * 3
    assert set(DeadLetter.objects.values_list("queue_name", "state")) == {("default", "replaying")}
    [(targets, actor, channel, reason, params)] = entries("letters.replay")
    assert (targets, actor, channel, reason) == (
        [str(run.selection_id)],
        "operator",
        "code",
        "slow lane",
    )
    assert params["to_queue"] == "slow"
    assert "allow_unknown_queue" not in params


def test_a_run_without_a_queue_records_none(operator):
    chosen = letters(1, queue_name="mail")
    run = services.start_run(operator=operator, selection=freeze(operator, chosen), reason="back")
    assert run.to_queue == ""
    assert Job.objects.get(replayed_from=chosen[0]).queue_name == "mail"
    [(*_, params)] = entries("letters.replay")
    assert "to_queue" not in params


def test_a_new_queue_the_operator_allowed_is_audited_as_allowed(operator):
    chosen = letters(1)
    with pytest.raises(services.RefusedError):
        services.start_run(
            operator=operator, selection=freeze(operator, chosen), reason="x", to_queue="brand-new"
        )
    nothing_written(chosen)
    run = services.start_run(
        operator=operator,
        selection=freeze(operator, chosen),
        reason="new lane",
        to_queue="brand-new",
        allow_unknown_queue=True,
    )
    assert Job.objects.get(replayed_from=chosen[0]).queue_name == "brand-new"
    [(*_, params)] = entries("letters.replay")
    assert (params["run"], params["to_queue"], params["allow_unknown_queue"]) == (
        run.pk,
        "brand-new",
        True,
    )


def test_a_mixed_selection_writes_nothing_at_all(operator):
    serving("slow")
    mixed = [*letters(2), DeadLetterFactory(source="django_q2")]
    with pytest.raises(services.RefusedError) as refused:
        services.start_run(
            operator=operator, selection=freeze(operator, mixed), reason="x", to_queue="slow"
        )
    assert refused.value.code == "cannot_change_queue"
    nothing_written(mixed)
    assert not ReplayItem.objects.exists()


def test_a_background_run_sends_every_batch_there(operator, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REPLAY_BATCH_SIZE": 2}
    serving("slow")
    chosen = letters(5)
    run = services.start_run(
        operator=operator,
        selection=freeze(operator, chosen),
        reason="slow lane",
        to_queue="slow",
        background=False,
    )
    services.carry_out(run.pk, run.generation)
    run.refresh_from_db()
    assert (run.state, run.done, run.batches) == ("finished", 5, 3)
    assert set(
        Job.objects.filter(replayed_from__in=chosen).values_list("queue_name", flat=True)
    ) == {"slow"}


def test_a_run_awaiting_approval_goes_to_its_queue_once_approved(operator, settings):
    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": 1}
    serving("slow")
    chosen = letters(2)
    run = services.start_run(
        operator=operator, selection=freeze(operator, chosen), reason="slow lane", to_queue="slow"
    )
    assert run.state == "awaiting" and not Job.objects.filter(replayed_from__in=chosen).exists()
    services.approve(run, operator=user_with_role("operator", "second"))
    assert set(
        Job.objects.filter(replayed_from__in=chosen).values_list("queue_name", flat=True)
    ) == {"slow"}


def test_the_store_skips_letters_whose_source_keeps_their_place():
    job_letter = letters(1)[0]
    outbox_letter = DeadLetterFactory(source="outbox")
    done = store.replay([job_letter.pk, outbox_letter.pk], to_queue="slow")
    assert list(done.done) == [job_letter.pk]
    assert done.skipped == {
        outbox_letter.pk: "letters of source 'outbox' are replayed where they came from, not to a "
        "queue"
    }
    assert done.done[job_letter.pk].queue_name == "slow"
    with pytest.raises(ValueError, match="a queue name is 1 to 100 characters"):
        store.replay([job_letter.pk], to_queue=" ")


@pytest.mark.django_db(transaction=True)
def test_the_replayed_job_runs_from_the_new_queue_and_not_from_the_old():
    operator = user_with_role("operator")
    serving("slow")
    [letter] = letters(1, queue_name="default")
    run = services.start_run(
        operator=operator, selection=freeze(operator, [letter]), reason="slow lane", to_queue="slow"
    )
    job = Job.objects.get(replayed_from=letter)
    # A worker of the letter's own queue leaves it alone; one of the new queue runs it.
    Worker(burst=True, concurrency=1, queues=["default"]).run()
    job.refresh_from_db()
    assert job.state == JobState.READY
    Worker(burst=True, concurrency=1, queues=["slow"]).run()
    job.refresh_from_db()
    letter.refresh_from_db()
    assert (job.state, job.queue_name) == (JobState.DONE, "slow")
    assert (letter.state, letter.queue_name) == (DeadLetterState.REPLAYED, "default")
    assert run.items.select_related("job").get().job_outcome == "done"


# --- the console ---------------------------------------------------------------------------------


def confirm_url(client, chosen):
    return client.post(PREVIEW, {"action": "replay", "ids": [dl.pk for dl in chosen]})["Location"]


def test_the_confirm_page_offers_a_queue_and_shows_the_letters_own(operator_client):
    chosen = [*letters(2, queue_name="mail"), *letters(1, queue_name="default")]
    page = operator_client.get(confirm_url(operator_client, chosen)).content.decode()
    assert 'name="to_queue"' in page and 'name="allow_unknown_queue"' in page
    assert re.search(
        r"Each to its own queue: <code>mail</code> \(2\), <code>default</code> \(1\)", page
    )
    assert 'class="to-queue"' not in page


def test_the_console_refuses_an_unknown_queue_beside_its_field_then_allows_it(operator_client):
    chosen = letters(2)
    url = confirm_url(operator_client, chosen)
    refused = operator_client.post(url, {"reason": "new lane", "to_queue": "fresh"})
    assert refused.status_code == 400
    [why] = refused.context["form"].errors["to_queue"]
    assert why.startswith("Not replayed: no queue 'fresh' has jobs or is configured (known: ")
    assert why.endswith("To send them there anyway, tick “Send them to a new queue”.")
    page = refused.content.decode()
    assert re.search(r'replayed to queue <strong class="to-queue">fresh</strong> \(refused', page)
    nothing_written(chosen)
    done = operator_client.post(
        url, {"reason": "new lane", "to_queue": "fresh", "allow_unknown_queue": "on"}
    )
    run = ReplayRun.objects.get()
    assert done["Location"] == reverse("deadletters:run", args=[run.pk])
    assert run.to_queue == "fresh"
    run_page = operator_client.get(done["Location"]).content.decode()
    assert re.search(r'to queue <code class="to-queue">fresh</code>', run_page)
    [(*_, channel, _reason, params)] = entries("letters.replay")
    assert (channel, params["to_queue"], params["allow_unknown_queue"]) == (
        "console",
        "fresh",
        True,
    )


def test_a_mixed_selection_hides_the_queue_and_refuses_one_sent_anyway(operator_client):
    serving("slow")
    mixed = [*letters(1), DeadLetterFactory(source="django_q2")]
    url = confirm_url(operator_client, mixed)
    page = operator_client.get(url).content.decode()
    assert 'name="to_queue"' not in page
    assert "1 of these letters is replayed where it came from" in page
    forged = operator_client.post(url, {"reason": "x", "to_queue": "slow"})
    assert forged.status_code == 400
    assert "can only be replayed where they came from" in forged.content.decode()
    nothing_written(mixed)


def test_a_discard_has_no_queue_to_choose(operator_client):
    chosen = letters(1)
    url = operator_client.post(PREVIEW, {"action": "discard", "ids": [chosen[0].pk]})["Location"]
    assert 'name="to_queue"' not in operator_client.get(url).content.decode()
    serving("slow")
    forged = operator_client.post(url, {"reason": "x", "to_queue": "slow"})
    assert forged.status_code == 400
    assert "A discard sends nothing to a queue" in forged.content.decode()
    assert not ReplayRun.objects.exists()


def test_a_run_page_of_a_replay_to_its_own_queues_says_so(operator_client):
    chosen = letters(1)
    operator_client.post(confirm_url(operator_client, chosen), {"reason": "back"})
    run = ReplayRun.objects.get()
    page = operator_client.get(reverse("deadletters:run", args=[run.pk])).content.decode()
    assert '<dd class="destination">each letter\'s own queue</dd>' in page


# --- the API -------------------------------------------------------------------------------------


@pytest.fixture
def api(db):
    return api_as(user_with_role("operator"))


def frozen(api, chosen):
    response = api.post("actions/letters.replay", {"ids": [dl.pk for dl in chosen]})
    assert response.status_code == 201, response.content
    return response.json()


def test_the_api_replays_to_a_queue_and_says_so(api):
    serving("slow")
    chosen = letters(2, queue_name="mail")
    shown = frozen(api, chosen)
    assert (shown["queues"], shown["can_change_queue"]) == (
        [{"queue": "mail", "count": 2, "paused": False}],
        True,
    )
    response = api.post(
        f"selections/{shown['selection']}/confirm", {"reason": "slow lane", "to_queue": "slow"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["to_queue"], body["message"]) == (
        "slow",
        f"Run #{body['run']}, to queue slow has started.",
    )
    assert api.get(f"runs/{body['run']}").json()["to_queue"] == "slow"
    assert set(
        Job.objects.filter(replayed_from__in=chosen).values_list("queue_name", flat=True)
    ) == {"slow"}
    [(_, actor, channel, _, params)] = entries("letters.replay")
    assert (actor, channel, params["to_queue"]) == ("operator", "api", "slow")


def test_the_api_names_each_refusal_of_a_queue(api):
    chosen = letters(1)
    shown = frozen(api, chosen)
    confirm = f"selections/{shown['selection']}/confirm"
    unknown = api.post(confirm, {"reason": "x", "to_queue": "nowhere"})
    assert unknown.status_code == 409
    assert unknown.json()["code"] == "unknown_queue"
    assert "no queue 'nowhere'" in unknown.json()["detail"]
    # Longer than the document allows: the API's door refuses it (the form would too).
    bad = api.post(confirm, {"reason": "x", "to_queue": "q" * 101})
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_field")
    assert bad.json()["detail"].startswith("Nothing changed: to_queue: at most 100 characters")
    blank = api.post(confirm, {"reason": "x", "to_queue": " "})
    assert blank.status_code == 400 and "to_queue" in blank.json()["errors"]
    nothing_written(chosen)
    allowed = api.post(confirm, {"reason": "x", "to_queue": "nowhere", "allow_unknown_queue": True})
    assert allowed.status_code == 200, allowed.content
    assert Job.objects.get(replayed_from=chosen[0]).queue_name == "nowhere"


def test_the_api_refuses_letters_that_cannot_change_queue_with_a_code(api):
    serving("slow")
    mixed = [*letters(1), DeadLetterFactory(source="django_q2")]
    shown = frozen(api, mixed)
    assert shown["can_change_queue"] is False
    response = api.post(
        f"selections/{shown['selection']}/confirm", {"reason": "x", "to_queue": "slow"}
    )
    assert response.status_code == 409
    assert response.json()["code"] == "cannot_change_queue"
    assert "can only be replayed where they came from" in response.json()["detail"]
    nothing_written(mixed)


# --- the command line ----------------------------------------------------------------------------


def test_act_confirm_takes_to_queue(operator):
    serving("slow")
    chosen = letters(2)
    freezing = run(
        "act", "letters.replay", "--ids", *[str(dl.pk) for dl in chosen], "--operator", "operator"
    )
    assert freezing.code == 0, freezing
    assert "their own queues: default=2" in freezing.out
    assert "[--to-queue QUEUE]" in freezing.out
    selection = Selection.objects.get()
    before = row_counts()
    unknown = run(
        "act",
        "confirm",
        str(selection.pk),
        "--reason",
        "x",
        "--to-queue",
        "nowhere",
        "--operator",
        "operator",
    )
    assert unknown.refused_cleanly, unknown
    assert "no queue 'nowhere'" in unknown.err and "give --allow-unknown-queue" in unknown.err
    assert row_counts() == before
    done = run(
        "act",
        "confirm",
        str(selection.pk),
        "--reason",
        "slow lane",
        "--to-queue",
        "slow",
        "--operator",
        "operator",
    )
    assert done.code == 0, done
    assert "to queue slow has started" in done.out
    assert ReplayRun.objects.get().to_queue == "slow"
    assert set(
        Job.objects.filter(replayed_from__in=chosen).values_list("queue_name", flat=True)
    ) == {"slow"}
    [(*_, channel, _reason, params)] = entries("letters.replay")
    assert (channel, params["to_queue"]) == ("cli", "slow")


def test_deadletters_replay_takes_to_queue(operator):
    serving("slow")
    chosen = letters(2)
    ids = [str(dl.pk) for dl in chosen]
    argv = ["deadletters", "replay", *ids, "--reason", "slow lane", "--operator", "operator"]
    dry = run(*argv, "--to-queue", "slow", "--dry-run")
    assert dry.code == 0, dry
    assert "2 to replay to queue slow" in dry.out
    assert not ReplayRun.objects.exists()
    done = run(*argv, "--to-queue", "slow")
    assert done.code == 0, done
    assert "2 replayed to queue slow" in done.out
    assert ReplayRun.objects.get().to_queue == "slow"
    assert set(
        Job.objects.filter(replayed_from__in=chosen).values_list("queue_name", flat=True)
    ) == {"slow"}


def test_deadletters_replay_refuses_before_its_preview(operator):
    chosen = letters(1)
    mixed = [*chosen, DeadLetterFactory(source="django_q2")]
    serving("slow")
    before = row_counts()
    for extra, why in (
        ([str(mixed[1].pk), "--to-queue", "slow"], "can only be replayed where they came from"),
        (["--to-queue", "nowhere"], "no queue 'nowhere'"),
        (["--to-queue", " "], "a queue name is 1 to 100 characters"),
    ):
        refused = run(
            "deadletters",
            "replay",
            str(chosen[0].pk),
            *extra,
            "--reason",
            "x",
            "--operator",
            "operator",
        )
        assert refused.refused_cleanly, refused
        assert why in refused.err
    assert row_counts() == before
    allowed = run(
        "deadletters", "replay", str(chosen[0].pk), "--to-queue", "nowhere",
        "--allow-unknown-queue", "--reason", "new lane", "--operator", "operator",
    )  # fmt: skip
    assert allowed.code == 0, allowed
    assert Job.objects.get(replayed_from=chosen[0]).queue_name == "nowhere"
    [(*_, params)] = entries("letters.replay")
    assert params["allow_unknown_queue"] is True


# --- a paused destination: allowed, and said -------------------------------------------------


def pause(queue):
    store.queues.pause(queue, actor="ann", reason="provider down", allow_unknown=True)


def test_the_api_preview_and_answer_say_a_paused_own_queue(api):
    chosen = letters(2, queue_name="mail")
    pause("mail")
    shown = frozen(api, chosen)
    assert shown["queues"] == [{"queue": "mail", "count": 2, "paused": True}]
    response = api.post(f"selections/{shown['selection']}/confirm", {"reason": "retry"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["paused_queues"] == ["mail"]
    assert body["message"].endswith(
        "Queue mail is paused: the replayed jobs wait there until it is resumed."
    )
    assert set(
        Job.objects.filter(replayed_from__in=chosen).values_list("queue_name", flat=True)
    ) == {"mail"}


def test_the_api_answer_says_a_paused_destination_and_not_a_running_one(api):
    serving("slow", "fast")
    pause("slow")
    for queue, said in (("slow", ["slow"]), ("fast", [])):
        shown = frozen(api, letters(1, queue_name="mail"))
        body = api.post(
            f"selections/{shown['selection']}/confirm", {"reason": "x", "to_queue": queue}
        ).json()
        assert body["paused_queues"] == said, body
        assert ("is paused" in body["message"]) == bool(said)


def test_the_console_preview_and_confirm_say_a_paused_queue(operator_client):
    chosen = letters(2, queue_name="mail")
    pause("mail")
    url = confirm_url(operator_client, chosen)
    page = operator_client.get(url).content.decode()
    assert '<code>mail</code> (2) <span class="paused">paused</span>' in page
    assert "Queue <code>mail</code> is paused (by ann)" in page
    done = operator_client.post(url, {"reason": "retry", "rate": 0, "canary_size": 0}, follow=True)
    assert "Queue mail is paused" in done.content.decode()


def test_a_queue_name_is_one_queue_in_nfc_and_nfd():
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert store.queues.checked_name(decomposed) == composed
    assert store.queues.checked_name("x" * 99 + "e\u0301") == "x" * 99 + "\u00e9"
    with pytest.raises(ValueError, match="1 to 100 characters"):
        store.queues.checked_name("x" * 100 + "e\u0301")
    assert store.queues.pause(decomposed, actor="ann", reason="x", allow_unknown=True)
    assert not store.queues.pause(composed, actor="ann", reason="x", allow_unknown=True)
    assert list(store.queues.paused()) == [composed]
    assert store.queues.resume(decomposed, actor="ann", reason="x")


def test_a_replay_to_a_decomposed_name_goes_to_the_composed_queue(api):
    serving("caf\u00e9")
    shown = frozen(api, letters(1))
    body = api.post(
        f"selections/{shown['selection']}/confirm", {"reason": "x", "to_queue": "cafe\u0301"}
    ).json()
    assert body["to_queue"] == "caf\u00e9", body
