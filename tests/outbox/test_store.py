"""The outbox store's transitions with an injected clock, on both databases."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobqueue import outbox, store
from jobqueue.fingerprints import fingerprint
from jobqueue.models import DeadLetter, DeadLetterState, OutboxMessage, OutboxState
from jobqueue.store import outbox_messages as outbox_store
from jobqueue.store.sources import outbox_letters

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def publish(topic="hook.sent", key=None, **payload):
    message_id = outbox.publish(topic, payload or {"n": 1}, key=key)
    # Rows are stamped with the wall clock; pin them to T0 for the injected one.
    OutboxMessage.objects.filter(pk=message_id).update(created_at=T0, available_at=T0)
    return int(message_id)


def claim(now, limit=10, lease=5.0, relay="r1"):
    return outbox_store.claim(relay_id=relay, limit=limit, lease_seconds=lease, now=now)


def error(message, now, text="boom", cls="jobqueue.publishers.Unavailable"):
    return outbox_store.error_entry(message, class_path=cls, text=text, traceback="", now=now)


def ids(messages):
    return [m.pk for m in messages]


def test_claim_leases_a_batch_in_id_order_under_one_token():
    first, second, third = publish(), publish(), publish()
    batch = claim(at(0), limit=2, relay="host:1")
    assert ids(batch) == [first, second]
    assert {m.lease_token for m in batch} == {batch[0].lease_token}
    row = OutboxMessage.objects.get(pk=first)
    assert row.state == OutboxState.LEASED and row.attempts == 1
    assert row.locked_by == "host:1" and row.locked_until == at(5)
    assert ids(claim(at(1))) == [third]
    assert claim(at(4.999)) == []  # leased rows are not claimed again while the lease lasts


def test_a_key_has_one_message_in_flight_and_goes_in_id_order():
    a1, b1, a2, a3 = (publish(key=k) for k in ("a", "b", "a", "a"))
    keyless = publish()
    assert ids(claim(at(0))) == [a1, b1, keyless]
    assert claim(at(1)) == []  # a2 waits for a1, leased
    [leased] = OutboxMessage.objects.filter(pk=a1)
    assert outbox_store.mark_published([leased], now=at(1)) == {a1}
    assert ids(claim(at(1))) == [a2]  # a3 still waits for a2
    assert claim(at(1)) == []
    del a3


def test_a_message_waiting_for_its_retry_holds_its_key_back():
    first, second = publish(key="k"), publish(key="k")
    [message] = claim(at(0))
    assert outbox_store.retry(message, error(message, at(0)), retry_at=at(10), now=at(0))
    assert claim(at(9.999)) == []  # neither the retry nor the later message of its key
    assert ids(claim(at(10))) == [first]
    del second


def test_a_dead_message_releases_its_key():
    first, second = publish(key="k"), publish(key="k")
    [message] = claim(at(0))
    letter = outbox_store.bury(message, error(message, at(0)), max_attempts=3, now=at(0))
    assert letter is not None
    assert OutboxMessage.objects.get(pk=first).state == OutboxState.DEAD
    assert ids(claim(at(0))) == [second]


def test_mark_published_needs_the_same_token_and_an_unexpired_lease():
    publish()
    [first] = claim(at(0), lease=1)
    assert outbox_store.mark_published([first], now=at(1)) == set()  # expired, even unclaimed
    [second] = claim(at(2), lease=1, relay="r2")  # swept at expiry, claimed again
    assert second.pk == first.pk and second.attempts == 2
    assert outbox_store.mark_published([first], now=at(2.5)) == set()  # stale token
    assert not outbox_store.retry(first, error(first, at(2.5)), retry_at=at(3), now=at(2.5))
    assert outbox_store.bury(first, error(first, at(2.5)), max_attempts=3, now=at(2.5)) is None
    assert outbox_store.mark_published([second], now=at(2.5)) == {second.pk}
    row = OutboxMessage.objects.get(pk=second.pk)
    assert row.state == OutboxState.PUBLISHED and row.published_at == at(2.5)
    assert row.lease_token is None
    assert [e["exception_class_path"] for e in row.errors] == ["jobqueue.errors.LeaseExpired"]


def test_extend_keeps_only_live_leases_of_the_same_token():
    publish(), publish()
    batch = claim(at(0), lease=2)
    assert outbox_store.extend_leases(batch, lease_seconds=10, now=at(1)) == set(ids(batch))
    assert OutboxMessage.objects.get(pk=batch[0].pk).locked_until == at(11)
    assert outbox_store.extend_leases(batch, lease_seconds=10, now=at(11)) == set()


def test_release_hands_the_lease_back_without_counting_the_attempt():
    publish()
    [message] = claim(at(0))
    assert outbox_store.release([message], now=at(1)) == 1
    row = OutboxMessage.objects.get(pk=message.pk)
    assert row.state == OutboxState.PENDING and row.attempts == 0 and row.lease_token is None
    assert ids(claim(at(1))) == [message.pk]


def test_dead_letter_carries_topic_payload_and_message_id():
    message_id = publish("hook.refund", order_id=7)
    [message] = claim(at(0))
    outbox_store.bury(message, error(message, at(0.5), "HTTP 400"), max_attempts=3, now=at(0.5))
    letter = DeadLetter.objects.get()
    assert letter.source == "outbox" and letter.task_path == "outbox:hook.refund"
    assert letter.kwargs == {"order_id": 7} and letter.args == []
    assert letter.idempotency_key == str(message_id) and letter.job_id is None
    assert letter.attempts == 1 and letter.max_attempts == 3
    assert letter.last_error == "HTTP 400" and letter.state == DeadLetterState.PENDING
    # Its cause, as every source's letters have one (jobqueue.fingerprints).
    assert letter.fingerprint == fingerprint(letter.error_class, "HTTP <n>", "")
    assert OutboxMessage.objects.get(pk=message_id).dead_letter_id == letter.pk


def test_replay_republishes_the_same_message_and_tracks_its_letter():
    message_id = publish()
    [message] = claim(at(0))
    letter = outbox_store.bury(message, error(message, at(0)), max_attempts=3, now=at(0))

    outcome = store.replay([letter.pk], now=at(1))
    assert outcome.done == {letter.pk: None} and outcome.skipped == {}
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYING and letter.replays == 1
    assert store.replay([letter.pk], now=at(1)).skipped == {
        letter.pk: store.SKIP_REASONS[DeadLetterState.REPLAYING]
    }

    [again] = claim(at(1))
    assert again.pk == message_id and again.attempts == 1  # fresh budget, same id
    assert outbox_store.mark_published([again], now=at(2)) == {message_id}
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYED


def test_a_replayed_message_that_dies_again_returns_to_its_letter(burials):
    publish()
    [message] = claim(at(0))
    letter = outbox_store.bury(message, error(message, at(0), "first"), max_attempts=3, now=at(0))
    store.replay([letter.pk], now=at(1))
    [again] = claim(at(1))
    outbox_store.bury(again, error(again, at(2), "second"), max_attempts=3, now=at(2))
    burials.returned(letter)
    assert DeadLetter.objects.count() == 1
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.PENDING and letter.replays == 1
    assert [e["message"] for e in letter.errors] == ["first", "second"]


def test_replay_skips_a_letter_whose_message_is_gone():
    publish()
    [message] = claim(at(0))
    letter = outbox_store.bury(message, error(message, at(0)), max_attempts=3, now=at(0))
    OutboxMessage.objects.all().delete()
    assert store.replay([letter.pk], now=at(1)).skipped == {letter.pk: outbox_letters.SKIP_GONE}


def test_prune_deletes_old_published_rows_and_never_unpublished_ones():
    for _ in range(6):
        publish()
    old, recent, pending, leased, dead = claim(at(0), limit=5)
    outbox_store.mark_published([old, recent], now=at(0))
    OutboxMessage.objects.filter(pk=recent.pk).update(published_at=at(25 * 86400))
    outbox_store.release([pending], now=at(0))
    outbox_store.bury(dead, error(dead, at(0)), max_attempts=3, now=at(0))
    # Every row is 30 days old; the sixth was never claimed.
    deleted = outbox_store.prune(older_than=timedelta(days=7), now=at(30 * 86400), chunk=1)
    assert deleted == 1
    assert not OutboxMessage.objects.filter(pk=old.pk).exists()
    assert set(OutboxMessage.objects.values_list("state", flat=True)) == {
        OutboxState.PUBLISHED,
        OutboxState.PENDING,
        OutboxState.LEASED,
        OutboxState.DEAD,
    }
    assert OutboxMessage.objects.count() == 5
    assert outbox_store.prune(older_than=timedelta(days=7), now=at(30 * 86400)) == 0
    del leased


def test_a_failure_with_an_overlong_class_path_still_dead_letters():
    """The outbox records errors through the same entry as jobs: a class path longer than the
    dead letter's 255-character column (a class made with type()) is cut to fit, not refused."""
    publish()
    [message] = claim(at(0))
    entry = error(message, at(0), cls="x." * 200 + "Unavailable")
    letter = outbox_store.bury(message, entry, max_attempts=3, now=at(0))
    letter.refresh_from_db()
    assert len(letter.error_class) <= 255 and letter.error_class.endswith("Unavailable")
