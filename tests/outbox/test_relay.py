"""The relay in-process against real destinations: jobs in this database, a local webhook."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from jobqueue import outbox, store
from jobqueue.models import DeadLetter, DeadLetterState, Job, OutboxMessage, OutboxState
from jobqueue.relay import Relay, run_in_thread
from tests.conftest import wait_until
from tests.outbox.conftest import outbox_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def relay(settings, hook_server, clock):
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": outbox_config(hook_server.url)}
    return Relay(relay_id="test-relay", batch_size=50, lease_seconds=30, clock=clock)


def state(message_id):
    return OutboxMessage.objects.get(pk=message_id)


def test_rollback_leaves_no_message_and_nothing_is_published(relay, hook_server):
    with pytest.raises(RuntimeError), transaction.atomic():
        outbox.publish("hook.sent", {"n": 1})
        raise RuntimeError("the business write failed")
    assert not OutboxMessage.objects.exists()
    assert relay.step() == 0
    assert hook_server.received == []


def test_publish_returns_the_row_id_as_message_id_and_refuses_non_objects():
    with transaction.atomic():
        message_id = outbox.publish("hook.sent", {"n": 1}, key="order:1")
    row = OutboxMessage.objects.get(pk=int(message_id))
    assert (row.topic, row.key, row.payload, row.state) == (
        "hook.sent",
        "order:1",
        {"n": 1},
        OutboxState.PENDING,
    )
    with pytest.raises(TypeError):
        outbox.publish("hook.sent", [1, 2])
    with pytest.raises(TypeError):
        outbox.publish("hook.sent", {"when": timezone.now()})
    with pytest.raises(ValueError):
        outbox.publish("", {"n": 1})


def test_jobs_destination_fans_out_once_per_task_even_when_republished(relay):
    message_id = outbox.publish("order.created", {"key": "order-1"})
    assert relay.step() == 1
    assert state(message_id).state == OutboxState.PUBLISHED
    subscriber = "tests.outbox.tasks.on_order_created"
    jobs = Job.objects.order_by("-task_path")
    assert [(j.task_path, j.kwargs, j.idempotency_key) for j in jobs] == [
        ("tests.tasks.effect", {"key": "order-1"}, f"outbox:{message_id}:tests.tasks.effect"),
        (subscriber, {"key": "order-1"}, f"outbox:{message_id}:{subscriber}"),
    ]
    # Each job takes its task's own budget: effect says max_attempts=3, the other the default.
    assert [j.max_attempts for j in jobs] == [3, 5]

    # A relay that died after publishing would leave the row unpublished: publish it again.
    OutboxMessage.objects.filter(pk=message_id).update(state=OutboxState.PENDING)
    assert relay.step() == 1
    assert Job.objects.count() == 2


def test_a_message_nobody_subscribes_to_is_dead_lettered_at_once(relay):
    message_id = outbox.publish("order.cancelled", {"order_id": 1})
    relay.step()
    assert state(message_id).state == OutboxState.DEAD and not Job.objects.exists()
    letter = DeadLetter.objects.get()
    assert letter.error_class == "jobqueue.publishers.NoSubscribers" and letter.attempts == 1


def test_unknown_route_is_dead_lettered_at_once_while_others_flow(relay, hook_server):
    lost = outbox.publish("nowhere.at.all", {"n": 1})
    sent = outbox.publish("hook.sent", {"n": 2})
    assert relay.step() == 2
    assert state(lost).state == OutboxState.DEAD
    assert state(sent).state == OutboxState.PUBLISHED
    letter = DeadLetter.objects.get()
    assert letter.task_path == "outbox:nowhere.at.all"
    assert letter.error_class == "jobqueue.publishers.UnknownRoute"
    assert hook_server.ids() == [sent]


def test_webhook_posts_the_signed_payload_with_the_message_id(relay, hook_server):
    message_id = outbox.publish("hook.sent", {"order_id": 42}, key="order:42")
    relay.step()
    [got] = hook_server.received
    assert got.signed
    assert got.payload == {"order_id": 42}
    assert got.message_id == got.idempotency_key == message_id
    assert (got.topic, got.key) == ("hook.sent", "order:42")
    assert state(message_id).state == OutboxState.PUBLISHED


def test_poison_message_is_dead_lettered_at_once_while_others_keep_flowing(relay, hook_server):
    poison = outbox.publish("hook.sent", {"status": 422}, key="k")
    later_same_key = outbox.publish("hook.sent", {"n": 1}, key="k")
    others = [outbox.publish("hook.sent", {"n": n}) for n in range(3)]
    relay.step()
    relay.step()  # the poison's key is free once it is dead
    assert state(poison).state == OutboxState.DEAD and state(poison).attempts == 1
    letter = DeadLetter.objects.get()
    assert letter.error_class == "jobqueue.publishers.Rejected"
    assert "HTTP 422" in letter.last_error and letter.idempotency_key == poison
    for message_id in [later_same_key, *others]:
        assert state(message_id).state == OutboxState.PUBLISHED
    assert sorted(hook_server.ids()) == sorted([poison, later_same_key, *others])


def test_server_errors_retry_with_backoff_then_dead_letter(relay, hook_server, clock):
    message_id = outbox.publish("hook.sent", {"status": 503})
    relay.step()
    row = state(message_id)
    assert row.state == OutboxState.PENDING and row.attempts == 1
    # Jobs' policy: the first retry waits within [base/2, base) — base 1 s here.
    delay = (row.available_at - clock.now).total_seconds()
    assert 0.5 <= delay < 1.0
    assert relay.step() == 0  # not due yet
    clock.advance(1.0)
    assert relay.step() == 1
    row = state(message_id)
    assert 1.0 <= (row.available_at - clock.now).total_seconds() < 2.0
    clock.advance(2.0)
    relay.step()  # third attempt of three
    row = state(message_id)
    assert row.state == OutboxState.DEAD and row.attempts == 3
    letter = DeadLetter.objects.get()
    assert [e["message"] for e in letter.errors] == [
        "webhook hooks: HTTP 503 Service Unavailable"
    ] * 3
    assert len(hook_server.received) == 3


def test_rate_limit_waits_the_servers_retry_after(relay, clock):
    message_id = outbox.publish("hook.sent", {"status": 429, "retry_after": "120"})
    relay.step()
    row = state(message_id)
    assert row.state == OutboxState.PENDING
    assert row.available_at == clock.now + timedelta(seconds=120)
    assert row.errors[0]["exception_class_path"] == "jobqueue.errors.RateLimited"


def test_read_timeout_and_refused_connection_are_transient(settings, hook_server, clock):
    config = outbox_config(hook_server.url)
    config["DESTINATIONS"]["hooks"]["read_timeout"] = 0.2
    config["DESTINATIONS"]["hooks"]["concurrency"] = 2
    config["DESTINATIONS"]["down"] = {"url": "http://127.0.0.1:9/", "secret": "s"}
    config["ROUTES"]["down.*"] = "webhook:down"
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": config}
    relay = Relay(relay_id="test-relay", clock=clock)
    slow = [outbox.publish("hook.slow", {"delay": 1.0}) for _ in range(4)]
    refused = [outbox.publish("down.sent", {"n": n}) for n in range(2)]
    relay.step()
    for message_id, error in [(slow[0], "TimeoutError"), (refused[0], "ConnectionRefusedError")]:
        row = state(message_id)
        assert row.state == OutboxState.PENDING and row.attempts == 1
        assert row.errors[0]["exception_class_path"] == "jobqueue.publishers.Unavailable"
        assert error in row.errors[0]["message"]
    # An unreachable destination fails the unsent rest of its batch with the same error at once,
    # instead of waiting out a timeout per message: the two on the wire (concurrency 2) each
    # timed out, the other two were never sent.
    for first, *rest in (slow, refused):
        for message_id in rest:
            assert state(message_id).errors[0]["message"] == state(first).errors[0]["message"]
    assert sorted(hook_server.ids(), key=int) == slow[:2]


def test_a_webhook_concurrency_that_is_not_a_bounded_integer_dead_letters_with_the_reason(
    settings, relay
):
    config = outbox_config("http://127.0.0.1:9/")
    config["DESTINATIONS"]["hooks"]["concurrency"] = 0
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": config}
    message_id = outbox.publish("hook.sent", {"n": 1})
    relay.step()
    assert state(message_id).state == OutboxState.DEAD
    reason = "concurrency must be an integer from 1 to 512, not 0"
    assert reason in DeadLetter.objects.get().last_error


def test_replayed_dead_letter_is_republished_with_the_same_id(relay, hook_server):
    message_id = outbox.publish("nowhere.yet", {"n": 1})
    relay.step()
    letter = DeadLetter.objects.get()
    relay_config = outbox_config(hook_server.url)
    relay_config["ROUTES"]["nowhere.*"] = "webhook:hooks"
    from django.conf import settings

    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": relay_config}  # the operator fixed the route
    store.replay([letter.pk])
    relay.step()
    assert hook_server.ids() == [message_id]
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYED
    assert state(message_id).state == OutboxState.PUBLISHED


def test_postgres_notify_wakes_an_idle_relay_long_before_its_poll(settings, transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite relays poll")
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": outbox_config()}
    relay = Relay(relay_id="idle-relay", poll_interval=60)
    thread = run_in_thread(relay)
    try:
        wait_until(
            lambda: relay.listener and relay.listener.listening.is_set(), message="relay listening"
        )
        with transaction.atomic():
            message_id = outbox.publish("order.created", {"key": "woken"})
        wait_until(
            lambda: state(message_id).state == OutboxState.PUBLISHED,
            timeout=10,
            message="message published without waiting for the 60 s poll",
        )
    finally:
        relay.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_prune_command_deletes_only_published_rows_past_the_retention():
    old = outbox.publish("order.created", {"key": "old"})
    recent = outbox.publish("order.created", {"key": "recent"})
    unpublished = outbox.publish("order.created", {"key": "waiting"})
    long_ago = timezone.now() - timedelta(days=30)
    OutboxMessage.objects.filter(pk__in=[old, unpublished]).update(created_at=long_ago)
    OutboxMessage.objects.filter(pk=old).update(state=OutboxState.PUBLISHED, published_at=long_ago)
    OutboxMessage.objects.filter(pk=recent).update(
        state=OutboxState.PUBLISHED, published_at=timezone.now() - timedelta(days=6)
    )
    out = StringIO()
    call_command("prune", "--older-than", "7", stdout=out)
    assert "pruned 1 published outbox message(s) older than 7 days" in out.getvalue()
    assert sorted(OutboxMessage.objects.values_list("pk", flat=True)) == [
        int(recent),
        int(unpublished),
    ]


def test_a_publisher_bug_is_recorded_on_the_message_and_retried(settings, clock):
    config = outbox_config()
    config["DESTINATIONS"]["events"] = {"url": "amqp://127.0.0.1:9/", "routing_key": "{nope}"}
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": config}
    message_id = outbox.publish("audit.logged", {"n": 1})
    Relay(relay_id="test-relay", clock=clock).step()
    row = state(message_id)
    assert row.state == OutboxState.PENDING and row.attempts == 1
    assert row.errors[0]["exception_class_path"] == "builtins.KeyError"
    assert "Traceback" in row.errors[0]["traceback"]


def test_an_outbox_dead_letter_replayed_through_the_cli_is_audited_with_its_outcome(
    relay, hook_server, settings
):
    """Operators replay outbox letters like any other (same command, bounds and audit), and the
    ledger says whether each republish was published or died again."""
    from io import StringIO

    from django.core.management import call_command

    from deadletters.models import ReplayItem

    call_command("createoperator", "oncall", role="operator", password="pw-pw-pw")
    message_id = outbox.publish("nowhere.yet", {"n": 1})
    relay.step()
    letter = DeadLetter.objects.get(source="outbox")

    def replay():
        call_command(
            "deadletters",
            "replay",
            "--job-type",
            "outbox:nowhere.yet",
            "--limit",
            "10",
            "--reason",
            "route fixed",
            "--operator",
            "oncall",
            stdout=StringIO(),
        )
        return ReplayItem.objects.latest("pk")

    first = replay()  # the route is still missing: it dies again
    assert first.made_elsewhere.what == "message republished" and first.job_outcome == "pending"
    relay.step()
    assert first.job_outcome == "failed again"
    settings.REDRIVE = {
        **settings.REDRIVE,
        "OUTBOX": {**settings.REDRIVE["OUTBOX"], "ROUTES": {"nowhere.*": "webhook:hooks"}},
    }
    second = replay()
    relay.step()
    assert hook_server.ids() == [message_id]
    assert (first.job_outcome, second.job_outcome) == ("failed again", "done")
    letter.refresh_from_db()
    assert letter.replays == 2 and letter.state == DeadLetterState.REPLAYED


def test_a_destination_slower_than_half_the_lease_is_flagged_at_start(settings, caplog):
    """Leases are renewed between messages: a publish that can outlast half the lease risks a
    second relay sending the same message, so the relay says so when it starts."""
    settings.REDRIVE = {
        **settings.REDRIVE,
        "OUTBOX": outbox_config(),
    }  # hooks: 2 s connect + 5 s read
    Relay(relay_id="quick", lease_seconds=30, burst=True).run()
    assert "destination_slower_than_lease" not in caplog.text
    Relay(relay_id="tight", lease_seconds=10, burst=True).run()
    assert "destination_slower_than_lease relay=tight destination=hooks" in caplog.text


def readme_outbox() -> dict:
    """The README's REDRIVE["OUTBOX"] example, as written."""
    import re

    from tests.conftest import BASE_DIR

    text = (BASE_DIR / "README.md").read_text()
    (block,) = re.findall(r'^```python\n(REDRIVE\["OUTBOX"\] = .*?)^```', text, re.S | re.M)
    scope = {"REDRIVE": {}}
    exec(block, scope)
    return scope["REDRIVE"]["OUTBOX"]


