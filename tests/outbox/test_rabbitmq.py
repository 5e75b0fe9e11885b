"""The rabbitmq destination against a real broker on 127.0.0.1:5672 (guest/guest).

Without a broker these tests skip, saying how to run them; with REDRIVE_REQUIRE_RABBITMQ=1
(CI) a missing broker fails the run instead.
"""

import os
import select
import shutil
import signal
import subprocess
import time
import uuid
from collections import defaultdict

import pytest
from django.utils import timezone

from jobqueue import outbox
from jobqueue.models import OutboxMessage, OutboxState
from jobqueue.publishers import RabbitMQPublisher
from jobqueue.relay import Relay
from tests.amqp import AMQP_URL, connect_or_skip
from tests.conftest import wait_until
from tests.outbox.conftest import log_of, outbox_config, relay_pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def broker():
    """A pika channel to the test broker, or a skip (a failure under REDRIVE_REQUIRE_RABBITMQ)."""
    connection = connect_or_skip("the rabbitmq destination tests")
    channel = connection.channel()
    yield channel
    connection.close()


@pytest.fixture
def queue_name(broker):
    name = f"redrive-test-{uuid.uuid4().hex[:8]}"
    broker.queue_declare(name, durable=False, auto_delete=False)
    yield name
    broker.queue_delete(name)


RELAYS: list[Relay] = []


@pytest.fixture(autouse=True)
def close_relay_connections():
    """In-process relays stepped by hand never run()'s cleanup: close their connections."""
    yield
    while RELAYS:
        for publisher in RELAYS.pop()._publishers.values():
            publisher.close()


def relay_for(settings, routing_key, **relay_options):
    config = outbox_config()
    config["DESTINATIONS"]["events"] = {
        "url": AMQP_URL,
        "exchange": "",  # the default exchange routes by queue name
        "routing_key": routing_key,
    }
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": config}
    RELAYS.append(Relay(relay_id="test-relay", batch_size=50, **relay_options))
    return RELAYS[-1]


def drain(channel, queue) -> list[tuple[str, str | None]]:
    """Everything in the queue, in order, as (message id, key) pairs."""
    got = []
    while (message := channel.basic_get(queue, auto_ack=True))[0] is not None:
        properties = message[1]
        got.append((properties.message_id, (properties.headers or {}).get("key")))
    return got


def assert_delivered_at_least_once_in_key_order(got, ids_by_key):
    """None lost, only our ids, and each key's deliveries in id order (a consumer that drops
    an id it has seen sees every key's messages once each, in order)."""
    expected = {message_id for ids in ids_by_key.values() for message_id in ids}
    assert {message_id for message_id, _ in got} == expected
    arrived = defaultdict(list)
    for message_id, key in got:
        arrived[key].append(int(message_id))
    for key, ids in ids_by_key.items():
        assert arrived[key] == sorted(arrived[key]), f"key {key} out of order: {arrived[key]}"
        assert list(dict.fromkeys(arrived[key])) == [int(i) for i in ids]


def publish_keyed(keys: int, per_key: int) -> dict[str, list[str]]:
    ids_by_key = defaultdict(list)
    for n in range(keys * per_key):
        key = f"order:{n % keys}"
        ids_by_key[key].append(outbox.publish("audit.logged", {"n": n}, key=key))
    return ids_by_key


