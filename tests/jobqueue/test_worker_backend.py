"""`runworker --backend ALIAS` runs the jobs of that TASKS backend, from the database its
OPTIONS["DATABASE"] names (it used to claim from `default` whatever the backend said)."""

import pytest

from jobqueue.worker import Worker
from tests.cli import run
from tests.conftest import SECOND_DATABASE

pytestmark = pytest.mark.django_db

TWO_BACKENDS = {
    "default": {"BACKEND": "jobqueue.backend.DatabaseBackend", "QUEUES": [], "OPTIONS": {}},
    "reports": {
        "BACKEND": "jobqueue.backend.DatabaseBackend",
        "QUEUES": [],
        "OPTIONS": {"DATABASE": SECOND_DATABASE},
    },
    "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
}


@pytest.fixture
def backends(settings):
    settings.TASKS = TWO_BACKENDS  # django.tasks rebuilds its backends on setting_changed
    # Behind CI's pooler LISTEN_DSN is one string (the default database's): with two queue
    # databases that is warned of (redrive.W005), so it is said per database here.
    dsn = settings.REDRIVE.get("LISTEN_DSN")
    if isinstance(dsn, str) and dsn:
        settings.REDRIVE = {**settings.REDRIVE, "LISTEN_DSN": {"default": dsn}}


def test_a_worker_claims_from_its_backends_database(backends):
    assert Worker(backend="reports").using == SECOND_DATABASE
    assert Worker().using == "default"
    assert Worker(backend="reports", using="default").using == "default"  # said outright


@pytest.mark.parametrize(
    ("alias", "says"),
    [("nope", "no TASKS backend 'nope'"), ("immediate", "runworker runs Redrive's jobs only")],
)
def test_runworker_refuses_a_backend_that_is_not_a_redrive_one(backends, alias, says):
    refused = run("runworker", "--backend", alias, "--burst")
    assert refused.refused_cleanly, refused
    assert says in refused.err
