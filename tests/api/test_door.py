"""The API's one door (deadletters.api.door): every endpoint refuses what it does not understand
(an unknown field or parameter, a value of the wrong JSON type, a body too deep or too large,
text that is no text) with the API's JSON refusal, before anything runs or is written."""

import json

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deadletters import actions
from deadletters.api.door import MAX_BODY_DEPTH, max_body_bytes
from deadletters.models import ApiToken, Selection
from jobqueue.models import AuditEntry, Job
from tests.factories import TWO_BACKENDS, DeadLetterFactory, JobFactory, SelectionFactory

from .conftest import rows_written

pytestmark = pytest.mark.django_db

ACTIONS = [name for name, action in actions.REGISTRY.items() if action.api]
FAST = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fresh(api):
    """The token used just now: a call need not note its use (which would be a write)."""
    ApiToken.objects.filter(pk=api.token.pk).update(last_used_at=timezone.now())
    return api


def refusal(response, status, code):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code, body
    return body["detail"]


# --- unknown fields and parameters ---------------------------------------------------------------


def test_a_misspelled_filter_selects_nothing_and_names_the_field(operator_api):
    DeadLetterFactory.create_batch(2)
    response = operator_api.post("actions/letters.replay", {"select_all": "1", "job_typ": "x"})
    detail = refusal(response, 422, "unknown_fields")
    assert "'job_typ' (did you mean job_type?)" in detail
    JobFactory()
    response = operator_api.post("actions/jobs.cancel", {"select_all": "1", "job_type": "x"})
    assert "'job_type'" in refusal(response, 422, "unknown_fields")
    assert not Selection.objects.exists()


def test_a_jobs_selection_refuses_a_replays_confirm_fields(operator_api):
    job = JobFactory(run_after=timezone.now().replace(year=2999))
    frozen = operator_api.post("actions/jobs.cancel", {"ids": [job.pk]}).json()
    response = operator_api.post(
        f"selections/{frozen['selection']}/confirm", {"reason": "x", "to_queue": "mail"}
    )
    assert "'to_queue'" in refusal(response, 422, "unknown_fields")
    assert Job.objects.get(pk=job.pk).state != "cancelled"


@pytest.mark.parametrize(
    "path",
    [
        "letters",
        "letters/types",
        "letters/causes",
        "jobs",
        "runs",
        "workflows",
        "audit",
        "queues",
        "health",
        "schedules",
        "actions",
    ],
)
def test_an_unknown_query_parameter_is_400_naming_it(viewer_api, path):
    response = viewer_api.get(path, job_typ="x")
    assert "'job_typ'" in refusal(response, 400, "unknown_parameters")


def test_the_known_query_parameters_still_filter(viewer_api):
    DeadLetterFactory(queue_name="mail")
    DeadLetterFactory(queue_name="other")
    found = viewer_api.get("letters", queue="mail", order="oldest").json()["letters"]
    assert [row["queue"] for row in found] == ["mail"]
    assert viewer_api.get("audit", after="5", operator="x").status_code == 200


# --- type confusion ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "body", "field"),
    [
        ("queue.pause", {"queue": "mail", "reason": False}, "reason"),
        ("queue.pause", {"queue": "mail", "reason": "x", "allow_unknown": "yes"}, "allow_unknown"),
        ("letter.reveal", {"letter": 1, "for_edit": "AAA"}, "for_edit"),
        ("letter.reveal", {"letter": "1"}, "letter"),
        ("letter.reveal", {"letter": True}, "letter"),
        ("letters.replay", {"ids": [1, "2"]}, "ids"),
        ("letters.replay", {"select_all": True}, "select_all"),
        ("letters.replay", {"select_all": "1", "backend": "nowhere"}, "backend"),
        ("letters.replay", {"select_all": "1", "fingerprint": "xyz"}, "fingerprint"),
        ("jobs.cancel", {"select_all": "1", "state": "gone"}, "state"),
        ("queue.pause", {"queue": "mail", "reason": ""}, "reason"),
        ("queue.pause", {"queue": ["mail"], "reason": "x"}, "queue"),
    ],
)
def test_a_value_of_the_wrong_kind_is_422_naming_the_field(admin_api, action, body, field):
    JobFactory(queue_name="mail")
    fresh(admin_api)
    before = rows_written()
    response = admin_api.post(f"actions/{action}", body)
    assert refusal(response, 422, "invalid_field").startswith(f"Nothing changed: {field}: ")
    assert rows_written() == before


