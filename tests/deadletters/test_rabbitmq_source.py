"""Source "rabbitmq" against a real broker on 127.0.0.1:5672 (guest/guest): messages rejected
into a dead-letter exchange appear once in the console, and replays land them back on their
original queue exactly once, even when the replaying process is killed mid-batch.

Without a broker these tests skip, saying how to run them; with REDRIVE_REQUIRE_RABBITMQ=1
(CI) a missing broker fails the run instead.
"""

import json
import signal
import struct
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.urls import reverse

from deadletters import services
from deadletters.models import ReplayRun
from jobqueue.models import DeadLetter, DeadLetterState
from jobqueue.store import dead_letters, sources
from jobqueue.store.sources import brokers
from jobqueue.store.sources.brokers import Unreachable
from jobqueue.store.sources.rabbitmq_letters import (
    ID_HEADER,
    LETTER_HEADER,
    REPLAY_HEADER,
    SEAL_HEADER,
)
from tests import cli
from tests.amqp import AMQP_URL, connect_or_skip, field, long_string, raw_properties, sent_as, table
from tests.conftest import Processes, wait_until
from tests.deadletters.conftest import logged_in, user_with_role

# Real commits: the broker's side of a replay runs after the console's transaction commits.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def channel():
    connection = connect_or_skip("the rabbitmq dead-letter source tests")
    yield connection.channel()
    connection.close()


@dataclass
class Topology:
    channel: object
    work: str  # the queue consumers reject from
    dead: str  # its dead-letter queue
    exchange: str  # the dead-letter exchange

    def count(self, queue):
        return self.channel.queue_declare(queue, passive=True).method.message_count

    def publish(self, body, **properties):
        import pika

        self.channel.basic_publish(
            "", self.work, body if isinstance(body, bytes) else body.encode(),
            pika.BasicProperties(**properties),
        )  # fmt: skip

    def reject_all(self):
        """Reject every message on the work queue (no requeue): RabbitMQ dead-letters each."""
        n = 0
        while True:
            method, _props, _body = self.channel.basic_get(self.work)
            if method is None:
                break
            self.channel.basic_reject(method.delivery_tag, requeue=False)
            n += 1
        wait_until(lambda: self.count(self.work) == 0, message="the rejections to land")
        return n

    def drain(self, queue):
        """Every message on `queue` (taken off it): [(body, headers)]."""
        taken = []
        while True:
            method, props, body = self.channel.basic_get(queue, auto_ack=True)
            if method is None:
                return taken
            taken.append((body.decode(), dict(props.headers or {})))


@pytest.fixture
def topology(channel, settings):
    tag = uuid.uuid4().hex[:8]
    topo = Topology(channel, f"rd-work-{tag}", f"rd-dead-{tag}", f"rd-dlx-{tag}")
    channel.exchange_declare(topo.exchange, "fanout")
    channel.queue_declare(topo.dead)
    channel.queue_bind(topo.dead, topo.exchange)
    channel.queue_declare(topo.work, arguments={"x-dead-letter-exchange": topo.exchange})
    settings.REDRIVE = {
        **settings.REDRIVE,
        "SOURCES": ["jobqueue", "rabbitmq"],
        "RABBITMQ_DEAD_LETTERS": {"url": AMQP_URL, "queues": [topo.dead]},
    }
    yield topo
    for queue in (topo.work, topo.dead):
        channel.queue_delete(queue)
    channel.exchange_delete(topo.exchange)


def source():
    return sources.get("rabbitmq")


def dead(topo, *bodies, **properties):
    for body in bodies:
        topo.publish(body, **properties)
    topo.reject_all()
    wait_until(lambda: topo.count(topo.dead) >= len(bodies), message="the dead letters")


def letters():
    return list(DeadLetter.objects.filter(source="rabbitmq").order_by("pk"))


def test_rejected_messages_appear_once_with_their_death_history_and_stay_in_the_broker(topology):
    dead(topology, json.dumps({"order": 1}), "not json", content_type="text/plain", type="charge")

    first = source().sync()
    again = source().sync()

    assert (first.mirrored, again.mirrored, again.seen) == (2, 0, 2)
    one, two = letters()
    assert one.args == [{"order": 1}] and two.args == ["not json"]
    assert one.task_path == "charge" and one.queue_name == topology.work
    assert one.attempts == 1 and one.state == DeadLetterState.PENDING
    assert one.error_class == "rabbitmq.rejected"
    assert one.last_error == f"rejected in queue '{topology.work}' (once)"
    assert one.kwargs["origin"] == {
        "queue": topology.work,
        "exchange": "",
        "routing_key": topology.work,
    }
    assert one.kwargs["properties"]["content_type"] == "text/plain"
    # Nothing is taken from the broker by looking: both are still there, stamped once.
    kept = topology.drain(topology.dead)
    assert sorted(h[ID_HEADER] for _, h in kept) == sorted(x.idempotency_key for x in (one, two))


