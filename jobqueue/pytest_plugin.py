"""Redrive's pytest plugin (registered as `redrive` under pytest11): the `redrive` fixture.

    def test_receipt(redrive):
        pay(order)
        redrive.assert_enqueued(send_receipt, args=[order.pk])
        assert redrive.run().succeeded == 1

It needs pytest-django's database (the fixture asks for `db`); nothing of Django is imported
until a test uses it, so the plugin costs nothing in a project's other tests.
"""

import pytest


@pytest.fixture
def redrive(db):
    """jobqueue.testing bound to one clock that starts now and moves as runs move it."""
    from jobqueue.testing import Harness

    return Harness()
