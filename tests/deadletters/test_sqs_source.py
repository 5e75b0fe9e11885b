"""Source "sqs" against a local SQS: moto's server over HTTP, as boto3 reaches AWS.

Each test makes its own source queue (redrive policy maxReceiveCount 5, visibility 0) and
dead-letter queue; the messages die by being received without being deleted, as a consumer
that keeps failing leaves them. Replays and discards run outside any transaction of the test,
so their broker side (on_commit) runs at once.
"""

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from botocore.exceptions import EndpointConnectionError
from django.urls import reverse
from django.utils import timezone

from jobqueue.models import DeadLetter, DeadLetterState
from jobqueue.store import dead_letters, sources
from jobqueue.store.sources import brokers
from jobqueue.store.sources.sqs_letters import SQSLetters
from tests.cli import run
from tests.conftest import Processes, wait_until
from tests.deadletters.conftest import logged_in, user_with_role

pytestmark = pytest.mark.django_db(transaction=True)

REGION = "us-east-1"
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
MAX_RECEIVES = 5
UNREACHABLE = "http://127.0.0.1:1"


@pytest.fixture(scope="module")
def endpoint():
    """moto's SQS on a free port for this module."""
    from moto.server import ThreadedMotoServer

    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
    werkzeug.setLevel(level)


@pytest.fixture(scope="module")
def sqs(endpoint):
    import boto3

    return boto3.client("sqs", endpoint_url=endpoint, region_name=REGION, **KEYS)


@dataclass
class Queues:
    source: str  # the queue consumers read (its redrive policy targets dlq)
    dlq: str
    options: dict  # REDRIVE["SQS_DEAD_LETTERS"]


def sqs_settings(settings, **options):
    settings.REDRIVE = {
        **settings.REDRIVE,
        "SOURCES": ["jobqueue", "sqs"],
        "SQS_DEAD_LETTERS": options,
    }


@pytest.fixture
def queues(sqs, endpoint, settings):
    name = f"orders-{uuid.uuid4().hex[:10]}"
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = {"deadLetterTargetArn": arn, "maxReceiveCount": MAX_RECEIVES}
    source = sqs.create_queue(
        QueueName=name,
        Attributes={"RedrivePolicy": json.dumps(policy), "VisibilityTimeout": "0"},
    )["QueueUrl"]
    options = {
        "queues": [dlq],
        "endpoint_url": endpoint,
        "region_name": REGION,
        **KEYS,
        "timeout": 5,
    }
    sqs_settings(settings, **options)
    yield Queues(source, dlq, options)
    for url in (source, dlq):
        sqs.delete_queue(QueueUrl=url)


@pytest.fixture
def source():
    return sources.get("sqs")


# --- the queues, as a consumer sees them ---------------------------------------------------


def send(sqs, url, body, **attributes):
    message_attributes = {
        name: (
            {"DataType": "Binary", "BinaryValue": value}
            if isinstance(value, bytes)
            else {"DataType": "String", "StringValue": value}
        )
        for name, value in attributes.items()
    }
    sent = {"QueueUrl": url, "MessageBody": body}
    if message_attributes:
        sent["MessageAttributes"] = message_attributes
    return sqs.send_message(**sent)["MessageId"]


def fail_until_dead(sqs, queues, *, received_before=0):
    """Receive every message of the source queue without deleting it until SQS moves it to
    the dead-letter queue; returns how many receives each message got."""
    receives: dict[str, int] = {}
    for _ in range(4 * MAX_RECEIVES):
        batch = sqs.receive_message(
            QueueUrl=queues.source, MaxNumberOfMessages=10, VisibilityTimeout=0
        ).get("Messages", [])
        if not batch:
            break
        for message in batch:
            receives[message["MessageId"]] = receives.get(message["MessageId"], 0) + 1
    else:
        raise AssertionError("the source queue never moved its messages to the DLQ")
    assert set(receives.values()) <= {MAX_RECEIVES - received_before}, receives
    return receives


