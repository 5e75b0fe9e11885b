"""The console's words say what they mean (issue 47 item 7): a replay's canary field agrees with
its hint, a finished job is "done" on its page and in a run's ledger alike, and the times of a
letter say which event each is."""

import re

import pytest
from django.urls import reverse

from deadletters import services
from jobqueue.models import JobState, JobStatus
from tests.factories import DeadLetterFactory

pytestmark = pytest.mark.django_db

PREVIEW = reverse("deadletters:preview")


def confirm_page(client, letters):
    url = client.post(PREVIEW, {"action": "replay", "ids": [dl.pk for dl in letters]})["Location"]
    return client.get(url).content.decode()


def canary(html):
    value = re.search(r'name="canary_size" value="(\d*)"', html)[1]
    hint = re.search(r'id="id_canary_size_helptext">(.*?)</span>\s*<label', html, re.S)[1]
    return value, re.sub(r"<[^>]+>", "", hint)


def test_a_selection_no_larger_than_the_canary_is_offered_none_and_the_hint_says_why(
    operator_client, settings
):
    settings.REDRIVE = {**settings.REDRIVE, "CANARY_SIZE": 5}
    value, hint = canary(confirm_page(operator_client, [DeadLetterFactory()]))
    assert value == "0"
    assert "0 here: this selection of 1 item is no larger than the usual canary of 5" in hint
    assert "5" not in value
    # Larger than the canary: the default, and no such note.
    value, hint = canary(confirm_page(operator_client, DeadLetterFactory.create_batch(6)))
    assert value == "5"
    assert "the run has none" not in hint
    # Exactly the canary's size: none either (a canary as large as the selection is none).
    value, hint = canary(confirm_page(operator_client, DeadLetterFactory.create_batch(5)))
    assert value == "0" and "selection of 5 items" in hint


def test_a_canary_typed_as_large_as_the_selection_is_said_to_be_none(operator_client, settings):
    settings.REDRIVE = {**settings.REDRIVE, "CANARY_SIZE": 2}
    letters = DeadLetterFactory.create_batch(3)
    url = operator_client.post(PREVIEW, {"action": "replay", "ids": [dl.pk for dl in letters]})[
        "Location"
    ]
    # A refused confirm (no reason) shows the form as typed.
    html = operator_client.post(url, {"reason": "", "canary_size": "3"}).content.decode()
    value, hint = canary(html)
    assert value == "3"
    assert "3 is no smaller than this selection of 3 items" in hint


def test_a_finished_job_is_done_in_the_ledger_as_on_its_page(operator_client, operator):
    letter = DeadLetterFactory()
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[letter.pk], filter={}
    )
    run = services.start_run(operator=operator, selection=selection, reason="back")
    item = run.items.select_related("job").get()
    item.job.state = JobState.DONE
    item.job.save(update_fields=["state"])
    assert JobStatus.DONE.value == "done"
    ledger = operator_client.get(reverse("deadletters:run", args=[run.pk])).content.decode()
    assert f">{item.job_id}</a> (done)" in ledger
    assert "succeeded" not in ledger
    job_page = operator_client.get(reverse("deadletters:job", args=[item.job_id])).content.decode()
    assert '<span class="state done">done</span>' in job_page
    letter_page = operator_client.get(reverse("deadletters:detail", args=[letter.pk]))
    assert f"job {item.job_id}</a> (done)" in letter_page.content.decode()


def test_a_letters_times_say_which_event_each_is(viewer_client):
    letter = DeadLetterFactory(task_path="shop.send_receipt")
    detail = viewer_client.get(reverse("deadletters:detail", args=[letter.pk])).content.decode()
    assert "<dt>First attempt failed</dt>" in detail
    assert '<dt>Dead-lettered <span class="muted">(last attempt failed)</span></dt>' in detail
    assert "<dt>First failed</dt>" not in detail
    overview = viewer_client.get(reverse("deadletters:overview")).content.decode()
    assert ">Oldest pending, dead-lettered</th>" in overview
    assert ">Newest pending, dead-lettered</th>" in overview
    assert "<th>Oldest</th>" not in overview
    causes = viewer_client.get(
        reverse("deadletters:list"), {"job_type": "shop.send_receipt"}
    ).content.decode()
    assert ">First dead-lettered</th>" in causes and ">Last dead-lettered</th>" in causes
    assert "First seen" not in causes