def test_identical_messages_stay_two_letters(topology):
    dead(topology, "same", "same")
    source().sync()
    source().sync()
    assert [x.args for x in letters()] == [["same"], ["same"]]
    assert len({x.idempotency_key for x in letters()}) == 2


def test_replay_lands_each_message_once_on_its_queue_and_settles_the_letter(topology):
    dead(topology, "a", "b", "c")
    source().sync()
    a, b, _c = letters()

    outcome = dead_letters.replay([a.pk, b.pk])

    assert set(outcome.done) == {a.pk, b.pk}
    back = topology.drain(topology.work)
    assert sorted(body for body, _ in back) == ["a", "b"]
    assert {(h[LETTER_HEADER], h[REPLAY_HEADER]) for _, h in back} == {(a.pk, 1), (b.pk, 1)}
    assert [body for body, _ in topology.drain(topology.dead)] == ["c"]
    a.refresh_from_db()
    assert (a.state, a.replays) == (DeadLetterState.REPLAYED, 1)
    assert dead_letters.replay([a.pk]).skipped == {a.pk: "already replayed successfully"}


def test_a_replay_that_dies_again_returns_its_letter_to_pending(topology, burials):
    dead(topology, "flaky")
    source().sync()
    (letter,) = letters()
    dead_letters.replay([letter.pk])
    wait_until(lambda: topology.count(topology.work) == 1, message="the replay")

    topology.reject_all()  # the consumer fails it again
    wait_until(lambda: topology.count(topology.dead) == 1, message="its second death")
    round_ = source().sync()

    assert round_.returned == 1 and round_.mirrored == 0
    burials.returned(letter)
    (letter,) = letters()
    assert (letter.state, letter.replays, letter.attempts) == (DeadLetterState.PENDING, 1, 2)
    assert len(letter.errors) == 2
    assert letter.last_error == f"rejected in queue '{topology.work}' (2 times)"


def test_discard_removes_the_broker_copy(topology):
    dead(topology, "x", "y")
    source().sync()
    x, _y = letters()
    dead_letters.discard([x.pk])
    assert [body for body, _ in topology.drain(topology.dead)] == ["y"]
    x.refresh_from_db()
    assert x.state == DeadLetterState.DISCARDED


def test_an_unreachable_broker_refuses_the_replay_and_writes_nothing(topology, settings):
    dead(topology, "m")
    source().sync()
    (letter,) = letters()
    settings.REDRIVE = {
        **settings.REDRIVE,
        "RABBITMQ_DEAD_LETTERS": {"url": "amqp://guest:guest@127.0.0.1:1/%2F", "queues": ["q"]},
    }
    outcome = dead_letters.replay([letter.pk])
    assert outcome.skipped[letter.pk].startswith("RabbitMQ is unreachable")
    letter.refresh_from_db()
    assert (letter.state, letter.replays) == (DeadLetterState.PENDING, 0)
    with pytest.raises(Unreachable):
        source().sync()
    result = cli.run("deadletters", "sync", "--source", "rabbitmq")
    assert result.code == 1 and "RabbitMQ is unreachable" in result.err
    assert "nothing was lost" in result.err and "Traceback" not in result.err


def test_a_replay_whose_original_queue_is_gone_is_skipped_with_the_reason(topology):
    dead(topology, "orphan")
    source().sync()
    (letter,) = letters()
    topology.channel.queue_delete(topology.work)
    outcome = dead_letters.replay([letter.pk])
    assert outcome.skipped[letter.pk] == f"its original queue {topology.work!r} no longer exists"
    assert [b for b, _ in topology.drain(topology.dead)] == ["orphan"]


def test_sync_command_prints_its_round(topology):
    dead(topology, "p")
    result = cli.run("deadletters", "sync", "--source", "rabbitmq")
    assert result.code == 0, result.err
    assert "source=rabbitmq seen=1 mirrored=1" in result.out


