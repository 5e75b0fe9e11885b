"""Issue 18, items 4 and 5: edit a dead letter's payload before replaying it (audited, with a
diff), and the two-person rule for runs over REDRIVE["APPROVAL_THRESHOLD"] items."""

import json
import re

import pytest
from django.apps import apps
from django.core import checks
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from deadletters import conf, redaction, services
from deadletters.models import (
    PayloadEdit,
    ReplayItem,
    ReplayRun,
    RunState,
)
from jobqueue import store
from jobqueue.models import AuditEntry, DeadLetter, Job, JobState
from jobqueue.worker import Worker
from tests.audit import entries, run_events
from tests.cli import run as run_command
from tests.factories import DeadLetterFactory, JobFactory

from .conftest import logged_in, user_with_role

pytestmark = pytest.mark.django_db

ADD = "tests.tasks.add"  # add(a, b)
PREVIEW = reverse("deadletters:preview")
AUDIT = reverse("deadletters:audit")


def edit_url(letter):
    return reverse("deadletters:edit", args=[letter.pk])


def detail_url(letter):
    return reverse("deadletters:detail", args=[letter.pk])


def approve_url(run):
    return reverse("deadletters:run-approve", args=[run.pk])


def run_url(run):
    return reverse("deadletters:run", args=[run.pk])


def snapshot():
    """Every row of the queue's and the console's tables."""
    return {
        model._meta.label: list(model.objects.order_by("pk").values_list())
        for label in ("jobqueue", "deadletters")
        for model in apps.get_app_config(label).get_models()
    }


def no_negatives(args, kwargs):
    """A payload validator (REDRIVE["PAYLOAD_VALIDATORS"]) for tests.tasks.add."""
    if any(isinstance(n, int) and n < 0 for n in [*args, *kwargs.values()]):
        raise ValueError("amounts must not be negative")
    if kwargs.get("b") == 13:
        raise ValidationError("13 is unlucky")


@pytest.fixture
def letter(db):
    return DeadLetterFactory(task_path=ADD, args=[1, 2], kwargs={})


@pytest.fixture
def chief(admin_operator):  # the admin role: edit, reveal, poison
    return admin_operator


def form(args, kwargs, reason="amount was in cents", **extra):
    return {"args": json.dumps(args), "kwargs": json.dumps(kwargs), "reason": reason, **extra}


# --- edit before replay: the service ---------------------------------------------------------


def test_edit_replays_the_new_payload_and_the_letter_keeps_its_own(chief, letter):
    edit = services.edit_and_replay(
        operator=chief, dead_letter_id=letter.pk, args=[3], kwargs={"b": 4}, reason="cents"
    )
    job = Job.objects.get(replayed_from=letter)
    assert (job.args, job.kwargs, job.state) == ([3], {"b": 4}, JobState.READY)
    # Everything else a replay keeps.
    assert (job.task_path, job.queue_name, job.idempotency_key, job.max_attempts) == (
        letter.task_path,
        letter.queue_name,
        letter.idempotency_key,
        letter.max_attempts,
    )
    letter.refresh_from_db()
    assert (letter.args, letter.kwargs) == ([1, 2], {})  # never overwritten
    assert (letter.state, letter.replays, letter.replay_job_id) == ("replaying", 1, job.pk)
    assert (edit.old_args, edit.old_kwargs, edit.new_args, edit.new_kwargs) == (
        [1, 2],
        {},
        [3],
        {"b": 4},
    )
    assert (edit.job_id, edit.operator_name, edit.reason) == (job.pk, "chief", "cents")
    # The audit a replay writes: a one-item run and its ledger row, naming the edit.
    run = ReplayRun.objects.get()
    assert (run.state, run.requested, run.done, run.operator_name, run.reason) == (
        RunState.FINISHED,
        1,
        1,
        "chief",
        "cents",
    )
    assert run.filter == {"payload_edit": edit.pk}
    item = ReplayItem.objects.get()
    assert (item.run_id, item.dead_letter_id, item.outcome, item.job_id) == (
        run.pk,
        letter.pk,
        "replayed",
        job.pk,
    )


@pytest.mark.django_db(transaction=True)
def test_the_edited_job_runs_with_the_new_payload_and_settles_the_letter():
    chief = user_with_role("admin", "chief")
    letter = DeadLetterFactory(task_path=ADD, args=["a"], kwargs={"b": None})  # died: str + None
    services.edit_and_replay(
        operator=chief, dead_letter_id=letter.pk, args=[2], kwargs={"b": 5}, reason="typed"
    )
    Worker(burst=True, concurrency=1).run()
    job = Job.objects.get(replayed_from=letter)
    assert (job.state, job.return_value) == (JobState.DONE, 7)
    letter.refresh_from_db()
    assert (letter.state, letter.args, letter.kwargs) == ("replayed", ["a"], {"b": None})


