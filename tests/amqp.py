"""The test RabbitMQ on 127.0.0.1:5672 (guest/guest): a connection, or a skip saying how to run
the tests that need it (a failure under REDRIVE_REQUIRE_RABBITMQ=1, as in CI)."""

import os

import pytest

AMQP_URL = os.environ.get("REDRIVE_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def connect_or_skip(purpose: str):
    """A pika BlockingConnection to the test broker; the caller closes it."""
    import pika

    params = pika.URLParameters(AMQP_URL)
    params.connection_attempts, params.socket_timeout = 1, 3
    try:
        return pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as exc:
        reason = (
            f"RabbitMQ unreachable at {AMQP_URL} ({type(exc).__name__}): start one on "
            "127.0.0.1:5672 with guest/guest (e.g. `apt-get install rabbitmq-server`) or set "
            f"REDRIVE_RABBITMQ_URL to run {purpose}"
        )
        if os.environ.get("REDRIVE_REQUIRE_RABBITMQ") == "1":
            pytest.fail(f"REDRIVE_REQUIRE_RABBITMQ=1 but {reason}", pytrace=False)
        pytest.skip(reason)