def test_hostile_bodies_and_headers_are_mirrored_and_shown_escaped(topology, client):
    topology.publish(
        "<script>alert(1)</script>",
        headers={"x-death": "not a list", "note": "<img src=x onerror=alert(2)>"},
    )
    topology.publish(b"\xff\xfe\x00binary")
    topology.publish("z" * 200_000)
    topology.reject_all()
    wait_until(lambda: topology.count(topology.dead) == 3, message="the dead letters")
    assert source().sync().mirrored == 3
    page = logged_in(user_with_role("operator"))
    for letter in letters():
        response = page.get(reverse("deadletters:detail", args=[letter.pk]))
        assert response.status_code == 200
        html = response.content.decode()
        assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert any(
        x.args == [{"$not_json": "bytes", "summary": "9 bytes, not UTF-8"}] for x in letters()
    )


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after_settle:2", "mid_settle:2"])
def test_a_replay_killed_mid_batch_and_resumed_lands_every_message_exactly_once(
    topology, tmp_path, point
):
    """A real `deadletters replay` process SIGKILLs itself at the second message of its first
    batch (after its AMQP commit, or between the letter's record and that commit); the resumed
    run and a sync finish the rest: every message on its queue once, the DLQ empty."""
    bodies = [f"order-{n}" for n in range(6)]
    dead(topology, *bodies)
    source().sync()
    user_with_role("operator", "olga")
    env = {
        "REDRIVE_SOURCES": "jobqueue,rabbitmq",
        "REDRIVE_RABBITMQ_DEAD_LETTERS": json.dumps({"url": AMQP_URL, "queues": [topology.dead]}),
        "REDRIVE_REPLAY_BATCH_SIZE": "4",
        "REDRIVE_SOURCES_SYNC_SECONDS": "0",
    }
    processes = Processes(tmp_path, "deadletters", env=env)
    args = ["replay", "--source", "rabbitmq", "--limit", "6", "--canary", "0"]
    audit = ["--operator", "olga", "--reason", "the consumer is fixed"]
    killed = processes.run(*args, *audit, env={"REDRIVE_BROKER_FAULT": point})
    assert killed.returncode == -signal.SIGKILL, Path(killed.log_path).read_text()
    assert topology.count(topology.work) == (2 if point == "after_settle:2" else 1)

    resumed = processes.run("sync", "--source", "rabbitmq")
    assert resumed.returncode == 0, Path(resumed.log_path).read_text()
    run = ReplayRun.objects.get()
    services.carry_out(run.pk)  # the rest of the run, as a restarted runner does

    back = Counter(body for body, _ in topology.drain(topology.work))
    assert back == Counter(bodies)
    assert topology.count(topology.dead) == 0
    assert {x.state for x in letters()} == {DeadLetterState.REPLAYED}
    assert all(x.replays == 1 for x in letters())


@pytest.mark.slow
def test_a_running_worker_mirrors_new_dead_letters_on_its_own(topology, workers):
    """No command needed: every REDRIVE["SOURCES_SYNC_SECONDS"] a worker syncs the brokers."""
    env = {
        "REDRIVE_SOURCES": "jobqueue,rabbitmq",
        "REDRIVE_RABBITMQ_DEAD_LETTERS": json.dumps({"url": AMQP_URL, "queues": [topology.dead]}),
        "REDRIVE_SOURCES_SYNC_SECONDS": "0.2",
    }
    worker = workers.start("--concurrency", "1", env=env)
    dead(topology, "first")
    wait_until(lambda: len(letters()) == 1, message="the worker's first sync")
    dead(topology, "second")
    wait_until(lambda: len(letters()) == 2, message="a later sync")
    assert worker.poll() is None
    assert "event=source_synced" in Path(worker.log_path).read_text()


def test_the_console_replays_broker_letters_through_preview_run_and_ledger(topology, settings):
    """The same path as every replay: preview, a reason, a run with its ledger and audit."""
    settings.REDRIVE = {**settings.REDRIVE, "CANARY_SIZE": 0}
    dead(topology, "one", "two")
    source().sync()
    first, second = letters()
    page = logged_in(user_with_role("operator", "omar"))
    listing = page.get(reverse("deadletters:list"), {"source": "rabbitmq"}).content.decode()
    assert f"rejected in queue &#x27;{topology.work}&#x27;" in listing

    confirm = page.post(
        reverse("deadletters:preview"), {"action": "replay", "ids": [first.pk, second.pk]}
    )["Location"]
    assert 'will-act">2<' in page.get(confirm).content.decode()
    done = page.post(confirm, {"reason": "consumer fixed"})

    run = ReplayRun.objects.get()
    assert done["Location"] == reverse("deadletters:run", args=[run.pk])
    assert (run.done, run.skipped, run.operator_name, run.reason) == (
        2, 0, "omar", "consumer fixed",
    )  # fmt: skip
    items = run.items.order_by("dead_letter_id")
    assert [(i.dead_letter_id, i.outcome) for i in items] == [
        (first.pk, "replayed"),
        (second.pk, "replayed"),
    ]
    assert [i.external_id for i in items] == [first.idempotency_key, second.idempotency_key]
    assert sorted(body for body, _ in topology.drain(topology.work)) == ["one", "two"]
    assert topology.count(topology.dead) == 0