def test_the_new_job_keeps_its_place_in_the_ordering_key(chief):
    original = JobFactory(
        task_path=ADD, dead=True, ordering_key="customer:1", ordering_on_dead="block"
    )
    letter = DeadLetterFactory(task_path=ADD, job=original, args=[1, 2])
    services.edit_and_replay(
        operator=chief, dead_letter_id=letter.pk, args=[1, 3], kwargs={}, reason="fix"
    )
    job = Job.objects.get(replayed_from=letter)
    assert (job.ordering_key, job.ordering_position) == ("customer:1", original.pk)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ({"a": 1}, {}, "args must be a JSON array"),
        ([1], [2], "kwargs a JSON object"),
        (["a\x00b"], {"b": 1}, "NUL"),
        (["\udcff"], {"b": 1}, "lone surrogate"),
        ([1, 2, 3], {}, "does not take these arguments"),
        ([1], {"c": 2}, "does not take these arguments"),
        ([-1], {"b": 1}, "amounts must not be negative"),  # the validator hook
        ([1], {"b": 13}, "13 is unlucky"),  # a ValidationError from it
        ([1, 2], {}, "unchanged"),
        (["••••"], {"b": 1}, "is the mask"),
    ],
)
def test_a_refused_edit_says_why_and_writes_nothing(chief, letter, settings, args, kwargs, message):
    settings.REDRIVE = {
        **settings.REDRIVE,
        "PAYLOAD_VALIDATORS": {ADD: "tests.deadletters.test_edit_and_approval.no_negatives"},
    }
    before = snapshot()
    with pytest.raises(services.RefusedError, match=re.escape(message)):
        services.edit_and_replay(
            operator=chief, dead_letter_id=letter.pk, args=args, kwargs=kwargs, reason="try"
        )
    assert snapshot() == before


def test_an_oversized_payload_is_refused(chief, letter, settings):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_PAYLOAD_BYTES": 100}
    with pytest.raises(services.RefusedError, match="over the 100-byte limit"):
        services.edit_and_replay(
            operator=chief, dead_letter_id=letter.pk, args=["x" * 200], kwargs={}, reason="big"
        )
    assert not PayloadEdit.objects.exists() and not Job.objects.filter(replayed_from=letter)


def test_a_task_that_no_longer_imports_is_refused(chief):
    letter = DeadLetterFactory(task_path="tests.tasks.renamed_long_ago", args=[1])
    with pytest.raises(services.RefusedError, match="cannot load task"):
        services.edit_and_replay(
            operator=chief, dead_letter_id=letter.pk, args=[2], kwargs={}, reason="r"
        )


def test_the_validator_hook_accepts_what_it_does_not_refuse(chief, letter, settings):
    settings.REDRIVE = {
        **settings.REDRIVE,
        "PAYLOAD_VALIDATORS": {ADD: "tests.deadletters.test_edit_and_approval.no_negatives"},
    }
    edit = services.edit_and_replay(
        operator=chief, dead_letter_id=letter.pk, args=[5], kwargs={"b": 6}, reason="ok"
    )
    assert edit.job.args == [5]


@pytest.mark.parametrize(
    ("traits", "message"),
    [
        ({"replayed": True}, "already replayed successfully"),
        ({"replaying": True}, "an earlier replay is still pending"),
        ({"discarded": True}, "discarded"),
        ({"replays": 3}, "poison limit"),
        ({"source": "outbox"}, "replayed as they are, not edited"),
    ],
)
def test_only_a_pending_letter_of_our_jobs_is_edited(chief, traits, message):
    letter = DeadLetterFactory(task_path=ADD, args=[1, 2], **traits)
    before = snapshot()
    with pytest.raises(services.RefusedError, match=message):
        services.edit_and_replay(
            operator=chief, dead_letter_id=letter.pk, args=[2, 2], kwargs={}, reason="r"
        )
    assert snapshot() == before


def test_past_the_poison_limit_only_when_allowed(chief):
    letter = DeadLetterFactory(task_path=ADD, args=[1, 2], replays=3)
    edit = services.edit_and_replay(
        operator=chief,
        dead_letter_id=letter.pk,
        args=[2, 2],
        kwargs={},
        reason="r",
        allow_poisoned=True,
    )
    assert edit.job is not None and ReplayRun.objects.get().allow_poisoned


def test_a_live_job_holding_the_key_refuses_the_edit(chief, letter):
    JobFactory(task_path=ADD, idempotency_key=letter.idempotency_key)
    before = snapshot()
    with pytest.raises(services.RefusedError, match="already holds its idempotency key"):
        services.edit_and_replay(
            operator=chief, dead_letter_id=letter.pk, args=[2, 2], kwargs={}, reason="r"
        )
    assert snapshot() == before


def test_the_store_replays_an_edit_only_through_a_source_that_can(letter):
    outbox = DeadLetterFactory(source="outbox", task_path="orders.created", args=[])
    resolution = store.replay_edited(outbox.pk, args=[1], kwargs={})
    assert resolution.skipped == {
        outbox.pk: "letters of source 'outbox' are replayed as they are, not edited"
    }
    with pytest.raises(TypeError):
        store.replay_edited(letter.pk, args={"a": 1}, kwargs={})
    with pytest.raises(ValueError, match="NUL"):
        store.replay_edited(letter.pk, args=["\x00"], kwargs={})
    assert store.replay_edited(letter.pk, args=[7, 8], kwargs={}).done[letter.pk].args == [7, 8]


