"""Settings for PostgreSQL behind a transaction pooler (REDRIVE["POOLER"], ["LISTEN_DSN"]):
checked at start-up, and the wake-up LISTEN's connection chosen from them."""

import pytest

from jobqueue.checks import check_pooler
from jobqueue.listener import listen_params


class FakeConnection:
    def __init__(self, vendor):
        self.vendor = vendor

    def get_connection_params(self):
        return {"dbname": "app", "host": "pooler.internal", "port": 6432}


@pytest.fixture
def redrive(settings):
    def configure(**values):
        settings.REDRIVE = {**settings.REDRIVE, **values}

    return configure


def test_the_listen_connection_follows_the_settings(redrive):
    redrive(POOLER="", LISTEN_DSN="")
    assert listen_params(FakeConnection("sqlite")) is None  # no LISTEN without PostgreSQL
    assert listen_params(FakeConnection("postgresql"))["host"] == "pooler.internal"
    redrive(POOLER="transaction", LISTEN_DSN="")
    assert listen_params(FakeConnection("postgresql")) is None  # no session: it polls
    redrive(POOLER="transaction", LISTEN_DSN="host=db.internal port=5432 dbname=app")
    assert listen_params(FakeConnection("postgresql")) == {
        "conninfo": "host=db.internal port=5432 dbname=app"
    }


@pytest.mark.parametrize(
    ("values", "ids"),
    [
        ({"POOLER": "", "LISTEN_DSN": ""}, []),
        ({"POOLER": "transaction", "LISTEN_DSN": "postgres://db/app"}, []),
        ({"POOLER": "session", "LISTEN_DSN": ""}, ["redrive.E026"]),
        ({"POOLER": "transaction", "LISTEN_DSN": 5432}, ["redrive.E027"]),
    ],
)
def test_the_pooler_settings_are_checked_at_start_up(redrive, values, ids):
    redrive(**values)
    assert [error.id for error in check_pooler()] == ids