def test_forged_or_absurd_stamps_never_take_over_a_letter_or_stop_the_sync(topology):
    """A publisher's own headers claiming a letter, counts no column holds, NUL in JSON keys,
    nesting past any walk: each message still becomes its own letter, and the sync goes on."""
    dead(topology, "victim")
    source().sync()
    (victim,) = letters()
    dead_letters.replay([victim.pk])  # 'replayed', replays 1
    topology.drain(topology.work)
    forged_death = [{"count": 2**40, "reason": "rejected", "queue": topology.work,
                     "exchange": "", "routing-keys": [topology.work]}]  # fmt: skip
    topology.publish(
        "forged", headers={LETTER_HEADER: victim.pk, REPLAY_HEADER: 1, "x-death": forged_death}
    )
    topology.publish("bad ids", headers={LETTER_HEADER: -3, REPLAY_HEADER: -5})
    topology.publish(json.dumps({"a\u0000b": "c\u0000d"}))
    topology.publish("[" * 5000 + "]" * 5000)
    topology.reject_all()
    wait_until(lambda: topology.count(topology.dead) == 4, message="the dead letters")

    round_ = source().sync()

    assert (round_.mirrored, round_.returned, round_.errors) == (4, 0, [])
    victim.refresh_from_db()
    assert (victim.state, victim.replays) == (DeadLetterState.REPLAYED, 1)
    forged = DeadLetter.objects.get(source="rabbitmq", args=["forged"])
    assert forged.attempts == 2**31 - 1 and forged.state == DeadLetterState.PENDING
    assert DeadLetter.objects.filter(source="rabbitmq").count() == 5


def test_a_letter_whose_message_cannot_go_back_is_reported_and_the_message_kept(topology):
    """Published straight into the dead-letter queue, a message has no x-death to go back by:
    a replay is refused up front; a letter marked replaying anyway is named in the round's
    errors, its message kept, and the sync goes on."""
    import pika

    topology.channel.basic_publish("", topology.dead, b"stray", pika.BasicProperties())
    wait_until(lambda: topology.count(topology.dead) == 1, message="the stray message")
    source().sync()
    (letter,) = letters()
    assert dead_letters.replay([letter.pk]).skipped[letter.pk].startswith("its x-death header")
    DeadLetter.objects.filter(pk=letter.pk).update(state=DeadLetterState.REPLAYING, replays=1)

    round_ = source().sync()

    assert round_.published == 0 and len(round_.errors) == 1
    assert "names no queue" in round_.errors[0]
    assert [body for body, _ in topology.drain(topology.dead)] == ["stray"]


# --- what anyone who may publish to the dead-letter queue can write ---------------------------


@pytest.fixture
def raw(topology):
    """A channel that reads messages' properties as bytes (pika's own reading stops at a header
    value Python cannot hold): what the tests send and take back byte for byte."""
    import pika

    from jobqueue.store.sources.amqp_properties import Connection

    params = pika.URLParameters(AMQP_URL)
    params.connection_attempts, params.socket_timeout = 1, 3
    connection = pika.BlockingConnection(params, _impl_class=Connection)
    yield RawChannel(connection.channel(), topology)
    connection.close()


@dataclass
class RawChannel:
    channel: object
    topology: Topology

    def take(self, queue):
        """Every message on `queue`, taken off it: [(body, the properties' bytes)]."""
        taken = []
        while True:
            method, properties, body = self.channel.basic_get(queue, auto_ack=True)
            if method is None:
                return taken
            taken.append((body, properties.raw))

    def reject_all(self, expected: int):
        """Reject the `expected` messages of the work queue (published on another channel)."""
        work = self.topology.work
        wait_until(lambda: self.topology.count(work) == expected, message="the messages")
        while True:
            method, _properties, _body = self.channel.basic_get(self.topology.work)
            if method is None:
                break
            self.channel.basic_reject(method.delivery_tag, requeue=False)


@pytest.fixture
def elsewhere(topology):
    """An exchange and its queue that a forger would like Redrive to publish to."""
    name = f"{topology.work}-elsewhere"
    topology.channel.exchange_declare(name, "fanout")
    topology.channel.queue_declare(name)
    topology.channel.queue_bind(name, name)
    yield name
    topology.channel.queue_delete(name)
    topology.channel.exchange_delete(name)