def test_the_readmes_destinations_start_a_relay_without_a_warning(settings, caplog):
    """Their timeouts are the defaults, whose sum stays under half the default lease; one that
    can outlast half of it is still flagged."""
    config = readme_outbox()
    assert set(config["DESTINATIONS"]) == {"billing", "events"}
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": config}
    Relay(relay_id="as-documented", burst=True).run()
    assert "event=relay_started relay=as-documented" in caplog.text
    assert "destination_slower_than_lease" not in caplog.text
    config["DESTINATIONS"]["billing"]["read_timeout"] = 12.0
    config["DESTINATIONS"]["events"]["timeout"] = 8.0
    Relay(relay_id="slow", burst=True).run()
    flagged = [r.getMessage() for r in caplog.records if "slower_than_lease" in r.getMessage()]
    assert [line.split(" advice=")[0] for line in flagged] == [
        "event=destination_slower_than_lease relay=slow destination=billing "
        "connect_plus_read=17.0s lease=30.0s",
        "event=destination_slower_than_lease relay=slow destination=events "
        "connect_plus_read=16.0s lease=30.0s",
    ]


def test_a_batchs_webhooks_go_out_side_by_side_bounded_by_the_destinations_concurrency(
    settings, hook_server, clock
):
    config = outbox_config(hook_server.url)
    config["DESTINATIONS"]["hooks"]["concurrency"] = 4
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": config}
    hook_server.delay = 0.05  # a receiver that takes 50 ms per request
    ids = [outbox.publish("hook.sent", {"n": n}, key=f"order:{n}") for n in range(20)]
    assert Relay(relay_id="test-relay", batch_size=50, clock=clock).step() == 20
    assert sorted(hook_server.ids(), key=int) == ids  # each delivered once
    assert 1 < hook_server.most_at_once <= 4  # side by side, never more than the pool
    assert hook_server.overlaps == []  # never two of one key (or one id) in flight
    assert set(OutboxMessage.objects.values_list("state", flat=True)) == {OutboxState.PUBLISHED}


def test_stopping_finishes_the_sends_in_flight_and_hands_back_the_unsent_rest(
    settings, hook_server, transactional_db
):
    config = outbox_config(hook_server.url)
    config["DESTINATIONS"]["hooks"]["concurrency"] = 2
    settings.REDRIVE = {**settings.REDRIVE, "OUTBOX": config}
    hook_server.delay = 0.5
    ids = [outbox.publish("hook.sent", {"n": n}) for n in range(6)]
    relay = Relay(relay_id="stopping-relay", batch_size=10)
    thread = run_in_thread(relay)
    try:
        wait_until(lambda: len(hook_server.ids()) == 2, message="two sends in flight")
        relay.stop()
        thread.join(timeout=30)
    finally:
        relay.stop()
    assert not thread.is_alive()
    sent = hook_server.ids()
    assert sorted(sent, key=int) == ids[:2]  # nothing new went out once stopping
    for message_id in ids:
        row = state(message_id)
        if message_id in sent:
            assert row.state == OutboxState.PUBLISHED
        else:  # handed back, the attempt not counted
            assert (row.state, row.attempts) == (OutboxState.PENDING, 0)