# --- masked values ---------------------------------------------------------------------------


@pytest.fixture
def secret_letter(db):
    return DeadLetterFactory(
        task_path=ADD, args=[1], kwargs={"b": {"api_token": "s3cret-t0ken", "amount": 5}}
    )


def test_the_edit_page_shows_masked_values_and_a_kept_mask_keeps_its_value(chief, secret_letter):
    client = logged_in(chief)
    page = client.get(edit_url(secret_letter)).content.decode()
    assert "s3cret-t0ken" not in page and "••••" in page
    response = client.post(
        edit_url(secret_letter),
        form([1], {"b": {"api_token": "••••", "amount": 6}}, reason="amount fixed"),
    )
    assert response.status_code == 302, response.content.decode()
    job = Job.objects.get(replayed_from=secret_letter)
    assert job.kwargs == {"b": {"api_token": "s3cret-t0ken", "amount": 6}}  # never the mask
    # The diff is masked like the payload: the token stays hidden, the amount's change shows.
    page = client.get(detail_url(secret_letter)).content.decode()
    assert "s3cret-t0ken" not in page
    assert re.search(r'class="del">-\s+&quot;amount&quot;: 5', page)
    assert re.search(r'class="add">\+\s+&quot;amount&quot;: 6', page)


def test_a_changed_secret_shows_as_changed_and_only_a_reveal_shows_it(chief, secret_letter):
    redaction.record_reveal(chief, secret_letter, via="edit")  # replacing a mask takes one
    services.edit_and_replay(
        operator=chief,
        dead_letter_id=secret_letter.pk,
        args=[1],
        kwargs={"b": {"api_token": "n3w-t0ken", "amount": 5}},
        reason="rotated",
    )
    client = logged_in(chief)
    page = client.get(detail_url(secret_letter)).content.decode()
    assert "n3w-t0ken" not in page and "s3cret-t0ken" not in page
    assert "•••• (changed)" in page
    # The audit log names the place that changed, never a value.
    audit = client.get(AUDIT).content.decode()
    assert "n3w-t0ken" not in audit and "s3cret-t0ken" not in audit
    [(_, _, _, _, params)] = entries("letter.edit_replay")
    assert params["changed"] == ["kwargs['b']['api_token']"]
    revealed = client.post(reverse("deadletters:reveal", args=[secret_letter.pk]))
    page = revealed.content.decode()
    assert "n3w-t0ken" in page and "s3cret-t0ken" in page
    assert [params["via"] for *_, params in entries("letter.reveal")] == ["edit", "console"]


def test_a_mask_whose_place_moved_is_refused(chief, secret_letter):
    """Lists of another length on the way: its original cannot be told, so never guessed."""
    with pytest.raises(
        services.RefusedError, match=r"kwargs\['b'\]\['other'\]\['api_token'\] is the mask"
    ):
        services.edit_and_replay(
            operator=chief,
            dead_letter_id=secret_letter.pk,
            args=[1],
            kwargs={"b": {"note": "x", "other": {"api_token": "••••"}}},
            reason="r",
        )
    letter = DeadLetterFactory(task_path=ADD, args=[[{"token": "a"}, {"token": "b"}]])
    with pytest.raises(services.RefusedError, match=r"args\[0\]\[0\]\['token'\] is the mask"):
        services.edit_and_replay(
            operator=chief,
            dead_letter_id=letter.pk,
            args=[[{"token": "••••"}]],  # the first element deleted: which token is this?
            kwargs={"b": 1},
            reason="r",
        )
    assert not Job.objects.filter(replayed_from__isnull=False).exists()


def test_show_masked_values_on_the_edit_page_needs_the_permission_and_is_recorded(
    chief, secret_letter
):
    client = logged_in(chief)
    page = client.post(edit_url(secret_letter), {"reveal": "1"}).content.decode()
    assert "s3cret-t0ken" in page and "recorded in the audit" in page
    assert entries("letter.reveal") == [
        (
            [str(secret_letter.pk)],
            "chief",
            "console",
            "",
            {"via": "edit", "task_path": secret_letter.task_path},
        )
    ]
    # An editor without the reveal permission edits masked and cannot unmask.
    editor = user_with_role("operator", "editor")
    editor.user_permissions.add(_permission("edit_deadletter"))
    client = logged_in(editor)
    page = client.get(edit_url(secret_letter)).content.decode()
    assert "Show masked values" not in page and "s3cret-t0ken" not in page
    assert client.post(edit_url(secret_letter), {"reveal": "1"}).status_code == 403
    assert len(entries("letter.reveal")) == 1


def _permission(codename):
    from django.contrib.auth.models import Permission

    return Permission.objects.get(content_type__app_label="deadletters", codename=codename)


# --- masked values are no oracle to an editor who may not see them --------------------------