def straight_in(topo, body: bytes, properties=None, **pika_properties):
    """Publish into the dead-letter queue itself, as anyone allowed to publish there can."""
    import pika

    properties = properties or pika.BasicProperties(**pika_properties)
    topo.channel.basic_publish("", topo.dead, body, properties)


def a_death(queue, exchange="", routing_key=None):
    return [{"count": 1, "reason": "rejected", "queue": queue, "exchange": exchange,
             "routing-keys": [routing_key or queue]}]  # fmt: skip


def test_a_letters_stamp_on_another_body_is_a_letter_of_its_own_never_replayed_with_it(
    topology, elsewhere
):
    """The id a letter's message is stamped with is on its page; written on another message,
    with a forged x-death naming another exchange, that message is a letter of its own (shown,
    with where it claims to come from), and the letter's replay publishes its own message to
    its own origin, nothing else."""
    dead(topology, "the real order")
    source().sync()
    (real,) = letters()
    for seal in (None, "a-guessed-seal"):
        headers = {ID_HEADER: real.idempotency_key, "x-death": a_death(topology.work, elsewhere)}
        if seal:
            headers[SEAL_HEADER] = seal
        straight_in(topology, b"refund everything", headers=headers)
    wait_until(lambda: topology.count(topology.dead) == 3, message="the forged messages")

    round_ = source().sync()

    assert (round_.mirrored, round_.errors) == (2, [])
    forged = [x for x in letters() if x.pk != real.pk]
    assert [x.args for x in forged] == [["refund everything"]] * 2
    assert real.idempotency_key not in {x.idempotency_key for x in forged}
    assert {x.kwargs["origin"]["exchange"] for x in forged} == {elsewhere}
    assert list(dead_letters.replay([real.pk]).done) == [real.pk]
    assert [body for body, _ in topology.drain(topology.work)] == ["the real order"]
    assert topology.count(elsewhere) == 0
    assert [body for body, _ in topology.drain(topology.dead)] == ["refund everything"] * 2


def test_a_replayed_copy_sent_back_returns_its_letter_once_and_only_with_its_own_body(topology):
    """A replay's consumer sees its letter and replay stamps. Sent straight back into the
    dead-letter queue, one copy with its own body returns the letter to pending (as dying
    again does); a second such copy, and one with another body, are letters of their own; the
    letter's next replay publishes one message."""
    dead(topology, "order-1")
    source().sync()
    (letter,) = letters()
    dead_letters.replay([letter.pk])
    ((body, stamped),) = topology.drain(topology.work)
    assert (body, stamped[LETTER_HEADER], stamped[REPLAY_HEADER]) == ("order-1", letter.pk, 1)
    for each in (b"order-1", b"order-1", b"refund everything"):
        straight_in(topology, each, headers=stamped)
    wait_until(lambda: topology.count(topology.dead) == 3, message="the copies sent back")

    round_ = source().sync()

    assert (round_.returned, round_.mirrored, round_.errors) == (1, 2, [])
    letter.refresh_from_db()
    assert (letter.state, letter.replays, letter.args) == (DeadLetterState.PENDING, 1, ["order-1"])
    others = sorted(x.args[0] for x in letters() if x.pk != letter.pk)
    assert others == ["order-1", "refund everything"]
    dead_letters.replay([letter.pk])
    assert [body for body, _ in topology.drain(topology.work)] == ["order-1"]
    assert sorted(b for b, _ in topology.drain(topology.dead)) == ["order-1", "refund everything"]


def test_a_copy_of_a_replay_whose_letter_was_discarded_is_a_letter_of_its_own(topology):
    """A letter that died again and was discarded is settled: a copy of its earlier replay
    sent back is not silently removed with it, but shown as a letter of its own."""
    dead(topology, "order-2")
    source().sync()
    (letter,) = letters()
    dead_letters.replay([letter.pk])
    ((_body, stamped),) = topology.drain(topology.work)
    straight_in(topology, b"order-2", headers=stamped)
    wait_until(lambda: topology.count(topology.dead) == 1, message="its return")
    assert source().sync().returned == 1
    dead_letters.discard([letter.pk])
    straight_in(topology, b"order-2", headers=stamped)
    wait_until(lambda: topology.count(topology.dead) == 1, message="another copy")

    round_ = source().sync()

    assert (round_.mirrored, round_.removed) == (1, 0)
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.DISCARDED
    assert [x.state for x in letters() if x.pk != letter.pk] == [DeadLetterState.PENDING]
    assert [body for body, _ in topology.drain(topology.dead)] == ["order-2"]


