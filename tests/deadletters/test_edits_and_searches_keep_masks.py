"""Edits and searches keep masked values masked: a hostile edit is refused, not a 500, without
quoting a masked value; the edit permission alone does not replay; the audit shows a payload
search only to who may reveal."""

import pytest
from django.urls import reverse

from deadletters import services
from deadletters.models import PayloadEdit
from jobqueue.models import Job
from tests.factories import DeadLetterFactory

from .conftest import logged_in, user_with_role

pytestmark = pytest.mark.django_db

ADD = "tests.tasks.add"  # add(a, b)


@pytest.fixture
def chief(db):
    return user_with_role("admin", "chief")


def test_an_edit_nested_deeper_than_the_mask_check_can_walk_is_refused_not_a_500(chief):
    """json.loads (C) reads nesting the recursive mask restorer (Python) cannot walk: the
    RecursionError escaped edits.checked as a 500."""
    letter = DeadLetterFactory(task_path=ADD, args=[1, 2], kwargs={})
    client = logged_in(chief)
    client.raise_request_exception = False
    deep = "[" * 960 + "]" * 960
    response = client.post(
        reverse("deadletters:edit", args=[letter.pk]),
        {"args": f"[1, {deep}]", "kwargs": "{}", "reason": "hostile"},
    )
    assert response.status_code == 400
    assert "args nests deeper than 64 levels" in response.content.decode()
    assert not PayloadEdit.objects.exists()
    assert not Job.objects.filter(replayed_from=letter).exists()
    nested = []
    for _ in range(5_000):  # what a caller of the service may pass, deeper than any stack
        nested = [nested]
    with pytest.raises(services.RefusedError, match="args nests deeper than 64 levels"):
        services.edit_and_replay(
            operator=chief,
            dead_letter_id=letter.pk,
            args=[1, nested],
            kwargs={},
            reason="hostile",
        )


def receipt(args, kwargs):
    """edits.py's documented example validator, as a project would copy it (for add(a, b))."""
    if kwargs.get("b", 0) < 0:
        raise ValueError("b must not be negative")


def echoing(args, kwargs):
    """A validator whose message quotes the value it refuses, as many do."""
    token = kwargs["b"].get("api_token", "")
    if not token.startswith("tok_"):
        raise ValueError(f"api_token {token!r} is not a live token")


def test_a_validator_that_breaks_on_a_hostile_edit_refuses_it_instead_of_a_500(chief, settings):
    """The documented validator compares a kwarg with 0: an edit that makes it a string
    raised TypeError out of the view."""
    settings.REDRIVE = {
        **settings.REDRIVE,
        "PAYLOAD_VALIDATORS": {ADD: "tests.deadletters.test_edits_and_searches_keep_masks.receipt"},
    }
    letter = DeadLetterFactory(task_path=ADD, args=[1], kwargs={"b": 2})
    client = logged_in(chief)
    client.raise_request_exception = False
    response = client.post(
        reverse("deadletters:edit", args=[letter.pk]),
        {"args": "[1]", "kwargs": '{"b": "five"}', "reason": "hostile"},
    )
    assert response.status_code == 400
    assert "Refused by tests.deadletters.test_edits_and_searches_keep_masks.receipt" in (
        response.content.decode()
    )
    assert not PayloadEdit.objects.exists()
    assert not Job.objects.filter(replayed_from=letter).exists()


def test_a_validators_message_does_not_show_a_masked_value(chief, settings):
    """The validator gets the masks put back: a message quoting a value showed the secret to
    an editor who may not reveal it."""
    settings.REDRIVE = {
        **settings.REDRIVE,
        "PAYLOAD_VALIDATORS": {ADD: "tests.deadletters.test_edits_and_searches_keep_masks.echoing"},
    }
    letter = DeadLetterFactory(
        task_path=ADD, args=[1], kwargs={"b": {"n": 2, "api_token": "s3cret-t0ken"}}
    )
    editor = user_with_role("admin", "editor")
    client = logged_in(editor)
    response = client.post(
        reverse("deadletters:edit", args=[letter.pk]),
        {"args": "[1]", "kwargs": '{"b": {"n": 3, "api_token": "••••"}}', "reason": "n fixed"},
    )
    page = response.content.decode()
    assert response.status_code == 400
    assert "is not a live token" in page
    assert "s3cret-t0ken" not in page
    with pytest.raises(services.RefusedError) as refused:
        services.edit_and_replay(
            operator=chief,
            dead_letter_id=letter.pk,
            args=[1],
            kwargs={"b": {"n": 3, "api_token": "••••"}},
            reason="n fixed",
        )
    assert "s3cret-t0ken" not in str(refused.value)


def test_the_edit_permission_alone_does_not_replay():
    from django.contrib.auth.models import Permission
    from django.urls import reverse

    from tests.factories import DeadLetterFactory, UserFactory

    from .conftest import logged_in

    letter = DeadLetterFactory()
    user = UserFactory(username="editor-only")
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="deadletters",
            codename__in=["view_deadletter", "edit_deadletter"],
        )
    )
    response = logged_in(user).get(reverse("deadletters:edit", args=[letter.pk]))
    assert response.status_code == 403


def test_the_audit_shows_a_payload_search_only_to_those_who_may_reveal():
    from django.urls import reverse

    from jobqueue import store

    from .conftest import logged_in, user_with_role

    store.audit.record(
        "letters.export",
        actor="searcher",
        channel="console",
        target_kind="letters",
        params={
            "filter": {"q": "hunter2", "payload_search": True, "job_type": "shop.login"},
            "format": "csv",
        },
    )
    audit = reverse("deadletters:audit")
    as_viewer = logged_in(user_with_role("viewer")).get(audit).content.decode()

    def shown(q):
        return (
            "<code>filter={&quot;job_type&quot;: &quot;shop.login&quot;, "
            f"&quot;q&quot;: &quot;{q}&quot;}}</code>"
        )

    assert "hunter2" not in as_viewer and shown("••••") in as_viewer
    as_admin = logged_in(user_with_role("admin", "chief2")).get(audit).content.decode()
    assert shown("hunter2") in as_admin