@pytest.fixture
def blind_editor(db):
    """May edit and replay, may not see masked values (no deadletters.view_secrets)."""
    editor = user_with_role("operator", "editor")
    editor.user_permissions.add(_permission("edit_deadletter"))
    return editor


def refusal(operator, letter, args, kwargs) -> str:
    """The refusal of this edit by `operator`, checking that it wrote nothing."""
    before = snapshot()
    with pytest.raises(services.RefusedError) as refused:
        services.edit_and_replay(
            operator=operator, dead_letter_id=letter.pk, args=args, kwargs=kwargs, reason="r"
        )
    assert snapshot() == before
    return str(refused.value)


def test_a_guess_typed_over_a_mask_is_refused_alike_right_or_wrong(blind_editor, secret_letter):
    """The right guess said "the payload is unchanged", a wrong one was replayed (and its diff
    said "changed"): either way the secret's value was confirmed or ruled out."""
    right, wrong = (
        refusal(blind_editor, secret_letter, [1], {"b": {"api_token": guess, "amount": 5}})
        for guess in ("s3cret-t0ken", "wrong-guess")
    )
    assert right == wrong
    assert right.startswith("kwargs['b']['api_token'] is masked: leave it as shown (••••)")
    assert "view_secrets" in right


def test_an_editor_who_may_not_see_a_mask_may_keep_or_remove_it(blind_editor, secret_letter):
    masked = {"b": {"api_token": "••••", "amount": 5}}
    assert "unchanged" in refusal(blind_editor, secret_letter, [1], masked)
    services.edit_and_replay(
        operator=blind_editor,
        dead_letter_id=secret_letter.pk,
        args=[1],
        kwargs={"b": {"amount": 6}},
        reason="token dropped",
    )
    assert Job.objects.get(replayed_from=secret_letter).kwargs == {"b": {"amount": 6}}


def test_the_size_limit_names_no_size_when_masked_values_are_inside(
    blind_editor, chief, secret_letter, settings
):
    """The size of the payload with its masks put back gave away the secret's length."""
    settings.REDRIVE = {**settings.REDRIVE, "MAX_PAYLOAD_BYTES": 60}
    masked = {"b": {"api_token": "••••", "amount": "x" * 30}}
    for operator in (blind_editor, chief):
        message = refusal(operator, secret_letter, [1], masked)
        assert "over the 60-byte limit" in message and not re.search(r"\d+ bytes", message)
    redaction.record_reveal(chief, secret_letter, via="edit")  # its values, typed back in
    revealed = {"b": {"api_token": "s3cret-t0ken", "amount": "x" * 30}}
    message = refusal(chief, secret_letter, [1], revealed)
    assert re.search(r"payload is \d+ bytes, over the 60-byte limit", message)


def quotes_the_payload(args, kwargs):
    """A payload validator that quotes what it refuses, as JSON (escaped: \" and \\u00e9)."""
    raise ValueError(f"refused {json.dumps(kwargs)}")


@pytest.mark.parametrize("validator", ["quotes_the_payload", "no_negatives"])
def test_a_validator_refusal_is_worded_as_for_the_payload_with_its_masks_in_place(
    blind_editor, chief, settings, validator
):
    """A message quoting the payload as JSON escaped the secret past the search for its text."""
    settings.REDRIVE = {
        **settings.REDRIVE,
        "PAYLOAD_VALIDATORS": {ADD: f"tests.deadletters.test_edit_and_approval.{validator}"},
    }
    letter = DeadLetterFactory(task_path=ADD, args=[1], kwargs={"b": {"token": 'to"k\u00e9n-9'}})
    masked = ([-1], {"b": {"token": "••••"}})
    blind, chief_masked = refusal(blind_editor, letter, *masked), refusal(chief, letter, *masked)
    assert blind == chief_masked and "n-9" not in blind
    if validator == "quotes_the_payload":
        assert '{"b": {"token": "\\u2022\\u2022\\u2022\\u2022"}}' in blind
    else:
        assert "amounts must not be negative" in blind
    redaction.record_reveal(chief, letter, via="edit")
    revealed = refusal(chief, letter, [-1], {"b": {"token": 'to"k\u00e9n-9'}})
    assert "k\\u00e9n-9" in revealed or "amounts must not be negative" in revealed


def test_replacing_a_masked_value_takes_a_recorded_reveal_of_it(chief, secret_letter):
    """The permission alone is not enough: a guess confirmed by "unchanged" is a reveal that
    the audit does not record."""
    rotated = {"b": {"api_token": "n3w-t0ken", "amount": 5}}
    assert "is masked" in refusal(chief, secret_letter, [1], rotated)
    redaction.record_reveal(chief, secret_letter, via="edit")
    services.edit_and_replay(
        operator=chief, dead_letter_id=secret_letter.pk, args=[1], kwargs=rotated, reason="r"
    )
    assert Job.objects.get(replayed_from=secret_letter).kwargs == rotated