def test_false_is_never_stored_as_the_text_false(operator_api):
    JobFactory(queue_name="mail")
    operator_api.post("actions/queue.pause", {"queue": "mail", "reason": False})
    assert not AuditEntry.objects.filter(reason="false").exists()


# --- bodies too deep, too large, not text ------------------------------------------------------


def nested(depth: int):
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("name", ACTIONS)
def test_a_body_nested_100000_deep_is_400_on_every_action(admin_api, name):
    raw = '{"reason": ' + nested(100_000) + "}"
    response = admin_api.post(f"actions/{name}", raw=raw)
    assert str(MAX_BODY_DEPTH) in refusal(response, 400, "body_too_deep")


def test_a_confirm_body_nested_deep_is_400(operator_api):
    selection = SelectionFactory(operator=operator_api.user, ids=[1])
    response = operator_api.post(
        f"selections/{selection.pk}/confirm", raw='{"reason": ' + nested(100_000) + "}"
    )
    refusal(response, 400, "body_too_deep")


def test_a_payload_at_the_depth_limit_still_passes_the_door(admin_api):
    letter = DeadLetterFactory(task_path="tests.tasks.noop", args=[1], kwargs={})
    args = json.loads(nested(MAX_BODY_DEPTH - 1))
    response = admin_api.post(
        "actions/letter.edit_replay",
        {"letter": letter.pk, "args": args, "kwargs": {}, "reason": "x"},
    )
    assert response.json().get("code") != "body_too_deep", response.content


def test_a_10_mb_body_is_413_in_json(operator_api):
    raw = json.dumps({"reason": "x" * 10_000_000})
    response = operator_api.post("actions/queue.pause", raw=raw)
    assert str(max_body_bytes()) in refusal(response, 413, "body_too_large")


def test_a_body_over_djangos_own_limit_is_413_in_json(operator_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = operator_api.post("actions/queue.pause", raw=json.dumps({"reason": "x" * 2000}))
    refusal(response, 413, "body_too_large")


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"reason": NaN}', "NaN"),
        ('{"reason": "a", "reason": "b"}', "twice"),
        (b'{"reason": "\xff"}', "UTF-8"),
        ("[1]", "JSON object"),
    ],
)
def test_what_is_not_plain_json_is_400(operator_api, raw, says):
    response = operator_api.post("actions/queue.pause", raw=raw)
    assert says in refusal(response, 400, "not_json")


LETTER_FIELDS = ("q", "job_type", "queue", "error_class")
JOB_FIELDS = ("q", "queue", "task", "key")


@pytest.mark.parametrize(
    ("action", "field"),
    [("letters.replay", f) for f in LETTER_FIELDS]
    + [("letters.discard", f) for f in LETTER_FIELDS]
    + [("jobs.run_now", f) for f in JOB_FIELDS]
    + [("jobs.cancel", f) for f in JOB_FIELDS],
)
def test_a_lone_surrogate_is_400_naming_the_field(admin_api, action, field):
    raw = json.dumps({"select_all": "1", field: "?"}).replace('"?"', '"\\ud800"')
    response = admin_api.post(f"actions/{action}", raw=raw)
    assert refusal(response, 400, "unencodable_text").startswith(f"Invalid request: {field}:")
    assert not Selection.objects.exists()


# --- any body, by Hypothesis -------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
ANSWERED = {200, 201, 400, 403, 404, 409, 422}


@FAST
@given(
    name=st.sampled_from(ACTIONS),
    body=st.dictionaries(
        st.sampled_from(["reason", "queue", "ids", "select_all", "letter", "rate", "q", "x"]),
        json_values,
        max_size=4,
    ),
)
def test_any_json_body_is_answered_never_a_500(admin_api, name, body):
    fresh(admin_api)
    before = rows_written()
    response = admin_api.post(f"actions/{name}", body)
    assert response.status_code in ANSWERED, (name, body, response.content)
    assert response["Content-Type"].startswith("application/json")
    if response.status_code >= 400:
        assert rows_written() == before, (name, body, response.status_code)


READS = ["letters", "letters/causes", "jobs", "runs", "workflows", "audit", "queues", "health"]