def test_two_messages_bearing_one_sealed_identity_are_two_letters_and_one_replay(topology, raw):
    """Someone who can read the dead-letter queue can copy a stamped message whole, seal and
    all; the copy read in the same scan is a letter of its own, and the letter's replay
    publishes once (once published, its identity names no letter: a later copy is new too)."""
    dead(topology, "order-3")
    source().sync()
    ((body, properties),) = raw.take(topology.dead)
    for _ in range(2):
        straight_in(topology, body, sent_as(properties))
    wait_until(lambda: topology.count(topology.dead) == 2, message="the two copies")

    round_ = source().sync()

    assert (round_.mirrored, round_.errors) == (1, [])
    first, _second = letters()
    dead_letters.replay([first.pk])
    straight_in(topology, body, sent_as(properties))  # a third copy, after the replay
    wait_until(lambda: topology.count(topology.dead) == 2, message="the third copy")
    assert source().sync().mirrored == 1
    assert [b for b, _ in topology.drain(topology.work)] == ["order-3"]
    assert [x.args for x in letters()] == [["order-3"]] * 3
    assert [x.state for x in letters()][1:] == [DeadLetterState.PENDING] * 2


def nested(levels: int) -> bytes:
    """A table holding a table ... `levels` deep."""
    value = field(b"S", b"bottom")
    for _ in range(levels):
        value = field(b"F", table(("in", value)))
    return value


ODD_HEADERS = (
    ("when", field(b"T", struct.pack(">Q", 2**63))),  # past Python's dates: pika cannot read it
    ("ratio", field(b"f", struct.pack(">f", 1.5))),  # pika reads a float as an int
    ("rate", field(b"d", struct.pack(">d", 2.25))),
    ("price", field(b"D", b"\x02" + struct.pack(">i", -12345))),
    ("blob", field(b"x", b"\x00\xff\x01")),
    ("smallest", field(b"l", struct.pack(">q", -(2**63)))),
    ("nothing", field(b"V", b"")),
    ("list", field(b"A", field(b"b", b"\xff") + long_string("two"))),
    ("deep", nested(2000)),  # pika's reading recurses past Python's limit
    ("nul\x00name", long_string("a\x00b")),  # PostgreSQL stores no NUL, in a key or a value
)


def test_header_values_python_cannot_hold_are_mirrored_shown_and_replayed_byte_for_byte(
    topology, raw
):
    """A message dead-lettered with header values pika cannot read or write (a timestamp of
    2**63, floats, a table nested 2000 deep) is mirrored, and the messages behind it; its page
    shows each value; its replay carries the very bytes it came with."""
    odd_headers = raw_properties(table(*ODD_HEADERS))
    topology.channel.basic_publish("", topology.work, b"odd", odd_headers)
    topology.publish("behind it")
    raw.reject_all(2)
    wait_until(lambda: topology.count(topology.dead) == 2, message="the dead letters")

    round_ = source().sync()

    assert (round_.mirrored, round_.errors) == (2, [])
    odd, behind = letters()
    assert behind.args == ["behind it"]
    shown = odd.kwargs["headers"]
    assert shown["when"] == "timestamp 9223372036854775808 (past the dates Python reads)"
    assert (shown["ratio"], shown["rate"], shown["price"]) == (1.5, 2.25, "-123.45")
    assert (shown["smallest"], shown["nothing"], shown["list"]) == (-(2**63), None, [-1, "two"])
    assert shown["blob"] == "\\x00\\xff\x01" and shown["nul\\x00name"] == "a\\x00b"
    depth, value = 0, shown["deep"]
    while isinstance(value, dict):
        depth, value = depth + 1, value["in"]
    assert depth == 62 and value.endswith("bytes nested deeper than 64 levels]")
    page = logged_in(user_with_role("operator"))
    response = page.get(reverse("deadletters:detail", args=[odd.pk]))
    assert response.status_code == 200 and "past the dates Python reads" in response.text

    assert list(dead_letters.replay([odd.pk]).done) == [odd.pk]
    ((body, properties),) = raw.take(topology.work)
    # RabbitMQ sorts a table it rewrites (dead-lettering does): each header, byte for byte.
    assert body == b"odd" and all(table(header) in properties for header in ODD_HEADERS)