def read_all(sqs, url) -> list[dict]:
    """Every message in the queue (each once), made visible again afterwards."""
    messages: dict[str, dict] = {}
    while True:
        batch = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=30,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
        ).get("Messages", [])
        if not batch:
            break
        for message in batch:
            messages[message["MessageId"]] = message
    for message in messages.values():
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    return list(messages.values())


def counts(sqs, url) -> tuple[int, int]:
    """(visible, in flight) messages of the queue."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return int(attributes[names[0]]), int(attributes[names[1]])


def dead_one(sqs, queues, body, **attributes) -> str:
    message_id = send(sqs, queues.source, body, **attributes)
    fail_until_dead(sqs, queues)
    return message_id


def sqs_letters():
    return list(DeadLetter.objects.filter(source="sqs").order_by("pk"))


# --- mirroring -------------------------------------------------------------------------------


def test_a_dead_message_is_mirrored_once_and_stays_in_the_dlq(sqs, queues, source):
    body = {"order": uuid.uuid4().hex, "amount": 12}
    message_id = send(
        sqs,
        queues.source,
        json.dumps(body),
        type="orders.charge",
        tenant="acme",
        blob=b"\x00\x01",
    )
    assert fail_until_dead(sqs, queues) == {message_id: MAX_RECEIVES}
    assert counts(sqs, queues.source) == (0, 0)
    assert counts(sqs, queues.dlq) == (1, 0)

    first = source.sync()
    assert (first.seen, first.mirrored, first.returned, first.published, first.removed) == (
        1,
        1,
        0,
        0,
        0,
    )
    assert first.errors == []
    (letter,) = sqs_letters()
    assert letter.state == DeadLetterState.PENDING
    assert letter.attempts == MAX_RECEIVES
    assert letter.replays == 0
    assert letter.args == [body]
    assert letter.task_path == "orders.charge"
    assert letter.queue_name == queues.dlq.rsplit("/", 1)[-1]
    assert letter.kwargs["dead_letter_queue"] == queues.dlq
    assert letter.kwargs["attributes"] == {
        "type": "orders.charge",
        "tenant": "acme",
        "blob": {"$not_json": "Binary", "summary": "binary value"},
    }
    assert letter.idempotency_key == message_id
    assert f"received {MAX_RECEIVES} times" in letter.last_error
    assert len(letter.errors) == 1
    assert abs(letter.first_failed_at - timezone.now()) < timedelta(minutes=1)

    second = source.sync()
    assert (second.seen, second.mirrored, second.returned) == (1, 0, 0)
    assert [each.pk for each in sqs_letters()] == [letter.pk]
    letter.refresh_from_db()
    assert letter.attempts == MAX_RECEIVES and len(letter.errors) == 1

    # The syncs only read it: it is still there, visible to the next reader at once.
    assert counts(sqs, queues.dlq) == (1, 0)
    (kept,) = read_all(sqs, queues.dlq)
    assert kept["MessageId"] == message_id
    assert json.loads(kept["Body"]) == body


# --- replay ----------------------------------------------------------------------------------


def test_replay_sends_the_message_back_once_and_empties_the_dlq(sqs, queues, source):
    body = json.dumps({"order": uuid.uuid4().hex})
    dead_one(sqs, queues, body, tenant="acme")
    source.sync()
    (letter,) = sqs_letters()

    resolution = dead_letters.replay([letter.pk])
    assert list(resolution.done) == [letter.pk] and resolution.skipped == {}

    assert counts(sqs, queues.dlq) == (0, 0)
    copies = read_all(sqs, queues.source)
    assert [copy["Body"] for copy in copies] == [body]
    (copy,) = copies
    assert copy["MessageAttributes"]["redrive"]["StringValue"].startswith(f"{letter.pk}:1:")
    assert copy["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYED
    assert letter.replays == 1
    assert letter.replay_ref == copy["MessageId"].replace("-", "")[:32]

    again = dead_letters.replay([letter.pk])
    assert again.done == {}
    assert again.skipped[letter.pk].startswith("already replayed")
    assert len(read_all(sqs, queues.source)) == 1
    assert source.sync().seen == 0


def test_a_replay_that_dies_again_returns_the_same_letter(sqs, queues, source, burials):
    body = json.dumps({"order": uuid.uuid4().hex})
    dead_one(sqs, queues, body)
    source.sync()
    (letter,) = sqs_letters()
    dead_letters.replay([letter.pk])
    (copy,) = read_all(sqs, queues.source)  # one receive of its five

    assert fail_until_dead(sqs, queues, received_before=1) == {copy["MessageId"]: 4}
    returned = source.sync()
    assert (returned.seen, returned.mirrored, returned.returned) == (1, 0, 1)
    burials.returned(letter)
    assert [each.pk for each in sqs_letters()] == [letter.pk]
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.PENDING
    assert letter.replays == 1
    assert len(letter.errors) == 2
    assert letter.attempts == MAX_RECEIVES
    assert letter.idempotency_key == copy["MessageId"]
    assert letter.args == [json.loads(body)]
    assert source.sync().returned == 0
    letter.refresh_from_db()
    assert len(letter.errors) == 2

    # Its second replay sends the message that died last, stamped with the new count.
    dead_letters.replay([letter.pk])
    assert counts(sqs, queues.dlq) == (0, 0)
    (second,) = read_all(sqs, queues.source)
    assert second["Body"] == body
    assert second["MessageAttributes"]["redrive"]["StringValue"].startswith(f"{letter.pk}:2:")
    letter.refresh_from_db()
    assert (letter.state, letter.replays) == (DeadLetterState.REPLAYED, 2)


def test_discard_deletes_the_dlq_copy(sqs, queues, source):
    dead_one(sqs, queues, json.dumps({"order": 1}))
    dead_one(sqs, queues, json.dumps({"order": 2}))
    source.sync()
    discarded, kept = sqs_letters()

    resolution = dead_letters.discard([discarded.pk])
    assert list(resolution.done) == [discarded.pk]
    discarded.refresh_from_db()
    assert discarded.state == DeadLetterState.DISCARDED
    assert [m["MessageId"] for m in read_all(sqs, queues.dlq)] == [kept.idempotency_key]
    assert counts(sqs, queues.source) == (0, 0)
    kept.refresh_from_db()
    assert kept.state == DeadLetterState.PENDING
    assert source.sync().removed == 0


# --- interruptions ---------------------------------------------------------------------------


def test_a_replay_interrupted_after_its_commit_is_finished_by_the_next_sync(
    sqs, queues, source, caplog
):
    body = json.dumps({"order": uuid.uuid4().hex})
    dead_one(sqs, queues, body)
    source.sync()
    (letter,) = sqs_letters()

    down = brokers.Unreachable("down")
    with (
        mock.patch.object(SQSLetters, "settle", side_effect=down) as settle,
        caplog.at_level(logging.WARNING, "jobqueue.sources"),
    ):
        resolution = dead_letters.replay([letter.pk])
    assert list(resolution.done) == [letter.pk]
    settle.assert_called_once_with({letter.pk}, using="default")
    assert "event=source_unreachable source=sqs" in caplog.text
    letter.refresh_from_db()
    assert (letter.state, letter.replays) == (DeadLetterState.REPLAYING, 1)
    assert counts(sqs, queues.dlq) == (1, 0)
    assert counts(sqs, queues.source) == (0, 0)

    finished = source.sync()
    assert (finished.seen, finished.mirrored, finished.published) == (1, 0, 1)
    assert [copy["Body"] for copy in read_all(sqs, queues.source)] == [body]
    assert counts(sqs, queues.dlq) == (0, 0)
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYED and letter.replay_ref

    later = source.sync()
    assert (later.seen, later.published, later.removed) == (0, 0, 0)
    assert len(read_all(sqs, queues.source)) == 1


def test_a_copy_sent_but_not_deleted_is_only_deleted_by_the_next_sync(sqs, queues, source):
    body = json.dumps({"order": uuid.uuid4().hex})
    dead_one(sqs, queues, body)
    source.sync()
    (letter,) = sqs_letters()

    real_client = SQSLetters._client

    def client_that_cannot_delete(self, options):
        client = real_client(self, options)

        def crash(**kwargs):
            raise EndpointConnectionError(endpoint_url=options["client"]["endpoint_url"])

        client.delete_message = crash
        return client

    with mock.patch.object(SQSLetters, "_client", client_that_cannot_delete):
        dead_letters.replay([letter.pk])
    # Sent and recorded; the dead-letter copy is still there (visible again at once).
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYED
    assert [copy["Body"] for copy in read_all(sqs, queues.source)] == [body]
    (leftover,) = read_all(sqs, queues.dlq)
    assert leftover["MessageId"] == letter.idempotency_key
    assert "redrive" not in (leftover.get("MessageAttributes") or {})

    cleaned = source.sync()
    assert (cleaned.seen, cleaned.published, cleaned.removed) == (1, 0, 1)
    assert counts(sqs, queues.dlq) == (0, 0)
    assert [copy["Body"] for copy in read_all(sqs, queues.source)] == [body]
    letter.refresh_from_db()
    assert (letter.state, letter.replays) == (DeadLetterState.REPLAYED, 1)


# --- SQS away, nothing configured ----------------------------------------------------------


def test_unreachable_sqs_refuses_replays_and_fails_the_sync_cleanly(sqs, queues, source, settings):
    dead_one(sqs, queues, json.dumps({"order": 1}))
    source.sync()
    (letter,) = sqs_letters()
    before = DeadLetter.objects.values().get(pk=letter.pk)

    sqs_settings(settings, **{**queues.options, "endpoint_url": UNREACHABLE, "timeout": 1})
    for operation in (dead_letters.replay, dead_letters.discard):
        resolution = operation([letter.pk])
        assert resolution.done == {}
        assert resolution.skipped[letter.pk].startswith("SQS is unreachable"), resolution
        assert DeadLetter.objects.values().get(pk=letter.pk) == before

    result = run("deadletters", "sync", "--source", "sqs")
    assert result.code not in (0, 2), result
    assert result.out == ""
    (line,) = result.err.strip().splitlines()
    assert "SQS is unreachable" in line and "nothing was lost" in line
    assert "Traceback" not in result.err
    assert DeadLetter.objects.values().get(pk=letter.pk) == before
    assert counts(sqs, queues.dlq) == (1, 0)


def test_sync_without_queues_is_a_usage_error(settings):
    # Not among the console's SOURCES: the command itself refuses.
    settings.REDRIVE = {
        **settings.REDRIVE,
        "SOURCES": ["jobqueue"],
        "SQS_DEAD_LETTERS": {"queues": [], "endpoint_url": UNREACHABLE, "region_name": REGION},
        "RABBITMQ_DEAD_LETTERS": {},
    }
    result = run("deadletters", "sync", "--source", "sqs")
    assert result.refused_cleanly, result
    assert "no queues configured" in result.err and "SQS_DEAD_LETTERS" in result.err

    result = run("deadletters", "sync")
    assert result.refused_cleanly, result
    assert "No broker source is configured" in result.err


def test_sqs_among_sources_without_queues_stops_at_the_system_checks(settings):
    sqs_settings(settings, queues=[], endpoint_url=UNREACHABLE, region_name=REGION)
    result = run("deadletters", "sync", "--source", "sqs")
    assert result.code != 0 and result.out == "", result
    assert "redrive.E029" in result.err and "SQS_DEAD_LETTERS" in result.err
    assert "Traceback" not in result.err


# --- hostile messages ------------------------------------------------------------------------

SCRIPT = "<script>alert(1)</script>"


def test_hostile_bodies_are_mirrored_and_shown_escaped(sqs, queues, source):
    big = "x" * 200_000
    bodies = {
        "not json": "not json {",
        "script": SCRIPT,
        "big": big,
        "unicode": json.dumps({"name": "Zoë ✓ 日本語 🚀"}, ensure_ascii=False),
    }
    ids = {}
    for kind, body in bodies.items():
        attributes = {"note": '<img src=x onerror="alert(2)">'} if kind == "script" else {}
        ids[send(sqs, queues.source, body, **attributes)] = kind
    fail_until_dead(sqs, queues)

    done = source.sync()
    assert (done.seen, done.mirrored, done.errors) == (4, 4, [])
    letters = {ids[each.idempotency_key]: each for each in sqs_letters()}
    assert sorted(letters) == sorted(bodies)
    assert letters["not json"].args == ["not json {"]
    assert letters["script"].args == [SCRIPT]
    assert letters["unicode"].args == [{"name": "Zoë ✓ 日本語 🚀"}]
    shown = letters["big"].args[0]
    assert isinstance(shown, str) and len(shown) <= brokers.BODY_CHARS
    assert "characters cut" in shown and shown.endswith("x" * 1000)

    client = logged_in(user_with_role("operator"))
    for kind, letter in letters.items():
        response = client.get(reverse("deadletters:detail", args=[letter.pk]))
        assert response.status_code == 200, kind
        page = response.content.decode()
        assert "<script>alert(1)" not in page, kind
        assert "<img src=x" not in page, kind
    page = client.get(reverse("deadletters:detail", args=[letters["script"].pk])).content.decode()
    assert "&lt;script&gt;alert(1)" in page

    # The console shows a cut body; the replay sends the whole message the broker kept.
    dead_letters.replay([letters["big"].pk])
    (copy,) = read_all(sqs, queues.source)
    assert copy["Body"] == big


# --- a real process --------------------------------------------------------------------------


@pytest.mark.slow
def test_sync_command_in_a_process(sqs, queues, tmp_path):
    message_id = dead_one(sqs, queues, json.dumps({"order": 1}))
    processes = Processes(tmp_path, "deadletters")
    env = {
        "REDRIVE_SOURCES": "jobqueue,sqs",
        "REDRIVE_SQS_DEAD_LETTERS": json.dumps(queues.options),
    }
    try:
        synced = processes.run("sync", "--source", "sqs", env=env)
        log = Path(synced.log_path).read_text()
        assert synced.returncode == 0, log
        assert "source=sqs seen=1 mirrored=1" in log
        (letter,) = wait_until(sqs_letters, timeout=5, message="the mirrored letter")
        assert letter.idempotency_key == message_id
        assert counts(sqs, queues.dlq) == (1, 0)

        away = {**queues.options, "endpoint_url": UNREACHABLE, "timeout": 1}
        failed = processes.run(
            "sync", "--source", "sqs", env={**env, "REDRIVE_SQS_DEAD_LETTERS": json.dumps(away)}
        )
        log = Path(failed.log_path).read_text()
        assert failed.returncode not in (0, 2), log
        assert "SQS is unreachable" in log and "nothing was lost" in log
        assert "Traceback" not in log
        assert len(sqs_letters()) == 1
    finally:
        processes.stop_all()


# --- what anyone who may send to the dead-letter queue can write -----------------------------

REFUND = json.dumps({"refund": "everything"})


def replayed_once(sqs, queues, source) -> tuple[DeadLetter, dict, str]:
    """A letter replayed once; its replayed copy (taken off the source queue, as its consumer
    sees it) and the copy's body."""
    body = json.dumps({"order": uuid.uuid4().hex})
    dead_one(sqs, queues, body)
    source.sync()
    (letter,) = sqs_letters()
    dead_letters.replay([letter.pk])
    (copy,) = read_all(sqs, queues.source)
    sqs.delete_message(QueueUrl=queues.source, ReceiptHandle=copy["ReceiptHandle"])
    return letter, copy, body


