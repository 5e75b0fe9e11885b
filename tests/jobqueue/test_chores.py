"""The chores' election and runner with an injected clock (on whichever database the suite
runs: SQLite and PostgreSQL): one holder of the lease at a time, taken over once it ends,
handed on at a clean exit; the chores run by the leader only, or by every worker, or by none."""

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core import checks
from django.db import DatabaseError, connection, connections
from django.utils import timezone

from jobqueue import store
from jobqueue.chores import LEASE_NAME, Chore, Chores, ScheduleTicks, duties
from jobqueue.models import Job, JobState, LeaderLease, Schedule
from jobqueue.worker import Worker
from tests import tasks as t
from tests.conftest import wait_until

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = 30.0
pytestmark = pytest.mark.django_db


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_one_holder_at_a_time_until_its_lease_ends():
    assert store.leader.acquire_or_renew("x", "a", now=at(0), lease=LEASE)
    assert not store.leader.acquire_or_renew("x", "b", now=at(29.9), lease=LEASE)
    assert store.leader.acquire_or_renew("x", "a", now=at(20), lease=LEASE)  # renewed: to 50
    assert not store.leader.acquire_or_renew("x", "b", now=at(49.9), lease=LEASE)
    assert store.leader.current_holder("x", now=at(49.9)) == "a"
    assert store.leader.acquire_or_renew("x", "b", now=at(50), lease=LEASE)  # a's ran out
    assert not store.leader.acquire_or_renew("x", "a", now=at(51), lease=LEASE)  # b's now
    row = LeaderLease.objects.get(name="x")
    assert (row.holder, row.acquired_at, row.expires_at) == ("b", at(50), at(80))


def test_renewing_keeps_when_the_holder_took_it():
    store.leader.acquire_or_renew("x", "a", now=at(0), lease=LEASE)
    store.leader.acquire_or_renew("x", "a", now=at(10), lease=LEASE)
    row = LeaderLease.objects.get(name="x")
    assert (row.acquired_at, row.expires_at) == (at(0), at(40))


def test_a_released_lease_is_taken_at_once_and_only_its_holder_releases_it():
    store.leader.acquire_or_renew("x", "a", now=at(0), lease=LEASE)
    assert not store.leader.release("x", "b")
    assert store.leader.current_holder("x", now=at(1)) == "a"
    assert store.leader.release("x", "a")
    assert store.leader.current_holder("x", now=at(1)) is None
    assert store.leader.acquire_or_renew("x", "b", now=at(1), lease=LEASE)


def test_leases_of_other_names_are_independent():
    assert store.leader.acquire_or_renew("x", "a", now=at(0), lease=LEASE)
    assert store.leader.acquire_or_renew("y", "b", now=at(0), lease=LEASE)


class Recording(Chore):
    def __init__(self, name="recording", interval=1.0, woke=False):
        self.name, self.interval, self.woke, self.runs = name, interval, woke, []

    def run(self, now):
        self.runs.append(now)
        return self.woke


class Clocks:
    """The wall clock (the lease's times) and the monotonic one (intervals), moved together."""

    def __init__(self):
        self.seconds = 0.0

    def now(self):
        return at(self.seconds)

    def monotonic(self):
        return self.seconds


def runner(holder, chore, clocks, mode="leader"):
    return Chores(
        [chore],
        holder=holder,
        using="default",
        lease_seconds=LEASE,
        mode=mode,
        monotonic=clocks.monotonic,
    )


def test_only_the_leader_runs_the_chores_and_another_takes_over_within_a_lease(caplog):
    clocks = Clocks()
    a_chore, b_chore = Recording(), Recording()
    a, b = runner("a", a_chore, clocks), runner("b", b_chore, clocks)
    with caplog.at_level(logging.INFO, logger="jobqueue.chores"):
        for second in range(20):  # both look every step; a leads, renewing its lease
            clocks.seconds = second
            a.tick(clocks.now())
            b.tick(clocks.now())
    assert len(a_chore.runs) == 20 and b_chore.runs == []
    assert (a.leading, b.leading) == (True, False)
    assert caplog.text.count("event=chores_leader ") == 1
    assert "event=chores_leader holder=a database=default lease_s=30" in caplog.text
    renewed = LeaderLease.objects.get(name=LEASE_NAME).expires_at
    assert renewed == at(10 + LEASE)  # renewed every third of the lease: at 0 and 10

    # a dies (it looks no more): b takes over on its first look after a's lease ends.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jobqueue.chores"):
        while not b.leading:
            clocks.seconds += 0.25
            b.tick(clocks.now())
    took = at(clocks.seconds)
    assert renewed <= took <= renewed + timedelta(seconds=1)  # within a look of its end
    assert b_chore.runs == [took]
    assert "event=chores_leader holder=b" in caplog.text

    # a comes back (a stall, not a death): it finds the lease b's, says so, runs nothing.
    with caplog.at_level(logging.INFO, logger="jobqueue.chores"):
        clocks.seconds += 1
        assert a.tick(clocks.now()) is False
    assert not a.leading and len(a_chore.runs) == 20
    assert "event=chores_leader_lost holder=a" in caplog.text


