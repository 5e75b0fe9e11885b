"""The rabbitmq destination against a real broker on 127.0.0.1:5672 (guest/guest).

Without a broker these tests skip, saying how to run them; with REDRIVE_REQUIRE_RABBITMQ=1
(CI) a missing broker fails the run instead.
"""

import os
import signal
import uuid

import pytest
from django.utils import timezone

from jobqueue import outbox
from jobqueue.models import OutboxMessage, OutboxState
from jobqueue.relay import Relay
from tests.conftest import wait_until
from tests.outbox.conftest import log_of, outbox_config, relay_pool

pytestmark = pytest.mark.django_db

AMQP_URL = os.environ.get("REDRIVE_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


@pytest.fixture
def broker():
    """A pika channel to the test broker, or a skip (a failure under REDRIVE_REQUIRE_RABBITMQ)."""
    import pika

    params = pika.URLParameters(AMQP_URL)
    params.connection_attempts, params.socket_timeout = 1, 3
    try:
        connection = pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as exc:
        reason = (
            f"RabbitMQ unreachable at {AMQP_URL} ({type(exc).__name__}): start one on "
            "127.0.0.1:5672 with guest/guest (e.g. `apt-get install rabbitmq-server`) or set "
            "REDRIVE_RABBITMQ_URL to run the rabbitmq destination tests"
        )
        if os.environ.get("REDRIVE_REQUIRE_RABBITMQ") == "1":
            pytest.fail(f"REDRIVE_REQUIRE_RABBITMQ=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    channel = connection.channel()
    yield channel
    connection.close()


@pytest.fixture
def queue_name(broker):
    name = f"redrive-test-{uuid.uuid4().hex[:8]}"
    broker.queue_declare(name, durable=False, auto_delete=False)
    yield name
    broker.queue_delete(name)


def relay_for(settings, routing_key):
    config = outbox_config()
    config["DESTINATIONS"]["events"] = {
        "url": AMQP_URL,
        "exchange": "",  # the default exchange routes by queue name
        "routing_key": routing_key,
    }
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": config}
    return Relay(relay_id="test-relay", batch_size=50)


def test_published_with_confirms_as_persistent_messages_with_the_message_id(
    settings, broker, queue_name
):
    relay = relay_for(settings, queue_name)
    sent = [outbox.publish("audit.logged", {"n": n}, key=f"k{n}") for n in range(3)]
    assert relay.step() == 3
    assert set(OutboxMessage.objects.values_list("state", flat=True)) == {OutboxState.PUBLISHED}
    got = []
    for _ in sent:
        method, properties, body = broker.basic_get(queue_name, auto_ack=True)
        assert method is not None, "a published message is missing from the queue"
        got.append((properties.message_id, body, properties))
    assert [message_id for message_id, _, _ in got] == sent
    for n, (_, body, properties) in enumerate(got):
        assert body == f'{{"n":{n}}}'.encode()
        assert properties.delivery_mode == 2
        assert properties.content_type == "application/json"
        assert properties.type == "audit.logged" and properties.headers == {"key": f"k{n}"}


def test_unroutable_message_is_retried_not_silently_dropped(settings, broker):
    relay = relay_for(settings, f"no-such-queue-{uuid.uuid4().hex[:8]}")
    message_id = outbox.publish("audit.logged", {"n": 1})
    relay.step()
    row = OutboxMessage.objects.get(pk=message_id)
    assert row.state == OutboxState.PENDING and row.attempts == 1
    assert "no queue bound" in row.errors[0]["message"]


def test_sigkill_after_publish_republishes_the_same_message_id_to_the_broker(
    broker, queue_name, tmp_path, transactional_db
):
    config = outbox_config()
    config["DESTINATIONS"]["events"] = {"url": AMQP_URL, "routing_key": queue_name}
    relays = relay_pool(tmp_path, config)
    try:
        message_id = outbox.publish("audit.logged", {"n": 1}, key="audit:1")
        crashed = relays.run(
            "--burst", "--lease", "1", env={"REDRIVE_RELAY_FAULT": "after_publish"}
        )
        assert crashed.returncode == -signal.SIGKILL, log_of(crashed)
        row = OutboxMessage.objects.get(pk=message_id)
        assert row.state == OutboxState.LEASED
        wait_until(lambda: timezone.now() > row.locked_until, message="lease expiry")
        survivor = relays.run("--burst")
        assert survivor.returncode == 0, log_of(survivor)
    finally:
        relays.stop_all()
    assert OutboxMessage.objects.get(pk=message_id).state == OutboxState.PUBLISHED
    ids = []
    while (got := broker.basic_get(queue_name, auto_ack=True))[0] is not None:
        ids.append(got[1].message_id)
    assert ids == [message_id, message_id]  # delivered twice, one id to deduplicate on
