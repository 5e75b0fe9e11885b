"""Real `runrelay` processes against the test database and a local webhook: crash, competition,
per-key order; `runworker --relay` end to end."""

import signal
from collections import defaultdict

from django.utils import timezone

from jobqueue import outbox
from jobqueue.models import Execution, Job, JobState, OutboxMessage, OutboxState
from tests.conftest import wait_until
from tests.outbox.conftest import log_of


def published(ids) -> int:
    return OutboxMessage.objects.filter(pk__in=ids, state=OutboxState.PUBLISHED).count()


def test_sigkill_between_publish_and_mark_republishes_with_the_same_id(relays, hook_server):
    message_id = outbox.publish("hook.sent", {"order_id": 1}, key="order:1")
    crashed = relays.run("--burst", "--lease", "1", env={"REDRIVE_RELAY_FAULT": "after_publish"})
    assert crashed.returncode == -signal.SIGKILL, log_of(crashed)
    row = OutboxMessage.objects.get(pk=message_id)
    assert row.state == OutboxState.LEASED and row.attempts == 1
    assert hook_server.ids() == [message_id]  # it reached the consumer before the kill

    wait_until(lambda: timezone.now() > row.locked_until, message="lease expiry")
    survivor = relays.run("--burst")
    assert survivor.returncode == 0, log_of(survivor)
    row.refresh_from_db()
    assert row.state == OutboxState.PUBLISHED and row.attempts == 2
    assert row.errors[0]["exception_class_path"] == "jobqueue.errors.LeaseExpired"
    assert hook_server.ids() == [message_id, message_id]  # republished once more...
    assert {r.idempotency_key for r in hook_server.received} == {message_id}  # ...one id


def both_started(*procs):
    """Publish only once every relay is up: a SIGTERM during start-up (before the relay has its
    handler) would just kill it, which is not what these tests are about."""
    wait_until(
        lambda: all("event=relay_started" in log_of(p) for p in procs), message="relays started"
    )


def test_two_relays_publish_every_message_once_and_never_at_the_same_time(relays, hook_server):
    hook_server.delay = 0.002  # long enough for the two relays' publishes to interleave
    a = relays.start("--poll", "0.05", "--batch", "10", "--id", "relay-a")
    b = relays.start("--poll", "0.05", "--batch", "10", "--id", "relay-b")
    both_started(a, b)
    ids = [outbox.publish("hook.sent", {"n": n}) for n in range(300)]
    wait_until(lambda: published(ids) == 300, timeout=90, message="300 messages published")
    for proc in (a, b):
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=30) for proc in (a, b)] == [0, 0]

    assert sorted(hook_server.ids(), key=int) == ids  # none missed, none twice
    assert hook_server.overlaps == []
    assert "event=published" in log_of(a) and "event=published" in log_of(b), "both took part"


def test_per_key_order_holds_under_two_relays(relays, hook_server):
    hook_server.delay = 0.002
    a = relays.start("--poll", "0.05", "--batch", "5")
    b = relays.start("--poll", "0.05", "--batch", "5")
    both_started(a, b)
    by_key = defaultdict(list)
    for n in range(150):
        key = f"order:{n % 10}"
        by_key[key].append(outbox.publish("hook.sent", {"n": n}, key=key))
    ids = [i for key_ids in by_key.values() for i in key_ids]
    wait_until(lambda: published(ids) == 150, timeout=90, message="150 messages published")
    for proc in (a, b):
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=30) for proc in (a, b)] == [0, 0]

    arrived = defaultdict(list)
    for got in hook_server.received:
        arrived[got.key].append(got.message_id)
    assert arrived == by_key  # each key's messages arrived in id order, once each
    assert hook_server.overlaps == []  # and never two of one key in flight at once


def test_runworker_with_relay_fans_out_runs_the_jobs_and_stops_on_sigterm(relays):
    ids = [outbox.publish("order.created", {"key": f"order-{n}"}) for n in range(5)]
    worker = relays.start("--relay", "--poll", "0.05", command="runworker")
    wait_until(
        lambda: Job.objects.filter(state=JobState.DONE).count() == 10,
        timeout=60,
        message="both subscribed tasks done for 5 messages",
    )
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, log_of(worker)
    assert published(ids) == 5
    assert Execution.objects.filter(idempotency_key__startswith="effect:order-").count() == 5
    assert Execution.objects.filter(idempotency_key__startswith="order-created:").count() == 5
    assert "event=relay_stopped" in log_of(worker)