def test_a_leader_that_stops_hands_the_chores_on_at_once(caplog):
    clocks = Clocks()
    a_chore, b_chore = Recording(), Recording()
    a, b = runner("a", a_chore, clocks), runner("b", b_chore, clocks)
    a.tick(clocks.now())
    with caplog.at_level(logging.INFO, logger="jobqueue.chores"):
        a.release()
    assert "event=chores_leader_released holder=a" in caplog.text
    clocks.seconds = 1  # long before a's lease would have ended
    b.tick(clocks.now())
    assert b.leading and b_chore.runs == [at(1)]


def test_each_chore_runs_at_its_own_interval():
    clocks = Clocks()
    fast, slow = Recording("fast", 1.0), Recording("slow", 5.0)
    chores = Chores(
        [fast, slow], holder="a", using="default", lease_seconds=LEASE, monotonic=clocks.monotonic
    )
    for step in range(40):  # a step every quarter second for ten seconds
        clocks.seconds = step / 4
        chores.tick(clocks.now())
    assert [r.timestamp() - T0.timestamp() for r in fast.runs] == [float(n) for n in range(10)]
    assert [r.timestamp() - T0.timestamp() for r in slow.runs] == [0.0, 5.0]


def test_tick_says_when_a_chore_made_jobs_claimable():
    clocks = Clocks()
    assert runner("a", Recording(woke=True), clocks).tick(clocks.now()) is True
    assert runner("b", Recording(woke=True), clocks, mode="every_worker").tick(at(1)) is True


def test_every_worker_runs_them_unelected_and_off_runs_none():
    clocks = Clocks()
    a_chore, b_chore, c_chore = Recording(), Recording(), Recording()
    a = runner("a", a_chore, clocks, mode="every_worker")
    b = runner("b", b_chore, clocks, mode="every_worker")
    c = runner("c", c_chore, clocks, mode="off")
    for chores in (a, b, c):
        chores.tick(clocks.now())
    assert (len(a_chore.runs), len(b_chore.runs), c_chore.runs) == (1, 1, [])
    assert not LeaderLease.objects.exists()  # no election without "leader"


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="leader, every_worker, off"):
        Chores([], holder="a", using="default", lease_seconds=LEASE, mode="some")


def test_the_mode_is_checked_at_start_up(settings):
    from jobqueue.checks import check_chores

    assert check_chores in checks.registry.registry.get_checks()
    settings.REDRIVE = {"CHORES": "everyone", "PRUNE_SECONDS": -1.0}
    assert [m.id for m in check_chores()] == ["redrive.E036", "redrive.E036"]
    settings.REDRIVE = {"CHORES": "off", "PRUNE_SECONDS": 3600.0}
    assert check_chores() == []


def test_the_list_of_chores(settings):
    settings.REDRIVE = {"SOURCES_SYNC_SECONDS": 60.0, "PRUNE_SECONDS": 0.0}
    assert [c.name for c in duties(using="default")] == [
        "lease_sweep",
        "schedule_ticks",
        "broker_mirror",
    ]
    assert [c.name for c in duties(using="default", brokers=False)] == [
        "lease_sweep",
        "schedule_ticks",
    ]
    settings.REDRIVE = {"SOURCES_SYNC_SECONDS": 0.0, "PRUNE_SECONDS": 3600.0}
    assert [(c.name, c.interval) for c in duties(using="default")] == [
        ("lease_sweep", 1.0),
        ("schedule_ticks", 1.0),
        ("prune", 3600.0),
    ]