def test_a_message_whose_stamped_copy_the_broker_refuses_is_recorded_and_the_sync_goes_on(
    topology, raw
):
    """Headers filling a whole frame leave no room for the stamp: RabbitMQ refuses the copy
    and closes the connection. The message is recorded once, under its digest, as one that
    cannot be replayed; later syncs pass it and mirror what is behind it; a discard removes
    it."""
    pad = table(("pad", long_string("p" * 131_000)))
    straight_in(topology, b"too big to stamp", raw_properties(pad))
    straight_in(topology, b"behind it")
    wait_until(lambda: topology.count(topology.dead) == 2, message="the messages")

    first = source().sync()
    second = source().sync()
    third = source().sync()

    assert first.mirrored == 1 and "RabbitMQ refused a stamped copy of it" in first.errors[0]
    assert (second.mirrored, second.errors, third.mirrored, third.errors) == (1, [], 0, [])
    big, behind = letters()
    assert (big.args, behind.args) == (["too big to stamp"], ["behind it"])
    assert big.idempotency_key == f"sha256:{big.message_digest}"
    assert big.kwargs["not_replayable"].startswith("RabbitMQ refused a stamped copy of it:")
    skipped = dead_letters.replay([big.pk]).skipped[big.pk]
    assert skipped.startswith("its message cannot be republished: RabbitMQ refused")
    assert list(dead_letters.discard([big.pk]).done) == [big.pk]
    assert [body for body, _ in raw.take(topology.dead)] == [b"behind it"]


def test_properties_this_reader_cannot_take_apart_are_a_letter_shown_as_text(topology, raw):
    """RabbitMQ passes on a property flag no AMQP property has: such a message is a letter
    of its own, its properties shown as text, that cannot be replayed; the messages behind it
    are mirrored in the same sync."""
    straight_in(topology, b"odd flags", raw_properties(table(), flags=0b10))
    straight_in(topology, b"behind it")
    wait_until(lambda: topology.count(topology.dead) == 2, message="the messages")

    round_ = source().sync()

    assert (round_.mirrored, round_.errors) == (2, [])
    odd, _behind = letters()
    assert odd.kwargs["not_replayable"].startswith("its properties cannot be read: ")
    # Its bytes (flags 0x2002, an empty table) as text, NUL escaped as no database refuses.
    assert odd.kwargs["properties"] == " \x02" + "\\x00" * 4
    assert source().sync().mirrored == 0
    assert dead_letters.replay([odd.pk]).skipped[odd.pk].startswith("its message cannot be")
    dead_letters.discard([odd.pk])
    assert [body for body, _ in raw.take(topology.dead)] == [b"behind it"]


def test_a_replay_the_broker_refuses_returns_its_letter_to_pending_and_the_sync_goes_on(
    topology,
):
    """A letter recorded 'replaying' whose exchange is then deleted: RabbitMQ refuses the
    publish (and closes the channel). The letter is pending again with the refusal as its
    last error, its message kept, and the next sync mirrors what is behind it. A replay asked
    for now is refused up front."""
    exchange = f"{topology.work}-in"
    topology.channel.exchange_declare(exchange, "direct")
    topology.channel.queue_bind(topology.work, exchange, "orders")
    topology.channel.basic_publish(exchange, "orders", b"via an exchange")
    wait_until(lambda: topology.count(topology.work) == 1, message="the message")
    topology.reject_all()
    wait_until(lambda: topology.count(topology.dead) == 1, message="its death")
    source().sync()
    (letter,) = letters()
    assert letter.kwargs["origin"]["exchange"] == exchange
    topology.channel.exchange_delete(exchange)
    skipped = dead_letters.replay([letter.pk]).skipped
    assert skipped == {letter.pk: f"its original exchange {exchange!r} no longer exists"}
    DeadLetter.objects.filter(pk=letter.pk).update(state=DeadLetterState.REPLAYING, replays=1)
    dead(topology, "behind it")

    refused = source().sync()
    after = source().sync()

    assert len(refused.errors) == 1 and "RabbitMQ refused the replay" in refused.errors[0]
    assert (after.mirrored, after.errors) == (1, [])
    letter.refresh_from_db()
    assert (letter.state, letter.replays) == (DeadLetterState.PENDING, 1)
    assert letter.last_error.startswith("RabbitMQ refused the replay: ")
    assert "NOT_FOUND" in letter.last_error and letter.error_class == "rabbitmq.refused"
    assert sorted(b for b, _ in topology.drain(topology.dead)) == ["behind it", "via an exchange"]


def test_seals_made_before_the_secret_key_rotates_still_verify_through_its_fallbacks(
    topology, settings
):
    dead(topology, "order-4")
    source().sync()
    (letter,) = letters()
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-secret-key-" + "x" * 40

    assert (source().sync().mirrored, len(letters())) == (0, 1)
    assert list(dead_letters.replay([letter.pk]).done) == [letter.pk]
    assert [body for body, _ in topology.drain(topology.work)] == ["order-4"]


