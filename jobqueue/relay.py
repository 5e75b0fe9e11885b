"""The outbox relay: claim messages with a lease, publish them, mark them published.

    claim (short transaction, lease token) ─▶ publish (no transaction open) ─▶ mark published
                                                                               (only if the
                                                                               lease is ours)

A crash between publish and mark republishes the message after its lease expires, with the same
message id: delivery is at least once and consumers deduplicate on the id. The `jobs`
destination writes to this database, so it publishes and marks in one transaction instead.
Network destinations get a batch at once: RabbitMQ publishes it whole and then waits for the
broker's confirms, webhooks go out through a bounded pool of senders; either way exactly the
messages the destination took are marked, the rest retried (a batch holds at most one message
per key, so sending its messages side by side keeps each key's order).

Several relays may run at once (SKIP LOCKED / SQLite's write lock keep their claims apart; the
claim's per-key rule keeps a key's messages one at a time, in id order). On PostgreSQL a
LISTEN connection wakes the relay when a message commits; polling covers everything else.

Stopping: SIGTERM/SIGINT (runrelay) or stop() finishes the messages on the wire (a webhook's
in-flight sends, a broker batch awaiting its confirms), hands the rest of the batch back (attempt
not counted) and exits; a second signal exits at once.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback as tb
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from datetime import timedelta

from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from jobqueue import publishers
from jobqueue.backoff import retry_delay
from jobqueue.conf import setting
from jobqueue.errors import class_path, classify
from jobqueue.faults import FaultPoints
from jobqueue.listener import Listener, listen_params
from jobqueue.logfmt import line_text, log_line, log_lines
from jobqueue.loop import Loop, process_id
from jobqueue.models import OutboxMessage
from jobqueue.outbox import route_for
from jobqueue.store import outbox_messages as outbox_store

logger = logging.getLogger("jobqueue.relay")

# Crash drills, like the worker's REDRIVE_FAULT: the relay SIGKILLs itself at that point.
fault_point = FaultPoints(
    "REDRIVE_RELAY_FAULT", {"after_claim", "after_publish", "after_mark"}, "relay"
)


def log_event(event: str, message: OutboxMessage, level=logging.INFO, **fields):
    """One line per message event: event=… message_id=… topic=… key=… attempt=…"""
    if logger.isEnabledFor(level):
        logger.log(level, event_text(event, message, **fields))


def event_text(event: str, message: OutboxMessage, **fields) -> str:
    return line_text(
        event,
        message_id=message.pk,
        topic=message.topic,
        key=message.key or "-",
        attempt=message.attempts,
        **fields,
    )


class AttemptsExhausted(Exception):
    """Claimed again after its last attempt's lease expired (the relay died each time)."""


@dataclass
class Stats:
    claimed: int = 0
    published: int = 0
    retried: int = 0
    dead: int = 0
    leases_lost: int = 0
    released: int = 0
    db_errors: int = 0


