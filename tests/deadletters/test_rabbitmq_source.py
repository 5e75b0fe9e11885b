"""Source "rabbitmq" against a real broker on 127.0.0.1:5672 (guest/guest): messages rejected
into a dead-letter exchange appear once in the console, and replays land them back on their
original queue exactly once, even when the replaying process is killed mid-batch.

Without a broker these tests skip, saying how to run them; with REDRIVE_REQUIRE_RABBITMQ=1
(CI) a missing broker fails the run instead.
"""

import json
import signal
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
from jobqueue.store.sources.brokers import Unreachable
from jobqueue.store.sources.rabbitmq_letters import ID_HEADER, LETTER_HEADER, REPLAY_HEADER
from tests import cli
from tests.amqp import AMQP_URL, connect_or_skip
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


def test_a_replay_that_dies_again_returns_its_letter_to_pending(topology):
    dead(topology, "flaky")
    source().sync()
    (letter,) = letters()
    dead_letters.replay([letter.pk])
    wait_until(lambda: topology.count(topology.work) == 1, message="the replay")

    topology.reject_all()  # the consumer fails it again
    wait_until(lambda: topology.count(topology.dead) == 1, message="its second death")
    round_ = source().sync()

    assert round_.returned == 1 and round_.mirrored == 0
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
        "DEADLETTERS_REPLAY_BATCH_SIZE": "4",
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