def test_a_mask_in_a_header_pair_is_kept_only_under_its_own_name(chief):
    letter = DeadLetterFactory(
        task_path=ADD, args=[1], kwargs={"b": [["Authorization", "Bearer hdr-1"], ["Accept", "*"]]}
    )
    renamed = {"b": [["X-Note", "••••"], ["Accept", "*"]]}
    message = refusal(chief, letter, [1], renamed)
    assert message.startswith("kwargs['b'][0][1] keeps a masked value")
    services.edit_and_replay(
        operator=chief,
        dead_letter_id=letter.pk,
        args=[2],
        kwargs={"b": [["Authorization", "••••"], ["Accept", "*"]]},
        reason="r",
    )
    assert Job.objects.get(replayed_from=letter).kwargs["b"][0] == ["Authorization", "Bearer hdr-1"]


def test_a_url_left_as_shown_keeps_its_password_and_one_changed_around_the_mask_is_refused(chief):
    letter = DeadLetterFactory(task_path=ADD, args=[1], kwargs={"b": "postgres://u:pw-1@h1/db"})
    page = logged_in(chief).get(edit_url(letter)).content.decode()
    assert "postgres://u:••••@h1/db" in page and "pw-1" not in page
    moved = {"b": "postgres://u:••••@h2/db"}
    assert "is masked" in refusal(chief, letter, [1], moved)  # only kept or removed, unseen
    redaction.record_reveal(chief, letter, via="edit")
    assert "holds the mask" in refusal(chief, letter, [1], moved)  # never sent to a job
    services.edit_and_replay(
        operator=chief,
        dead_letter_id=letter.pk,
        args=[2],
        kwargs={"b": "postgres://u:••••@h1/db"},
        reason="r",
    )
    assert Job.objects.get(replayed_from=letter).kwargs == {"b": "postgres://u:pw-1@h1/db"}


def test_the_console_refuses_a_blind_editors_guess_with_the_same_words(blind_editor, secret_letter):
    client = logged_in(blind_editor)
    texts = []
    for guess in ("s3cret-t0ken", "wrong-guess"):
        response = client.post(
            edit_url(secret_letter), form([1], {"b": {"api_token": guess, "amount": 5}})
        )
        assert response.status_code == 400
        texts.append(re.search(r'role="alert" class="error">(.*?)</div>', _text(response), re.S)[1])
    assert texts[0] == texts[1] and "is masked" in texts[0]
    assert not PayloadEdit.objects.exists()


def test_a_letter_nested_deeper_than_a_job_may_carry_cannot_be_edited(chief):
    deep = "x"
    for _ in range(store.MAX_JSON_DEPTH + 1):
        deep = [deep]
    letter = DeadLetterFactory(task_path=ADD, args=[deep, 1])  # written by an older version
    client = logged_in(chief)
    page = client.get(edit_url(letter))
    assert page.status_code == 200 and "nests deeper than 64 levels" in _text(page)
    assert 'name="args"' not in page.content.decode()
    before = snapshot()
    response = client.post(edit_url(letter), form([1], {"b": 2}))
    assert response.status_code == 409 and "nests deeper than 64 levels" in _text(response)
    assert snapshot() == before


# --- edit before replay: the console ---------------------------------------------------------


def test_edit_in_the_console_and_see_the_diff_on_the_letter_and_in_the_audit(chief, letter):
    client = logged_in(chief)
    detail = client.get(detail_url(letter)).content.decode()
    assert edit_url(letter) in detail
    page = client.get(edit_url(letter)).content.decode()
    assert "[\n  1,\n  2\n]" in page  # prefilled, pretty
    response = client.post(edit_url(letter), form([1], {"b": "<b>9</b>"}, reason="typo fixed"))
    edit = PayloadEdit.objects.get()
    assert response["Location"] == f"{detail_url(letter)}#edit-{edit.pk}"
    page = client.get(detail_url(letter)).content.decode()
    assert f'id="edit-{edit.pk}"' in page and "typo fixed" in page
    assert "<b>9</b>" not in page and "&quot;&lt;b&gt;9&lt;/b&gt;&quot;" in page  # escaped
    assert re.search(r'class="del">-\s+2', page)
    assert f">job {edit.job_id}</a>" in page  # not job 12 for job 1
    # The audit log's entry: the letter, linked to the edit's diff on its page; the places
    # changed, not the values.
    run = ReplayRun.objects.get()
    assert entries("letter.edit_replay") == [
        (
            [str(letter.pk)],
            "chief",
            "console",
            "typo fixed",
            {
                "edit": edit.pk,
                "job": edit.job_id,
                "changed": ["args", "kwargs['b']"],  # args [1, 2] became [1]
                "run": run.pk,
            },
        )
    ]
    link = f'<a href="{detail_url(letter)}#edit-{edit.pk}">#{letter.pk}</a>'
    row = f'<td class="targets">letter {link}</td>'
    assert row in client.get(AUDIT).content.decode()
    assert row not in client.get(AUDIT, {"operator": "nobody"}).content.decode()
    mine = {"target_kind": "letter", "target": letter.pk}
    assert row in client.get(AUDIT, mine).content.decode()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"args": "[1,", "kwargs": "{}"}, "not valid JSON"),
        ({"args": "NaN", "kwargs": "{}"}, "not valid JSON"),
        ({"args": "[" * 100_000, "kwargs": "{}"}, "args nests deeper than 64 levels"),
        ({"args": "[" * 65 + "]" * 65, "kwargs": "{}"}, "args nests deeper than 64 levels"),
        ({"args": "9" * 5000, "kwargs": "{}"}, "not valid JSON"),
        ({"args": "{}", "kwargs": "{}"}, "args must be a JSON array, not object"),
        ({"args": "[1]", "kwargs": "[]"}, "kwargs must be a JSON object, not array"),
        ({"args": '"x"', "kwargs": "null"}, "args must be a JSON array, not string"),
        ({"args": '["a\\u0000"]', "kwargs": '{"b": 1}'}, "NUL"),
        ({"args": "[1, 2, 3]", "kwargs": "{}"}, "does not take these arguments"),
        ({"args": "[1]", "kwargs": '{"b": -4}'}, "amounts must not be negative"),
        ({"args": "[3]", "kwargs": '{"b": 4}', "reason": " "}, "This field is required"),
    ],
)
def test_the_console_refuses_a_bad_edit_with_a_clear_error(
    chief, letter, settings, fields, message
):
    settings.REDRIVE = {
        **settings.REDRIVE,
        "PAYLOAD_VALIDATORS": {ADD: "tests.deadletters.test_edit_and_approval.no_negatives"},
    }
    before = snapshot()
    response = logged_in(chief).post(edit_url(letter), {"reason": "try", **fields})
    assert response.status_code == 400
    assert message in _text(response)
    assert snapshot() == before