def send_back(sqs, queues, copy, body):
    """The copy's attributes, mark and all, on `body`, sent into the dead-letter queue."""
    sqs.send_message(
        QueueUrl=queues.dlq, MessageBody=body, MessageAttributes=copy["MessageAttributes"]
    )


def test_a_mark_naming_a_replayed_letter_on_another_body_is_a_letter_of_its_own(
    sqs, queues, source
):
    """The `redrive` mark of a replayed letter, written by hand, guessed, or copied whole onto
    another body and sent to the dead-letter queue, never takes that letter over: each message
    is a letter of its own, and the letter stays replayed, showing and keeping its own body."""
    victim, copy, body = replayed_once(sqs, queues, source)
    mark = copy["MessageAttributes"]["redrive"]["StringValue"]
    for forged in (f"{victim.pk}:1", f"{victim.pk}:1:{'A' * 43}", mark):
        send(sqs, queues.dlq, REFUND, redrive=forged)

    done = source.sync()

    assert (done.mirrored, done.returned, done.errors) == (3, 0, [])
    victim.refresh_from_db()
    assert (victim.state, victim.replays) == (DeadLetterState.REPLAYED, 1)
    assert victim.args == [json.loads(body)]
    forged = [each for each in sqs_letters() if each.pk != victim.pk]
    assert [each.args for each in forged] == [[json.loads(REFUND)]] * 3
    assert dead_letters.replay([victim.pk]).skipped[victim.pk].startswith("already replayed")
    assert counts(sqs, queues.source) == (0, 0)


