"""Schemathesis against the served OpenAPI document, as anonymous and as a viewer's, an
operator's and an admin's token: no 5xx, every response as the document says (status, content
type, body), input the document allows let through and input it refuses refused, and a refused
request (4xx) changes no row. Bounded: a few examples per operation, a few seconds per role."""

from datetime import timedelta

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from deadletters.models import ApiToken
from jobqueue.models import Schedule, Workflow
from tests.deadletters.conftest import user_with_role
from tests.factories import DeadLetterFactory, JobFactory, ReplayRunFactory
from tests.properties import examples

from .conftest import api_as, rows_written

# What the document promises, and that the door keeps to it both ways: input the document
# allows (positive cases) is never refused as malformed (422 unknown_fields, invalid_field;
# 413), only by the forms' own judgement of it (400: a queue name's rules, a time bound the
# document can only describe), by state (409) or by permission; input it does not allow
# (negative cases) is refused.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    positive_data_acceptance,
    negative_data_rejection,
]

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
schema.config.checks.positive_data_acceptance.expected_statuses = [
    "2xx",
    "400",
    "401",
    "403",
    "404",
    "409",
]


@pytest.fixture
def connections_kept():
    """The WSGI app closes the database connection after each request, which would end the
    test's transaction; Django's test client keeps it open the same way."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def seeded(db, connections_kept):
    """Rows for the fuzzer to find: letters, jobs, a run, a schedule, a workflow."""
    letters = DeadLetterFactory.create_batch(3)
    JobFactory(run_after=timezone.now() + timedelta(hours=1))
    ReplayRunFactory()
    now = timezone.now()
    Schedule.objects.create(
        name="nightly",
        task_path="tests.tasks.noop",
        cron="0 3 * * *",
        next_run_at=now,
        created_at=now,
        updated_at=now,
    )
    job = letters[0].job
    Workflow.objects.create(
        id=job.pk, task_path="app.flow", job=job, state="waiting", started_at=now, updated_at=now
    )


@pytest.fixture(params=["anonymous", "viewer", "operator", "admin"])
def role_headers(request, seeded):
    if request.param == "anonymous":
        return {}
    user = user_with_role(request.param, "chief" if request.param == "admin" else None)
    api = api_as(user)
    # Used just now: the calls need not note its last use (which would count as a write).
    ApiToken.objects.filter(pk=api.token.pk).update(last_used_at=timezone.now())
    return {"Authorization": f"Bearer {api.text}"}


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=examples(3),
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_the_api_keeps_its_document(case, role_headers):
    before = rows_written()
    response = case.call_and_validate(headers=role_headers, checks=CHECKS)
    assert response.status_code < 500
    if 400 <= response.status_code < 500:
        assert rows_written() == before, f"{case.method} {case.path} {response.status_code}"


@pytest.mark.django_db
def test_the_write_counter_sees_a_write_and_a_refusal_writes_nothing(operator_api):
    JobFactory(queue_name="mail")
    ApiToken.objects.update(last_used_at=timezone.now())
    before = rows_written()
    refused = operator_api.post("actions/queue.pause", {"queue": "mail"})
    assert refused.status_code == 400
    assert rows_written() == before
    done = operator_api.post("actions/queue.pause", {"queue": "mail", "reason": "x"})
    assert done.status_code == 200
    assert rows_written() > before