def test_a_letter_mirrored_before_digests_adopts_its_own_message_only(topology):
    """Letters mirrored before seals and digests were kept have copies stamped with an id and
    no seal: a letter takes the copy bearing its id when the copy shows its body, and is then
    replayed; one whose id is on another body cannot be replayed, that message a new letter."""
    dead(topology, "kept order", "other order")
    source().sync()
    kept, other = letters()
    DeadLetter.objects.filter(source="rabbitmq").update(message_digest="")
    for body, headers in topology.drain(topology.dead):  # their stamps as before: no seals
        del headers[SEAL_HEADER]
        straight_in(
            topology, b"swapped" if body == "other order" else body.encode(), headers=headers
        )
    wait_until(lambda: topology.count(topology.dead) == 2, message="the old stamps")
    assert dead_letters.replay([kept.pk]).skipped == {kept.pk: brokers.SKIP_NOT_READ}

    round_ = source().sync()

    assert (round_.mirrored, round_.errors) == (1, [])
    kept.refresh_from_db()
    assert kept.message_digest and len(letters()) == 3
    assert list(dead_letters.replay([kept.pk]).done) == [kept.pk]
    assert [body for body, _ in topology.drain(topology.work)] == ["kept order"]
    assert dead_letters.replay([other.pk]).skipped == {other.pk: brokers.SKIP_NOT_READ}


def test_a_timestamp_past_pythons_dates_stops_no_sync_and_its_message_can_be_discarded(
    topology, raw
):
    when = table(("sent", field(b"T", struct.pack(">Q", 2**63))))
    straight_in(topology, b"poison", raw_properties(when))
    straight_in(topology, b"first behind it")
    straight_in(topology, b"second behind it")
    wait_until(lambda: topology.count(topology.dead) == 3, message="the messages")

    assert (source().sync().mirrored, len(letters())) == (3, 3)
    poison = letters()[0]
    assert poison.args == ["poison"] and poison.kwargs["headers"]["sent"].startswith("timestamp")
    assert list(dead_letters.discard([poison.pk]).done) == [poison.pk]
    left = sorted(body for body, _ in raw.take(topology.dead))
    assert left == [b"first behind it", b"second behind it"]


def test_a_replay_goes_where_its_letter_first_died_whatever_a_later_copy_claims(
    topology, elsewhere
):
    """x-death is the broker's note of each death, not part of the message: a copy of the
    letter's replay sent back with an x-death naming another exchange returns the letter, and
    the next replay still goes to the queue the letter recorded when first mirrored."""
    dead(topology, "order-5")
    source().sync()
    (letter,) = letters()
    dead_letters.replay([letter.pk])
    ((body, stamped),) = topology.drain(topology.work)
    stamped["x-death"] = a_death(topology.work, elsewhere, "anything")
    straight_in(topology, body.encode(), headers=stamped)
    wait_until(lambda: topology.count(topology.dead) == 1, message="the copy sent back")
    assert source().sync().returned == 1

    assert list(dead_letters.replay([letter.pk]).done) == [letter.pk]
    assert [b for b, _ in topology.drain(topology.work)] == ["order-5"]
    assert topology.count(elsewhere) == 0


def test_a_quorum_dead_letter_queue_counting_each_read_keeps_one_letter_per_message(
    channel, settings
):
    """A quorum queue writes how often it delivered a message into its headers, so each sync's
    read changes the message: that count is the queue's note, not part of the letter's message,
    and it is not replayed."""
    tag = uuid.uuid4().hex[:8]
    topo = Topology(channel, f"rd-work-{tag}", f"rd-dead-{tag}", f"rd-dlx-{tag}")
    channel.exchange_declare(topo.exchange, "fanout")
    channel.queue_declare(topo.dead, durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_bind(topo.dead, topo.exchange)
    channel.queue_declare(topo.work, arguments={"x-dead-letter-exchange": topo.exchange})
    settings.REDRIVE = {
        **settings.REDRIVE,
        "SOURCES": ["jobqueue", "rabbitmq"],
        "RABBITMQ_DEAD_LETTERS": {"url": AMQP_URL, "queues": [topo.dead]},
    }
    try:
        dead(topo, "counted")
        rounds = [source().sync() for _ in range(3)]
        assert [r.mirrored for r in rounds] == [1, 0, 0] and len(letters()) == 1
        (letter,) = letters()
        assert "x-delivery-count" not in letter.kwargs["headers"]
        assert list(dead_letters.replay([letter.pk]).done) == [letter.pk]
        ((body, headers),) = topo.drain(topo.work)
        assert body == "counted" and "x-delivery-count" not in headers
    finally:
        for queue in (topo.work, topo.dead):
            channel.queue_delete(queue)
        channel.exchange_delete(topo.exchange)