@FAST
@given(
    path=st.sampled_from(READS),
    params=st.dictionaries(
        st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12),
        st.text(st.characters(codec="utf-8"), max_size=12),
        max_size=3,
    ),
)
def test_any_query_is_answered_and_an_unknown_parameter_refused(viewer_api, path, params):
    from deadletters.api import reads

    response = viewer_api.get(path, **params)
    assert response.status_code in (200, 400), (path, params, response.content)
    door = {"letters": reads.letter_list, "jobs": reads.job_list}.get(path)
    if door is not None and any(name not in door.door.query for name in params):
        assert response.json()["code"] == "unknown_parameters"


@FAST
@given(name=st.sampled_from(ACTIONS), stray=st.text(min_size=1, max_size=20))
def test_any_unknown_field_is_422(admin_api, name, stray):
    fields = actions.REGISTRY[name].select_form or actions.REGISTRY[name].form
    if stray in fields.base_fields:
        return
    response = admin_api.post(f"actions/{name}", {stray: "1"})
    refusal(response, 422, "unknown_fields")


@FAST
@given(
    name=st.sampled_from(ACTIONS),
    depth=st.integers(min_value=MAX_BODY_DEPTH, max_value=50_000),
)
def test_any_body_past_the_depth_bound_is_400(admin_api, name, depth):
    response = admin_api.post(f"actions/{name}", raw='{"reason": ' + nested(depth) + "}")
    refusal(response, 400, "body_too_deep")


@FAST
@given(
    name=st.sampled_from(ACTIONS),
    text=st.text(min_size=1, max_size=5),
    surrogate=st.integers(min_value=0xD800, max_value=0xDFFF),
)
def test_any_lone_surrogate_is_400(admin_api, name, text, surrogate):
    raw = json.dumps({"reason": text})[:-2] + f'\\u{surrogate:04x}"}}'
    response = admin_api.post(f"actions/{name}", raw=raw)
    assert refusal(response, 400, "unencodable_text").startswith("Invalid request: reason:")


@settings(FAST, max_examples=15)
@given(size=st.integers(min_value=1, max_value=3 * 1024 * 1024))
def test_any_body_size_is_answered_in_json(operator_api, size):
    raw = json.dumps({"reason": "x" * size})
    response = operator_api.post("actions/queue.pause", raw=raw)
    if len(raw) > max_body_bytes():
        refusal(response, 413, "body_too_large")
    else:
        assert response.status_code in ANSWERED


# --- the document says what the door and the forms take ---------------------------------------


def document(client_api):
    return client_api.client.get("/api/openapi.json").json()


def body_of(doc, path):
    return doc["paths"][f"/api/{path}"]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ]


def test_the_document_says_choices_lengths_and_patterns(viewer_api):
    doc = document(viewer_api)
    replay = body_of(doc, "actions/letters.replay")
    assert replay["additionalProperties"] is False
    props = replay["properties"]
    assert props["backend"]["enum"] == ["default", "", None]
    assert props["select_all"]["enum"] == ["1", "", None]
    assert props["fingerprint"]["pattern"] == "^[0-9a-f]{16}$"
    assert props["ids"]["items"] == {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
    assert props["job_type"]["maxLength"] == 255
    confirm = body_of(doc, "selections/{pk}/confirm")
    assert confirm["required"] == ["reason"]
    reason = confirm["properties"]["reason"]
    assert (reason["type"], reason["minLength"], reason["maxLength"]) == ("string", 1, 2000)
    assert confirm["properties"]["rate"]["type"] == ["number", "null"]
    assert confirm["properties"]["canary_max_dead_share"]["maximum"] == 1
    assert body_of(doc, "actions/letter.reveal")["properties"]["for_edit"]["type"] == [
        "boolean",
        "null",
    ]
    params = {p["name"]: p["schema"] for p in doc["paths"]["/api/letters"]["get"]["parameters"]}
    assert params["after"]["pattern"] == params["before"]["pattern"]
    assert params["after"]["pattern"].startswith("^")
    assert params["state"]["enum"][:1] == [""]
    workflows = doc["paths"]["/api/workflows"]["get"]["parameters"]
    assert {p["name"] for p in workflows} == {"state", "after", "before"}
    assert "413" in doc["paths"]["/api/actions/queue.pause"]["post"]["responses"]


def test_the_documents_backend_choices_are_the_settings_now(viewer_api, settings):
    settings.TASKS = TWO_BACKENDS
    props = body_of(document(viewer_api), "actions/letters.replay")["properties"]
    assert props["backend"]["enum"] == ["default", "b", "", None]
