"""Settings for PostgreSQL behind a transaction pooler (REDRIVE["POOLER"], ["LISTEN_DSN"]):
checked at start-up, and the wake-up LISTEN's connection chosen from them."""

import pytest

from jobqueue.checks import check_pooler
from jobqueue.listener import listen_params


class FakeConnection:
    def __init__(self, vendor, alias="default"):
        self.vendor, self.alias = vendor, alias

    def get_connection_params(self):
        return {"dbname": "app", "host": "pooler.internal", "port": 6432}


@pytest.fixture
def configure_redrive(settings):
    def configure(**values):
        settings.REDRIVE = {**settings.REDRIVE, **values}

    return configure


def test_the_listen_connection_follows_the_settings(configure_redrive):
    configure_redrive(POOLER="", LISTEN_DSN="")
    assert listen_params(FakeConnection("sqlite")) is None  # no LISTEN without PostgreSQL
    assert listen_params(FakeConnection("postgresql"))["host"] == "pooler.internal"
    configure_redrive(POOLER="transaction", LISTEN_DSN="")
    assert listen_params(FakeConnection("postgresql")) is None  # no session: it polls
    configure_redrive(POOLER="transaction", LISTEN_DSN="host=db.internal port=5432 dbname=app")
    assert listen_params(FakeConnection("postgresql")) == {
        "conninfo": "host=db.internal port=5432 dbname=app"
    }


def test_each_queue_database_listens_through_its_own_dsn(configure_redrive):
    configure_redrive(
        POOLER="transaction",
        LISTEN_DSN={"default": "host=db port=5432 dbname=app", "queues_b": "host=db dbname=b"},
    )
    assert listen_params(FakeConnection("postgresql")) == {
        "conninfo": "host=db port=5432 dbname=app"
    }
    assert listen_params(FakeConnection("postgresql", "queues_b")) == {
        "conninfo": "host=db dbname=b"
    }
    # A database the dict does not name: no session to LISTEN on behind the pooler, it polls.
    assert listen_params(FakeConnection("postgresql", "other")) is None


def test_a_listen_dsn_per_database_passes_every_settings_check(configure_redrive):
    from django.core import checks

    configure_redrive(LISTEN_DSN={"default": "host=db dbname=app"})
    assert not [e for e in checks.run_checks() if e.id.startswith("redrive.E")]
    configure_redrive(LISTEN_DSN=["host=db"])  # neither kind: refused once, by the pooler check
    assert [e.id for e in checks.run_checks() if e.id.startswith("redrive.E")] == ["redrive.E027"]


def test_one_listen_dsn_for_queues_on_several_databases_is_warned_of(configure_redrive, settings):
    from tests.conftest import SECOND_DATABASE

    settings.TASKS = {
        "default": {"BACKEND": "jobqueue.backend.DatabaseBackend"},
        "b": {
            "BACKEND": "jobqueue.backend.DatabaseBackend",
            "OPTIONS": {"DATABASE": SECOND_DATABASE},
        },
    }
    configure_redrive(POOLER="transaction", LISTEN_DSN="host=db dbname=app")
    assert [e.id for e in check_pooler()] == ["redrive.W005"]
    configure_redrive(
        LISTEN_DSN={"default": "host=db dbname=app", SECOND_DATABASE: "host=db dbname=b"}
    )
    assert check_pooler() == []


@pytest.mark.parametrize(
    ("values", "ids"),
    [
        ({"POOLER": "", "LISTEN_DSN": ""}, []),
        ({"POOLER": "transaction", "LISTEN_DSN": "postgres://db/app"}, []),
        ({"POOLER": "session", "LISTEN_DSN": ""}, ["redrive.E026"]),
        ({"POOLER": "transaction", "LISTEN_DSN": 5432}, ["redrive.E027"]),
        ({"POOLER": "transaction", "LISTEN_DSN": {"default": "host=db"}}, []),
        ({"POOLER": "transaction", "LISTEN_DSN": {"nowhere": "host=db"}}, ["redrive.E027"]),
        ({"POOLER": "transaction", "LISTEN_DSN": {"default": 5432}}, ["redrive.E027"]),
    ],
)
def test_the_pooler_settings_are_checked_at_start_up(configure_redrive, values, ids):
    configure_redrive(**values)
    assert [error.id for error in check_pooler()] == ids