def test_a_replayed_copy_sent_back_twice_returns_its_letter_once_and_replays_once(
    sqs, queues, source
):
    """Its own copy sent back (as if it died again) returns the letter to pending; a second
    such copy is a letter of its own, not a second message the letter's replay sends."""
    letter, copy, body = replayed_once(sqs, queues, source)
    send_back(sqs, queues, copy, body)
    send_back(sqs, queues, copy, body)

    done = source.sync()

    assert (done.returned, done.mirrored, done.errors) == (1, 1, [])
    letter.refresh_from_db()
    assert (letter.state, letter.replays) == (DeadLetterState.PENDING, 1)
    assert list(dead_letters.replay([letter.pk]).done) == [letter.pk]
    assert [each["Body"] for each in read_all(sqs, queues.source)] == [body]
    assert counts(sqs, queues.dlq) == (1, 0)


def test_a_mark_naming_a_discarded_or_missing_letter_is_a_letter_of_its_own(sqs, queues, source):
    """A message claiming to be the replay of a letter that was discarded, or of none, is
    shown as a letter of its own; it is not deleted with the discarded one."""
    dead_one(sqs, queues, json.dumps({"order": 7}))
    source.sync()
    (discarded,) = sqs_letters()
    dead_letters.discard([discarded.pk])
    send(sqs, queues.dlq, REFUND, redrive=f"{discarded.pk}:0")
    send(sqs, queues.dlq, REFUND, redrive="999999999:1")

    done = source.sync()

    assert (done.mirrored, done.removed, done.errors) == (2, 0, [])
    assert [m["Body"] for m in read_all(sqs, queues.dlq)] == [REFUND, REFUND]
    discarded.refresh_from_db()
    assert discarded.state == DeadLetterState.DISCARDED


def test_a_letter_mirrored_before_digests_is_replayed_only_once_its_message_is_read(
    sqs, queues, source
):
    body = json.dumps({"order": uuid.uuid4().hex})
    dead_one(sqs, queues, body)
    source.sync()
    (letter,) = sqs_letters()
    digest = letter.message_digest
    DeadLetter.objects.filter(pk=letter.pk).update(message_digest="")

    assert dead_letters.replay([letter.pk]).skipped == {letter.pk: brokers.SKIP_NOT_READ}
    assert source.sync().mirrored == 0
    letter.refresh_from_db()
    assert letter.message_digest == digest
    assert list(dead_letters.replay([letter.pk]).done) == [letter.pk]
    assert [each["Body"] for each in read_all(sqs, queues.source)] == [body]