def expired_job() -> Job:
    long_ago = T0 - timedelta(hours=1)
    t.noop.using(run_after=long_ago).enqueue()
    [job] = store.claim(worker_id="gone", queues=None, limit=1, lease_seconds=1, now=long_ago)
    return job


@pytest.mark.django_db(transaction=True)
def test_a_worker_sweeps_as_the_leader_and_hands_the_lease_back_at_exit():
    job = expired_job()
    Worker(burst=True, clock=lambda: T0, worker_id="w1").run()
    job.refresh_from_db()
    assert job.state == JobState.DONE  # swept, then claimed again and run
    assert not LeaderLease.objects.exists()  # released on the way out


@pytest.mark.django_db(transaction=True)
def test_a_worker_leaves_the_sweep_to_the_leader_it_is_not():
    job = expired_job()
    store.leader.acquire_or_renew(LEASE_NAME, "someone-else", now=T0, lease=LEASE)
    Worker(burst=True, clock=lambda: T0, worker_id="w1").run()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.locked_by == "gone"  # not its chore
    assert LeaderLease.objects.get().holder == "someone-else"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["off", "every_worker"])
def test_a_worker_without_the_election(mode):
    job = expired_job()
    store.leader.acquire_or_renew(LEASE_NAME, "someone-else", now=T0, lease=LEASE)
    Worker(burst=True, clock=lambda: T0, worker_id="w1", chores=mode).run()
    job.refresh_from_db()
    # every_worker sweeps whoever leads; off never does.
    assert job.state == (JobState.DONE if mode == "every_worker" else JobState.RUNNING)


@pytest.mark.django_db(transaction=True)
def test_a_tick_ends_its_transaction_bounds_there(settings):
    """SET LOCAL: the tick's timeouts end with its transaction (the worker's own session
    settings, or the pooler's, are the next statement's)."""
    settings.REDRIVE = {"LOCK_TIMEOUT": 0.5}
    if connection.vendor != "postgresql":
        pytest.skip("the bounds are PostgreSQL's settings")
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        before = cursor.fetchone()[0]
        with store.schedules.ticking(timeout=0.5):
            cursor.execute("SHOW lock_timeout")
            assert cursor.fetchone()[0] == "500ms"
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == before
    assert ScheduleTicks(using="default").run(T0) is False  # nothing due: no transaction