class Relay(Loop):
    def __init__(
        self,
        *,
        relay_id: str | None = None,
        batch_size: int | None = None,
        lease_seconds: float | None = None,
        poll_interval: float | None = None,
        burst: bool = False,
        sweep_interval: float = 1.0,
        mark_interval: float = 1.0,
        clock: Callable = timezone.now,
        using: str = "default",
    ):
        self.relay_id = relay_id or process_id()
        super().__init__(who="relay", kind="relay", ident=self.relay_id, using=using, log=logger)
        self.batch_size = batch_size or setting("OUTBOX", "BATCH_SIZE")
        self.lease_seconds = lease_seconds or setting("OUTBOX", "LEASE_SECONDS")
        self.poll_interval = poll_interval or setting("OUTBOX", "POLL_INTERVAL")
        self.burst = burst
        self.sweep_interval = sweep_interval
        # Slow destinations: successes are marked at least this often, so a crash mid-batch
        # republishes seconds of messages, not the whole batch.
        self.mark_interval = mark_interval
        self.clock = clock
        self.stats = Stats()
        self.listener: Listener | None = None
        self._publishers: dict[str | None, publishers.Publisher] = {}
        self._last_sweep = 0.0

    # --- lifecycle -----------------------------------------------------------------------

    def run(self) -> int:
        log_line(
            logger, logging.INFO, "relay_started", relay=self.relay_id, batch=self.batch_size,
            lease=f"{self.lease_seconds:.1f}s", burst=self.burst,
        )  # fmt: skip
        self._warn_of_slow_destinations()
        self.listener = self._start_listener()
        try:
            while not self.stopping:
                try:
                    claimed = self.step()
                    self._db_backoff = 0.0
                except DatabaseError as exc:
                    self._database_trouble(exc)
                    continue
                if self.burst and not claimed:
                    break
                if not claimed:
                    self.wake.wait(self.poll_interval)
                    self.wake.clear()
        finally:
            if self.listener:
                self.listener.stop()
                self.listener.join(timeout=2.0)
            for publisher in self._publishers.values():
                publisher.close()
        stats = self.stats
        log_line(
            logger, logging.INFO, "relay_stopped", relay=self.relay_id, claimed=stats.claimed,
            published=stats.published, retried=stats.retried, dead=stats.dead,
            leases_lost=stats.leases_lost,
        )  # fmt: skip
        return 0

    def _start_listener(self):
        params = listen_params(connections[self.using])
        if params is None:
            return None
        listener = Listener(
            params,
            outbox_store.NOTIFY_CHANNEL,
            self.wake,
            name="relay-listener",
        )
        listener.start()
        return listener

    # --- one round -----------------------------------------------------------------------

    def step(self) -> int:
        """Claim one batch and see every message in it to an outcome; returns how many."""
        now_mono = time.monotonic()
        sweep = now_mono - self._last_sweep >= self.sweep_interval
        if sweep:
            self._last_sweep = now_mono
        messages = outbox_store.claim(
            relay_id=self.relay_id,
            limit=self.batch_size,
            lease_seconds=self.lease_seconds,
            now=self.clock(),
            using=self.using,
            sweep=sweep,
        )
        if not messages:
            return 0
        fault_point("after_claim")
        self.stats.claimed += len(messages)
        log_line(logger, logging.DEBUG, "claim_batch", relay=self.relay_id, n=len(messages))
        groups: dict[str | None, list[OutboxMessage]] = {}
        for message in messages:
            groups.setdefault(route_for(message.topic), []).append(message)
        for spec, group in groups.items():
            if self.stopping:
                self._release(group)
                continue
            publisher = self._publisher(spec)
            group = self._bury_exhausted(group, publisher)
            if publisher.transactional:
                self._publish_in_transaction(publisher, spec, group)
            elif publisher.concurrency:
                self._publish_concurrently(publisher, spec, group)
            else:
                self._publish_batch(publisher, spec, group)
        return len(messages)

    def _publisher(self, spec: str | None) -> publishers.Publisher:
        if spec not in self._publishers:
            self._publishers[spec] = publishers.build(spec, using=self.using)
        return self._publishers[spec]

    def _max_attempts(self, publisher) -> int:
        return publisher.max_attempts or setting("OUTBOX", "MAX_ATTEMPTS")

    def _bury_exhausted(self, group, publisher):
        budget = self._max_attempts(publisher)
        keep = []
        for message in group:
            if message.attempts <= budget:
                keep.append(message)
                continue
            self._settle_failure(
                message,
                AttemptsExhausted(f"{budget} attempts used up by expired leases"),
                "",
                publisher,
            )
        return keep

    def _publish_in_transaction(self, publisher, spec, group):
        """Destinations in this database: mark and write in one transaction.

        Marking first leaves only the messages whose lease is still ours (their rows stay
        locked until commit), so the jobs written are exactly those of the marked messages.
        """
        if not group:
            return
        jobs, failed = publisher.plan(group)
        deliverable = [m for m in group if m.pk in jobs]
        with transaction.atomic(using=self.using):
            marked = outbox_store.mark_published(deliverable, now=self.clock(), using=self.using)
            publisher.write([job for pk in sorted(marked) for job in jobs[pk]])
            fault_point("after_publish")
        fault_point("after_mark")
        self._report_marked(deliverable, marked, spec)
        for message in group:
            if message.pk in failed:
                self._settle_failure(message, failed[message.pk], "", publisher)

    def _publish_batch(self, publisher, spec, group):
        """Network destinations that take a whole batch (RabbitMQ pipelines it and waits for
        the broker's confirms): exactly the messages reported delivered are marked published,
        the others are retried or dead-lettered. No transaction is open meanwhile."""
        group = self._keep_leases(group) if group else []
        if not group:
            return
        try:
            outcomes = publisher.publish(group)
            failures = {m.pk: (outcomes[m.pk], "") for m in group if outcomes[m.pk] is not None}
        except Exception as exc:  # noqa: BLE001 - recorded and retried, never silent
            publisher.close()
            formatted = "".join(tb.format_exception(exc))
            failures = {m.pk: (exc, formatted) for m in group}
        self._mark([m for m in group if m.pk not in failures], spec)
        for message in group:
            if message.pk in failures:
                self._settle_failure(message, *failures[message.pk], publisher)

    def _publish_concurrently(self, publisher, spec, group):
        """Webhooks: up to publisher.concurrency messages on the wire at once. The claim gives a
        batch at most one message per key, so no key ever has two in flight. Only this thread
        touches the database: it keeps the leases, marks and records outcomes as sends finish."""
        pool = publisher.executor()
        pending = deque(group)
        running: dict[Future, OutboxMessage] = {}
        succeeded: list[OutboxMessage] = []
        last_mark = time.monotonic()
        down: tuple[BaseException, str] | None = None
        half_lease = timedelta(seconds=self.lease_seconds / 2)
        while pending or running:
            if not self.stopping and down is None and pending:
                if pending[0].locked_until - self.clock() <= half_lease:
                    kept = {m.pk for m in self._keep_leases([*pending, *running.values()])}
                    pending = deque(m for m in pending if m.pk in kept)
                while pending and len(running) < publisher.concurrency:
                    message = pending.popleft()
                    running[pool.submit(publisher.post, message)] = message
            if not running:
                break
            # Wake at least every quarter lease to keep the leases of the messages still out.
            finished, _ = wait(running, timeout=self.lease_seconds / 4, return_when=FIRST_COMPLETED)
            for future in finished:
                message = running.pop(future)
                outcome, formatted = self._outcome_of(future)
                if outcome is None:
                    succeeded.append(message)
                    continue
                self._settle_failure(message, outcome, formatted, publisher)
                if down is None and publishers.destination_down(outcome):
                    # The destination itself is unreachable: the unsent rest of the batch fails
                    # with the same error now, rather than each waiting out a timeout.
                    down = (outcome, formatted)
            if down is not None:
                for rest in pending:
                    self._settle_failure(rest, *down, publisher)
                pending.clear()
            if succeeded and time.monotonic() - last_mark >= self.mark_interval:
                self._mark(succeeded, spec)
                succeeded, last_mark = [], time.monotonic()
        self._mark(succeeded, spec)
        if pending:
            self._release(list(pending))

    def _outcome_of(self, future) -> tuple[BaseException | None, str]:
        """A send's outcome; a publisher's own bug is recorded on the message like any failure."""
        exc = future.exception()
        if exc is None:
            return future.result(), ""
        return exc, "".join(tb.format_exception(exc))

    def _warn_of_slow_destinations(self):
        """Leases are extended between messages, not during one: a destination whose timeouts
        let one publish outlast half the lease could see a message sent by two relays at once."""
        for name, config in (setting("OUTBOX", "DESTINATIONS") or {}).items():
            worst = sum(publishers.timeouts(config))
            if worst >= self.lease_seconds / 2:
                log_line(
                    logger, logging.WARNING, "destination_slower_than_lease",
                    relay=self.relay_id, destination=name, connect_plus_read=f"{worst:.1f}s",
                    lease=f"{self.lease_seconds:.1f}s",
                    advice="keep a destination's timeouts under half of OUTBOX LEASE_SECONDS",
                )  # fmt: skip

    def _keep_leases(self, pending: Sequence[OutboxMessage]) -> list[OutboxMessage]:
        """Heartbeat: with under half the lease left, extend the leases of the rest."""
        now = self.clock()
        # One claim gave the batch one lease_until, and extensions move them together.
        if min(m.locked_until for m in pending[:1]) - now > timedelta(
            seconds=self.lease_seconds / 2
        ):
            return list(pending)
        kept = outbox_store.extend_leases(
            pending, lease_seconds=self.lease_seconds, now=now, using=self.using
        )
        for message in pending:
            if message.pk not in kept:
                self._lease_lost(message, "heartbeat")
        return [m for m in pending if m.pk in kept]

    def _mark(self, succeeded, spec):
        if not succeeded:
            return
        fault_point("after_publish")
        marked = outbox_store.mark_published(succeeded, now=self.clock(), using=self.using)
        fault_point("after_mark")
        self._report_marked(succeeded, marked, spec)

    def _report_marked(self, messages, marked, spec):
        logged = logger.isEnabledFor(logging.INFO)
        lines = []
        for message in messages:
            if message.pk in marked:
                self.stats.published += 1
                if logged:
                    lines.append(
                        event_text("published", message, destination=spec, relay=self.relay_id)
                    )
            else:
                # Published, but another relay now owns it and will publish it again with the
                # same message id: consumers deduplicate.
                self._lease_lost(message, "mark")
        log_lines(logger, logging.INFO, lines)  # a line per message, written together

    def _settle_failure(self, message, exc: BaseException, formatted: str, publisher):
        now = self.clock()
        verdict = classify(exc)
        budget = self._max_attempts(publisher)
        entry = outbox_store.error_entry(
            message,
            class_path=class_path(type(exc)),
            text=str(exc),
            traceback=formatted or "".join(tb.format_exception_only(exc)),
            now=now,
        )
        fields = {"error": class_path(type(exc)), "relay": self.relay_id}
        if verdict.retry and message.attempts < budget:
            delay = verdict.delay
            if delay is None:
                delay = retry_delay(
                    message.attempts,
                    base=setting("OUTBOX", "BACKOFF_BASE"),
                    cap=setting("OUTBOX", "BACKOFF_CAP"),
                )
            retry_at = now + timedelta(seconds=delay)
            if outbox_store.retry(message, entry, retry_at=retry_at, now=now, using=self.using):
                self.stats.retried += 1
                log_event(
                    "retried", message, logging.WARNING, retry_at=retry_at.isoformat(), **fields
                )
            else:
                self._lease_lost(message, "retry")
            return
        letter = outbox_store.bury(message, entry, max_attempts=budget, now=now, using=self.using)
        if letter is None:
            self._lease_lost(message, "dead_letter")
            return
        self.stats.dead += 1
        log_event("dead_lettered", message, logging.ERROR, dead_letter=letter.pk, **fields)

    def _release(self, messages):
        if not messages:
            return
        try:
            released = outbox_store.release(messages, now=self.clock(), using=self.using)
        except DatabaseError as exc:
            log_line(logger, logging.WARNING, "release_failed", count=len(messages), error=exc)
            return
        self.stats.released += released
        log_line(logger, logging.INFO, "leases_released", relay=self.relay_id, count=released)

    def _lease_lost(self, message, during: str):
        self.stats.leases_lost += 1
        log_event("lease_lost", message, logging.WARNING, during=during, relay=self.relay_id)


def run_in_thread(relay: Relay) -> threading.Thread:
    """Run a relay beside a worker (runworker --relay); its Django connection dies with it."""

    def target():
        try:
            relay.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="relay", daemon=True)
    thread.start()
    return thread