def _text(response):
    import html

    return html.unescape(response.content.decode())


def test_the_console_refuses_an_oversized_payload(chief, letter, settings):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_PAYLOAD_BYTES": 50}
    response = logged_in(chief).post(edit_url(letter), form(["y" * 60], {}))
    assert response.status_code == 400 and "over the 50-byte limit" in _text(response)
    assert not PayloadEdit.objects.exists()


def test_a_letter_not_pending_is_refused_in_the_console(chief):
    letter = DeadLetterFactory(task_path=ADD, args=[1, 2], replayed=True)
    client = logged_in(chief)
    page = client.get(edit_url(letter))
    assert page.status_code == 200 and "Only a pending dead letter" in _text(page)
    assert 'name="args"' not in page.content.decode()
    assert edit_url(letter) not in client.get(detail_url(letter)).content.decode()
    before = snapshot()
    response = client.post(edit_url(letter), form([5], {"b": 1}))
    assert response.status_code == 409 and "Only a pending dead letter" in _text(response)
    assert snapshot() == before


def test_an_outbox_letter_offers_no_edit(chief):
    letter = DeadLetterFactory(source="outbox", task_path="orders.created", args=[])
    client = logged_in(chief)
    assert edit_url(letter) not in client.get(detail_url(letter)).content.decode()
    response = client.post(edit_url(letter), form([5], {}))
    assert response.status_code == 409 and "not edited" in _text(response)


def test_poison_needs_the_box_ticked(chief):
    letter = DeadLetterFactory(task_path=ADD, args=[1, 2], replays=3)
    client = logged_in(chief)
    refused = client.post(edit_url(letter), form([2, 2], {}))
    assert refused.status_code == 400 and "poison limit" in _text(refused)
    done = client.post(edit_url(letter), form([2, 2], {}, allow_poisoned="on"))
    assert done.status_code == 302 and PayloadEdit.objects.count() == 1


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_editing_needs_the_edit_permission(role, letter):
    client = logged_in(user_with_role(role))
    before = snapshot()
    assert client.get(edit_url(letter)).status_code == 403
    response = client.post(edit_url(letter), form([3], {"b": 4}))
    assert response.status_code == 403 and "edit a dead letter" in _text(response)
    assert snapshot() == before
    assert edit_url(letter) not in client.get(detail_url(letter)).content.decode()


def test_anonymous_is_sent_to_log_in(letter):
    for response in (
        Client().get(edit_url(letter)),
        Client().post(edit_url(letter), form([3], {"b": 4})),
    ):
        assert response.status_code == 302 and "login" in response["Location"]
    assert not PayloadEdit.objects.exists()