@pytest.fixture
def rabbitmqctl(broker):
    """Closes a client's connection from the broker's side, as an operator or a failing node
    would: `rabbitmqctl close_connection` (needs the CLI and its rights, here root)."""
    listing = None
    if shutil.which("rabbitmqctl"):
        listing = subprocess.run(
            ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    if listing is None or listing.returncode != 0:
        reason = (
            "rabbitmqctl is not available to close a connection from the broker's side "
            f"({'not on PATH' if listing is None else listing.stderr.strip()[:200]}): run the "
            "tests as a user that may use rabbitmqctl on the broker's host"
        )
        if os.environ.get("REDRIVE_REQUIRE_RABBITMQ") == "1":
            pytest.fail(f"REDRIVE_REQUIRE_RABBITMQ=1 but {reason}", pytrace=False)
        pytest.skip(reason)

    def pids(connection_name: str) -> list[str]:
        listing = subprocess.run(
            ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        return [
            line.split("\t", 1)[0]
            for line in listing.splitlines()
            if f'{{"connection_name","{connection_name}"}}' in line
        ]

    def close_connection(connection_name: str):
        [pid] = pids(connection_name)
        subprocess.run(
            ["rabbitmqctl", "-q", "close_connection", pid, "redrive test: closed by the broker"],
            check=True,
            timeout=60,
        )

    return close_connection


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


def test_a_batch_waits_for_its_confirms_together_not_one_by_one(settings, broker, queue_name):
    """All of a batch is on the wire before the first confirm is read."""
    relay = relay_for(settings, queue_name)
    in_flight = []
    original = RabbitMQPublisher._on_confirm

    def on_confirm(self, frame):
        in_flight.append(len(self._unconfirmed))
        original(self, frame)

    ids = [outbox.publish("audit.logged", {"n": n}) for n in range(20)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RabbitMQPublisher, "_on_confirm", on_confirm)
        assert relay.step() == 20
    assert in_flight[0] == 20  # the first confirm found the whole batch out
    assert [message_id for message_id, _ in drain(broker, queue_name)] == ids


def test_a_nack_retries_only_the_messages_the_broker_refused(settings, broker, clock):
    # A queue that takes 3 messages and nacks the rest (x-overflow reject-publish).
    queue = f"redrive-test-full-{uuid.uuid4().hex[:8]}"
    broker.queue_declare(
        queue, arguments={"x-max-length": 3, "x-overflow": "reject-publish"}, auto_delete=False
    )
    try:
        relay = relay_for(settings, queue, clock=clock)
        ids = [outbox.publish("audit.logged", {"n": n}, key=f"k{n}") for n in range(5)]
        assert relay.step() == 5
        rows = {str(m.pk): m for m in OutboxMessage.objects.all()}
        assert [rows[i].state for i in ids] == [OutboxState.PUBLISHED] * 3 + [
            OutboxState.PENDING
        ] * 2
        for message_id in ids[3:]:
            assert rows[message_id].attempts == 1
            assert "the broker nacked the message" in rows[message_id].errors[0]["message"]
        assert [message_id for message_id, _ in drain(broker, queue)] == ids[:3]

        clock.advance(60)  # past the retry's backoff
        assert relay.step() == 2  # only the two nacked ones, under their own ids
        assert set(OutboxMessage.objects.values_list("state", flat=True)) == {OutboxState.PUBLISHED}
        assert [message_id for message_id, _ in drain(broker, queue)] == ids[3:]
    finally:
        broker.queue_delete(queue)


def test_connection_closed_by_the_broker_mid_batch_loses_nothing(
    settings, broker, queue_name, clock, rabbitmqctl, monkeypatch
):
    """Half a batch confirmed, then RabbitMQ closes the connection, then the other half goes
    out on the dead connection: the confirmed half is marked, the rest retried, none lost."""
    relay = relay_for(settings, queue_name, clock=clock)
    ids_by_key = publish_keyed(keys=10, per_key=3)  # a batch holds one message per key: 10
    original_open = RabbitMQPublisher._open
    sabotaged = []

    def open_then_close_mid_batch(self, deadline):
        if sabotaged:
            return original_open(self, deadline)
        name = f"redrive test {uuid.uuid4().hex}"  # the one connection to close
        self.parameters.client_properties = {"connection_name": name}
        channel = original_open(self, deadline)
        sabotaged.append(True)
        publish, count = channel.basic_publish, 0

        def basic_publish(*args, **kwargs):
            nonlocal count
            count += 1
            if count == 6:
                # The first five are out and confirmed; now the broker drops the connection.
                assert self._run_until(lambda: not self._unconfirmed, time.monotonic() + 10)
                rabbitmqctl(name)
            return publish(*args, **kwargs)

        monkeypatch.setattr(channel, "basic_publish", basic_publish)
        return channel

    monkeypatch.setattr(RabbitMQPublisher, "_open", open_then_close_mid_batch)
    assert relay.step() == 10
    first_batch = [ids[0] for ids in ids_by_key.values()]
    rows = {str(m.pk): m for m in OutboxMessage.objects.filter(pk__in=first_batch)}
    assert [rows[i].state for i in first_batch] == [OutboxState.PUBLISHED] * 5 + [
        OutboxState.PENDING
    ] * 5
    for message_id in first_batch[5:]:
        assert "connection closed" in rows[message_id].errors[0]["message"]

    for _ in range(10):  # the relay reconnects; the retried ones go once their backoff is up
        clock.advance(60)
        if not relay.step():
            break
    assert set(OutboxMessage.objects.values_list("state", flat=True)) == {OutboxState.PUBLISHED}
    got = drain(broker, queue_name)
    assert_delivered_at_least_once_in_key_order(got, ids_by_key)
    assert len(got) == 30  # and the confirmed half was not sent again


def test_sigkill_between_publish_and_confirm_loses_nothing_and_keeps_key_order(
    broker, queue_name, tmp_path, transactional_db
):
    config = outbox_config()
    config["DESTINATIONS"]["events"] = {"url": AMQP_URL, "routing_key": queue_name}
    relays = relay_pool(tmp_path, config)
    ids_by_key = publish_keyed(keys=10, per_key=3)
    try:
        crashed = relays.run(
            "--burst", "--lease", "1", env={"REDRIVE_PUBLISHER_FAULT": "confirm_received"}
        )
        assert crashed.returncode == -signal.SIGKILL, log_of(crashed)
        assert "fault point confirm_received" in log_of(crashed)
        leased = OutboxMessage.objects.filter(state=OutboxState.LEASED)
        assert leased.count() == 10 and not OutboxMessage.objects.filter(
            state=OutboxState.PUBLISHED
        )
        until = max(m.locked_until for m in leased)
        wait_until(lambda: timezone.now() > until, message="lease expiry")
        survivor = relays.run("--burst")
        assert survivor.returncode == 0, log_of(survivor)
    finally:
        relays.stop_all()
    assert set(OutboxMessage.objects.values_list("state", flat=True)) == {OutboxState.PUBLISHED}
    got = drain(broker, queue_name)
    assert_delivered_at_least_once_in_key_order(got, ids_by_key)
    # The broker had the crashed relay's batch: those arrive twice, under their own ids.
    assert len(got) > 30


def test_a_connection_the_broker_closed_while_the_relay_idled_is_reopened_before_publishing(
    settings, broker, queue_name, rabbitmqctl
):
    relay = relay_for(settings, queue_name)
    first = outbox.publish("audit.logged", {"n": 1})
    assert relay.step() == 1
    publisher = relay._publishers["rabbitmq:events"]
    rabbitmqctl(publisher.parameters.client_properties["connection_name"])
    # The broker's Connection.Close is waiting on the idle relay's socket (pika internals: the
    # relay reads nothing between batches, which is the case this test is about).
    sock = publisher._connection._transport._sock
    assert select.select([sock], [], [], 30)[0], "the broker's close never reached the socket"
    second = outbox.publish("audit.logged", {"n": 2})
    assert relay.step() == 1
    row = OutboxMessage.objects.get(pk=second)
    assert (row.state, row.attempts, row.errors) == (OutboxState.PUBLISHED, 1, [])
    assert [message_id for message_id, _ in drain(broker, queue_name)] == [first, second]


def test_the_connection_is_named_for_operators_unless_the_url_names_it():
    """`rabbitmqctl list_connections client_properties` tells which relay holds a connection."""
    ours = RabbitMQPublisher("events", {"url": AMQP_URL})
    assert ours.parameters.client_properties["connection_name"] == (
        f"redrive outbox events pid {os.getpid()}"
    )
    named = RabbitMQPublisher(
        "events", {"url": "amqp://127.0.0.1/?client_properties={'connection_name':'billing'}"}
    )
    assert named.parameters.client_properties["connection_name"] == "billing"