@pytest.mark.django_db(transaction=True)
def test_a_tick_frozen_inside_its_transaction_stalls_the_next_leader_at_most_its_timeout(
    settings,
):
    """Issue 33's chaos finding: a worker frozen inside the tick's transaction stopped every
    worker's ticking until its session closed. Now the next leader's tick gives up after
    LOCK_TIMEOUT instead of waiting, and the server ends the frozen one's session as soon."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer at a time: its busy timeout bounds the wait")
    settings.REDRIVE = {"LOCK_TIMEOUT": 0.3}  # the next leader's bound
    now = timezone.now()
    row = {"task_path": "tests.tasks.noop", "cron": "* * * * * *", "timezone": "UTC"}
    row |= {"args": [], "kwargs": {}, "overlap": True, "catch_up": "latest", "catch_up_limit": 1}
    store.schedules.upsert("frozen", row, first_tick=now - timedelta(seconds=5), now=now)
    frozen, thaw, failures = threading.Event(), threading.Event(), []

    def freeze():
        try:
            with store.schedules.ticking(timeout=2.0):  # the frozen one's (its own settings)
                Schedule.objects.filter(name="frozen").update(updated_at=now)  # a tick's lock
                frozen.set()
                thaw.wait(10)  # no statement meanwhile: a SIGSTOP's picture
                Schedule.objects.count()
        except DatabaseError as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=freeze)
    thread.start()
    assert frozen.wait(10)
    started = time.monotonic()
    with pytest.raises(DatabaseError, match="timeout"):
        ScheduleTicks(using="default").run(timezone.now())
    assert time.monotonic() - started < 1.5  # its lock_timeout (0.3 s), not the freeze

    def ticked():
        try:
            return ScheduleTicks(using="default").run(timezone.now())
        except DatabaseError:
            connection.close()
            return False

    wait_until(ticked, timeout=10, interval=0.2, message="the frozen session ended")
    thaw.set()
    thread.join(10)
    assert len(failures) == 1  # its session was ended under it: nothing it did committed
    assert Job.objects.filter(task_path="tests.tasks.noop").count() == 1


def test_the_prune_chore_deletes_what_prune_does(caplog):
    from jobqueue.chores import Prune, Retention
    from jobqueue.models import JobCounter, WorkerRecord

    now = timezone.now()
    for minute in (now - timedelta(days=8), now - timedelta(days=6)):
        JobCounter.objects.create(minute=minute, queue_name="q", task_path="t")
    for n, seen in enumerate((now - timedelta(days=2), now - timedelta(minutes=1))):
        WorkerRecord.objects.create(
            worker_id=f"w{n}", host="h", pid=n, started_at=seen, last_heartbeat_at=seen
        )
    with caplog.at_level(logging.INFO, logger="jobqueue.chores"):
        assert (
            Prune(using="default", interval=3600.0, retention=Retention(outbox=1)).run(now) is False
        )
    assert list(JobCounter.objects.values_list("minute", flat=True)) == [now - timedelta(days=6)]
    assert list(WorkerRecord.objects.values_list("worker_id", flat=True)) == ["w1"]
    assert "event=pruned outbox_messages=0 jobs=0" in caplog.text
    assert "job_counters=1 job_timings=0 workers=1" in caplog.text


def test_the_prune_chore_writes_the_entry_prune_writes_once_a_run_deletes_anything():
    """One chore.prune entry a run that deleted something, as `manage.py prune` writes it (the
    one writer, chores.record_prune), by `system` through the channel of Redrive itself, at the
    chore's clock; a run that found nothing writes none."""
    from django.db import transaction

    from jobqueue.chores import Prune
    from jobqueue.models import AuditEntry
    from tests.cli import run
    from tests.factories import JobFactory

    # Past the retention by the chore's clock (T0) and by the command's (the wall clock) alike.
    for _ in range(2):
        JobFactory(done=True, finished_at=at(0) - timedelta(days=30))

    def written():
        return [
            {k: getattr(e, k) for k in ("action", "actor", "target_kind", "targets", "params")}
            for e in AuditEntry.objects.order_by("id")
        ]

    with transaction.atomic():
        assert run("prune").code == 0
        by_command = written()
        transaction.set_rollback(True)
    assert by_command[0]["params"]["deleted"]["jobs"] == 2  # the entry compared is not empty

    chore = Prune(using="default", interval=3600.0)
    assert chore.run(at(0)) is False
    assert written() == by_command
    entry = AuditEntry.objects.get()
    assert (entry.channel, entry.at) == (AuditEntry.Channel.SYSTEM, at(0))
    assert Job.objects.count() == 0

    chore.run(at(3600))  # nothing left to delete
    assert AuditEntry.objects.count() == 1
    assert list(store.audit.verify()) == []


@pytest.mark.django_db(transaction=True)
def test_runchores_once_runs_a_round_as_the_leader_and_hands_the_lease_back(caplog):
    from django.core.management import call_command

    now = timezone.now()
    row = {"task_path": "tests.tasks.noop", "cron": "* * * * *", "timezone": "UTC"}
    row |= {"args": [], "kwargs": {}, "overlap": True, "catch_up": "latest", "catch_up_limit": 1}
    store.schedules.upsert("once", row, first_tick=now - timedelta(minutes=1), now=now)
    expired_job()
    with caplog.at_level(logging.INFO, logger="jobqueue.chores"):
        call_command("runchores", "--once", "--id", "cron-1")
    assert Job.objects.filter(task_path="tests.tasks.noop", state=JobState.READY).count() == 2
    assert "event=chores_leader holder=cron-1" in caplog.text
    assert "event=chores_leader_released holder=cron-1" in caplog.text
    assert not LeaderLease.objects.exists()


def test_a_chore_that_fails_is_logged_and_the_others_still_run(caplog):
    class Broken(Chore):
        name = "broken"

        def run(self, now):
            raise RuntimeError("a bug in a chore")

    clocks, after = Clocks(), Recording()
    chores = Chores(
        [Broken(), after],
        holder="a",
        using="default",
        lease_seconds=LEASE,
        monotonic=clocks.monotonic,
    )
    with caplog.at_level(logging.ERROR, logger="jobqueue.chores"):
        assert chores.tick(clocks.now()) is False
    assert after.runs == [T0]
    assert "event=chore_failed chore=broken holder=a" in caplog.text