def test_edit_needs_the_csrf_token(chief, letter):
    client = Client(enforce_csrf_checks=True)
    client.force_login(chief)
    assert client.post(edit_url(letter), form([3], {"b": 4})).status_code == 403
    assert not PayloadEdit.objects.exists()
    page = client.get(edit_url(letter)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post(edit_url(letter), {**form([3], {"b": 4}), "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and PayloadEdit.objects.count() == 1


# --- the two-person rule -----------------------------------------------------------------------


def start(operator, letters, *, action="replay", **kwargs):
    selection = services.freeze_selection(
        operator=operator, action=action, ids=[dl.pk for dl in letters]
    )
    return services.start_run(operator=operator, selection=selection, reason="API back", **kwargs)


@pytest.fixture
def threshold(settings):
    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": 2}


@pytest.fixture
def second(db):
    return user_with_role("operator", "second")


def test_without_a_threshold_runs_start_as_before(operator):
    assert conf.approval_threshold() is None
    run = start(operator, DeadLetterFactory.create_batch(5))
    assert (run.state, run.done, run.approved_by) == (RunState.FINISHED, 5, "")


def test_a_run_at_the_threshold_starts_and_one_over_it_waits(operator, threshold):
    assert start(operator, DeadLetterFactory.create_batch(2)).state == RunState.FINISHED
    letters = DeadLetterFactory.create_batch(3)
    run = start(operator, letters)
    assert (run.state, run.processed, run.started_at) == (RunState.AWAITING, 0, None)
    assert DeadLetter.objects.filter(pk__in=[dl.pk for dl in letters], state="pending").count() == 3
    # A runner that turns up anyway does nothing, and it cannot be paused or resumed.
    assert services.process_batch(run.pk).handled == 0
    assert not services.pause(run, operator=operator)
    assert not services.resume(run, operator=operator)
    assert run.state == RunState.AWAITING


@pytest.mark.parametrize("value", [0, -1, True, "5", 2.5, [3]])
def test_a_bad_threshold_fails_the_check_and_refuses_runs(settings, operator, value):
    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": value}
    errors = [e for e in checks.run_checks() if e.id == "redrive.E024"]
    assert len(errors) == 1 and 'REDRIVE["APPROVAL_THRESHOLD"]' in errors[0].msg
    with pytest.raises(services.RefusedError, match="approval threshold"):
        start(operator, DeadLetterFactory.create_batch(1))


def test_a_good_threshold_and_validators_pass_the_checks(settings):
    settings.REDRIVE = {
        **settings.REDRIVE,
        "APPROVAL_THRESHOLD": 50,
        "PAYLOAD_VALIDATORS": {ADD: "tests.deadletters.test_edit_and_approval.no_negatives"},
    }
    found = [e.id for e in checks.run_checks()]
    assert not {"redrive.E009", "redrive.E024", "redrive.E025"} & set(found)
    settings.REDRIVE = {
        **settings.REDRIVE,
        "PAYLOAD_VALIDATORS": {ADD: "tests.no.such.validator", "": "json.dumps"},
    }
    assert [e.id for e in checks.run_checks() if e.id == "redrive.E025"] == ["redrive.E025"] * 2


def test_the_requester_cannot_approve_and_a_second_operator_can(operator, second, threshold):
    letters = DeadLetterFactory.create_batch(3)
    mine = logged_in(operator)
    confirm = mine.post(PREVIEW, {"action": "replay", "ids": [dl.pk for dl in letters]})
    page = mine.get(confirm["Location"]).content.decode()
    assert "waits until a second user" in page
    response = mine.post(confirm["Location"], {"reason": "API back"})
    run = ReplayRun.objects.get()
    assert response["Location"] == run_url(run) and run.state == RunState.AWAITING
    page = mine.get(run_url(run)).content.decode()
    assert "Awaiting approval" in page and "you asked for it, so not you" in page
    assert approve_url(run) not in page

    before = snapshot()
    refused = mine.post(approve_url(run))
    assert refused.status_code == 403 and "a second person must approve it" in _text(refused)
    assert snapshot() == before
    with pytest.raises(services.RefusedError, match="second person"):
        services.approve(run, operator=operator)

    theirs = logged_in(second)
    page = theirs.get(run_url(run)).content.decode()
    assert approve_url(run) in page and "Approve and start" in page
    response = theirs.post(approve_url(run))
    assert response.status_code == 302 and response["Location"] == run_url(run)
    run.refresh_from_db()
    assert (run.state, run.done, run.operator_name, run.approved_by) == (
        RunState.FINISHED,
        3,
        "operator",
        "second",
    )
    assert run.approved_at is not None
    assert run_events(run) == [("approved", "second")]
    assert DeadLetter.objects.filter(state="replaying").count() == 3
    # Both names on the run page and in the audit.
    page = theirs.get(run_url(run)).content.decode()
    assert re.search(r'class="operator">operator<', page)
    assert re.search(r'class="approver">second,', page) and "Approved by second" in page
    audit = theirs.get(AUDIT).content.decode()
    assert '<td>operator<br><span class="muted approver">approved by second</span>' in audit
    # Approved once.
    again = theirs.post(approve_url(run))
    assert again.status_code == 409 and "nothing to approve" in _text(again)


def test_an_approved_large_run_goes_to_the_background_runner(operator, second, settings):
    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": 3, "REPLAY_BATCH_SIZE": 2}
    run = start(operator, DeadLetterFactory.create_batch(5))
    assert run.state == RunState.AWAITING
    assert not Job.objects.filter(task_path="deadletters.tasks.carry_out_run").exists()
    run = services.approve(run, operator=second)
    assert run.state == RunState.QUEUED
    runner = Job.objects.get(task_path="deadletters.tasks.carry_out_run")
    assert runner.args == [run.pk, run.generation]
    services.run_due(run.pk, run.generation)
    run.refresh_from_db()
    assert (run.state, run.done, run.approved_by) == (RunState.FINISHED, 5, "second")


def test_a_discard_run_waits_too_and_needs_a_discarder(operator, second, viewer, threshold):
    run = start(operator, DeadLetterFactory.create_batch(3), action="discard")
    assert run.state == RunState.AWAITING
    with pytest.raises(services.RefusedError, match="may not approve"):
        services.approve(run, operator=viewer)
    services.approve(run, operator=second)
    run.refresh_from_db()
    assert (run.state, run.done) == (RunState.FINISHED, 3)
    assert DeadLetter.objects.filter(state="discarded").count() == 3


def test_a_viewer_cannot_approve(operator, viewer, threshold):
    run = start(operator, DeadLetterFactory.create_batch(3))
    client = logged_in(viewer)
    assert approve_url(run) not in client.get(run_url(run)).content.decode()
    before = snapshot()
    response = client.post(approve_url(run))
    assert response.status_code == 403 and "replay dead letters" in _text(response)
    assert Client().post(approve_url(run)).status_code == 302  # anonymous: to the login
    assert snapshot() == before


def test_a_poisoned_run_needs_an_approver_who_may_replay_poison(chief, operator, settings):
    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": 1}
    run = start(chief, DeadLetterFactory.create_batch(2, replays=3), allow_poisoned=True)
    assert run.state == RunState.AWAITING and run.allow_poisoned
    response = logged_in(operator).post(approve_url(run))
    assert response.status_code == 403
    assert ReplayRun.objects.get().state == RunState.AWAITING
    other_admin = user_with_role("admin", "deputy")
    services.approve(run, operator=other_admin)
    assert ReplayRun.objects.get().done == 2


def test_approval_needs_the_csrf_token(operator, second, threshold):
    run = start(operator, DeadLetterFactory.create_batch(3))
    client = Client(enforce_csrf_checks=True)
    client.force_login(second)
    assert client.post(approve_url(run)).status_code == 403
    assert ReplayRun.objects.get().state == RunState.AWAITING
    page = client.get(run_url(run)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    assert client.post(approve_url(run), {"csrfmiddlewaretoken": token}).status_code == 302
    assert ReplayRun.objects.get().state == RunState.FINISHED


def test_an_awaiting_run_can_be_cancelled_and_is_then_not_approved(operator, second, threshold):
    letters = DeadLetterFactory.create_batch(3)
    run = start(operator, letters)
    client = logged_in(operator)
    page = client.get(run_url(run)).content.decode()
    assert reverse("deadletters:run-control", args=[run.pk, "cancel"]) in page
    client.post(reverse("deadletters:run-control", args=[run.pk, "cancel"]))
    run.refresh_from_db()
    assert (run.state, run.stopped_by) == (RunState.CANCELLED, "operator")
    response = logged_in(second).post(approve_url(run))
    assert response.status_code == 409 and "cancelled" in _text(response)
    assert DeadLetter.objects.filter(state="pending").count() == 3


# --- the CLI ----------------------------------------------------------------------------------


def test_the_cli_replay_over_the_threshold_waits_and_approve_carries_it_out(
    operator, second, viewer, threshold
):
    letters = DeadLetterFactory.create_batch(3)
    ids = [str(dl.pk) for dl in letters]
    result = run_command(
        "deadletters", "replay", *ids, "--reason", "API back", "--operator", "operator"
    )
    assert result.code == 0, result
    run = ReplayRun.objects.get()
    assert run.state == RunState.AWAITING
    assert f"deadletters approve {run.pk} --operator NAME" in result.out
    assert DeadLetter.objects.filter(state="pending").count() == 3

    for who, message in (
        ("operator", "a second person must approve it"),
        ("viewer", "Not allowed: this needs the permission deadletters.replay_deadletter."),
        ("ghost", "No user 'ghost'"),
    ):
        refused = run_command("deadletters", "approve", str(run.pk), "--operator", who)
        assert refused.refused_cleanly and message in refused.err, refused
        assert ReplayRun.objects.get().state == RunState.AWAITING
    missing = run_command("deadletters", "approve", "999999", "--operator", "second")
    assert missing.refused_cleanly and "no replay run #999999" in missing.err
    assert not AuditEntry.objects.filter(target_kind="run").exists()

    done = run_command("deadletters", "approve", str(run.pk), "--operator", "second")
    assert done.code == 0, done
    # `act run.approve`'s outcome, then the run carried out by the command.
    assert done.out.startswith(f"Approved: run #{run.pk} has started.\n")
    assert f"run {run.pk} finished: 3 replayed" in done.out
    run.refresh_from_db()
    assert (run.state, run.done, run.approved_by) == (RunState.FINISHED, 3, "second")
    assert DeadLetter.objects.filter(state="replaying").count() == 3


def test_the_edit_pages_reveal_is_kept_by_no_cache(chief, secret_letter):
    response = logged_in(chief).post(edit_url(secret_letter), {"reveal": "1"})
    assert "s3cret-t0ken" in response.content.decode()
    assert "no-store" in response["Cache-Control"]
