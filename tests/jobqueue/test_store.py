"""The store's transitions, with an injected clock: seed 004's test list on both databases."""

from datetime import timedelta

import pytest
from django.db import DataError, transaction
from django.utils import timezone

from jobqueue import store
from jobqueue.models import DeadLetter, DeadLetterState, Execution, Job, JobState
from jobqueue.store import jobs
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def claim(now, limit=10, lease=5.0, worker="w1", queues=None):
    return store.claim(worker_id=worker, queues=queues, limit=limit, lease_seconds=lease, now=now)


def enqueue(task_path="tests.tasks.noop", **kw):
    kw.setdefault("run_after", T0)
    job, _ = store.enqueue(store.NewJob(task_path=task_path, **kw), now=T0)
    return job


def error(job, now, message="boom"):
    return store.error_entry(
        job,
        class_path="builtins.ConnectionError",
        message=message,
        traceback="Traceback ...",
        now=now,
    )


def test_job_scheduled_for_later_is_not_claimable_until_due():
    enqueue(run_after=at(10))
    assert claim(at(9.999)) == []
    [job] = claim(at(10))
    assert job.state == JobState.RUNNING and job.attempts == 1


def test_claim_writes_a_fresh_lease_and_records_the_worker():
    enqueue()
    [job] = claim(at(0), lease=5, worker="host:1")
    row = Job.objects.get(pk=job.pk)
    assert row.lease_token == job.lease_token and len(job.lease_token) >= 32
    assert row.locked_until == at(5)
    assert row.locked_by == "host:1" and row.worker_ids == ["host:1"]
    assert row.started_at == at(0)


def test_a_claimed_job_is_the_row_as_the_orm_reads_it():
    """The claim builds its Job instances without the ORM (jobqueue.store.rows) and fills in
    the lease it wrote rather than reading it back: every field must match a fresh read."""
    enqueue(args=[1, "two", {"three": [3.5, None]}], kwargs={"k": "é"}, idempotency_key="key:1")
    enqueue(priority=-2, queue_name="other")
    claimed = claim(at(1), lease=7, worker="host:2")
    assert len(claimed) == 2
    for job in claimed:
        row = Job.objects.get(pk=job.pk)
        for field in Job._meta.concrete_fields:
            mine, theirs = getattr(job, field.attname), getattr(row, field.attname)
            assert mine == theirs and type(mine) is type(theirs), field.attname
            # Timestamps in the same zone object too (PostgreSQL's claim reads them with
            # psycopg's loader alone where Django's would give UTC anyway).
            assert getattr(mine, "tzinfo", None) is getattr(theirs, "tzinfo", None), field.attname
        assert job._state.adding is False and job._state.db == "default"


@pytest.mark.parametrize(
    ("zone", "djangos"), [(None, False), ("Europe/Paris", True), ("UTC (by name)", True)]
)
def test_a_claim_reads_timestamps_with_djangos_loader_unless_its_zone_is_utc(
    monkeypatch, zone, djangos
):
    """Django gives each timestamp the connection's zone (DATABASES TIME_ZONE): the claim reads
    them with psycopg's loader alone only where that zone is datetime.UTC itself (a ZoneInfo
    named UTC would differ in its tzinfo)."""
    from zoneinfo import ZoneInfo

    import psycopg
    from django.db import connection

    from jobqueue.store.postgresql import _utc_timestamps

    if connection.vendor != "postgresql":
        pytest.skip("the timestamp loader is PostgreSQL's")
    connection.ensure_connection()
    if zone is not None:
        name = "UTC" if zone.startswith("UTC") else zone
        monkeypatch.setitem(connection.__dict__, "timezone", ZoneInfo(name))
    cursor = psycopg.Cursor(connection.connection)
    before = cursor.adapters.get_loader(
        cursor.adapters.types["timestamptz"].oid, psycopg.pq.Format.TEXT
    )
    _utc_timestamps(connection, cursor)
    after = cursor.adapters.get_loader(
        cursor.adapters.types["timestamptz"].oid, psycopg.pq.Format.TEXT
    )
    assert (after is before) is djangos
    assert before.__module__.startswith("django.")


def test_claim_takes_at_most_the_limit_in_priority_order():
    low = [enqueue(priority=0) for _ in range(3)]
    high = enqueue(priority=10)
    batch = claim(at(0), limit=2)
    assert {j.pk for j in batch} == {high.pk, low[0].pk}


def test_claim_filters_by_queue():
    enqueue(queue_name="emails")
    other = enqueue(queue_name="reports")
    assert [j.pk for j in claim(at(0), queues=["reports"])] == [other.pk]


def test_a_claimed_job_is_not_claimed_again_while_its_lease_lasts():
    enqueue()
    assert len(claim(at(0), lease=1)) == 1
    assert claim(at(0.999)) == []


def test_acknowledge_marks_done_and_keeps_the_return_value():
    enqueue()
    [job] = claim(at(0))
    assert store.acknowledge([(job, {"ok": 1})], now=at(0.5)) == {job.pk}
    row = Job.objects.get(pk=job.pk)
    assert row.state == JobState.DONE and row.return_value == {"ok": 1}
    assert row.lease_token is None and row.finished_at == at(0.5)


def test_one_acknowledgement_stores_each_jobs_own_return_value_of_any_shape():
    values = [None, "null", 0, False, "", [None], {"a": [1, {"b": 'é \\ "'}]}, 10**20]
    for _ in values:
        enqueue()
    claimed = claim(at(0), limit=len(values))
    assert store.acknowledge(list(zip(claimed, values, strict=True)), now=at(0.5)) == {
        job.pk for job in claimed
    }
    stored = dict(Job.objects.values_list("pk", "return_value"))
    assert [stored[job.pk] for job in claimed] == values
    # A task that returned None stored JSON null, not SQL NULL: the ORM cannot tell them apart,
    # a filter on the column can.
    assert Job.objects.filter(return_value__isnull=True).count() == 0


def test_a_return_value_over_the_payload_limit_is_refused_before_anything_is_acknowledged(
    settings,
):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_PAYLOAD_BYTES": 100}
    enqueue()
    enqueue()
    small, big = claim(at(0), limit=2)
    with pytest.raises(DataError, match="the return value is 202 bytes, over the 100-byte limit"):
        store.acknowledge([(small, "x"), (big, "x" * 200)], now=at(0.5))
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.RUNNING}


def test_stale_acknowledgement_after_reclaim_changes_nothing():
    enqueue()
    [first] = claim(at(0), lease=1)
    [second] = claim(at(1), lease=1, worker="w2")  # exactly at expiry: swept and re-claimed
    assert second.pk == first.pk and second.attempts == 2
    assert store.acknowledge([(first, None)], now=at(1)) == set()
    assert Job.objects.get(pk=first.pk).state == JobState.RUNNING
    assert store.acknowledge([(second, None)], now=at(1.5)) == {second.pk}


def test_acknowledgement_after_expiry_is_refused_even_before_anyone_reclaims():
    enqueue()
    [job] = claim(at(0), lease=1)
    assert store.acknowledge([(job, None)], now=at(1)) == set()
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_stale_failure_after_reclaim_changes_nothing():
    enqueue()
    [first] = claim(at(0), lease=1)
    [second] = claim(at(2), lease=1, worker="w2")
    assert not store.fail(first, error(first, at(2)), retry_at=None, now=at(2))
    row = Job.objects.get(pk=second.pk)
    assert row.state == JobState.RUNNING and row.lease_token == second.lease_token
    assert not DeadLetter.objects.exists()


def test_failure_schedules_a_retry_that_is_not_due_before_its_time():
    enqueue(max_attempts=3)
    [job] = claim(at(0))
    assert store.fail(job, error(job, at(0.1)), retry_at=at(5), now=at(0.1))
    row = Job.objects.get(pk=job.pk)
    assert row.state == JobState.READY and row.run_after == at(5)
    assert [e["message"] for e in row.errors] == ["boom"]
    assert claim(at(4.9)) == []
    assert claim(at(5))[0].attempts == 2


def test_exhaustion_dead_letters_with_class_message_traceback_and_attempts():
    original = enqueue(
        max_attempts=3, idempotency_key="receipt:7", args=[7], queue_name="mail", priority=3
    )
    for n in range(3):
        [job] = claim(at(n * 10))
        retry_at = at(n * 10 + 5) if n < 2 else None
        assert store.fail(
            job, error(job, at(n * 10 + 1), f"fail {n + 1}"), retry_at=retry_at, now=at(n * 10 + 1)
        )
    job = Job.objects.get(pk=original.pk)
    assert job.state == JobState.DEAD and job.attempts == 3
    letter = DeadLetter.objects.get()
    assert letter.job_id == letter.original_job_id == job.pk
    assert letter.attempts == 3 and letter.max_attempts == 3
    assert letter.error_class == "builtins.ConnectionError"
    assert letter.last_error == "fail 3" and letter.traceback == "Traceback ..."
    assert [e["message"] for e in letter.errors] == ["fail 1", "fail 2", "fail 3"]
    assert letter.first_failed_at == at(1) and letter.dead_lettered_at == at(21)
    assert (letter.idempotency_key, letter.args, letter.queue_name, letter.priority) == (
        "receipt:7",
        [7],
        "mail",
        3,
    )
    assert letter.state == DeadLetterState.PENDING and letter.replays == 0


def test_final_attempt_crash_becomes_a_dead_letter_after_the_lease_expires(
    caplog, django_capture_on_commit_callbacks
):
    enqueue(max_attempts=1)
    [job] = claim(at(0), lease=1)  # the worker dies here, never acknowledging
    assert claim(at(0.9)) == []
    assert not DeadLetter.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert claim(at(1)) == []  # the sweep in this claim retires it
    [line] = [r.getMessage() for r in caplog.records if r.name == "jobqueue.sweep"]
    assert line.split()[:2] == ["event=lease_expired", f"job_id={job.pk}"]
    assert "worker=w1 outcome=dead" in line
    letter = DeadLetter.objects.get()
    assert letter.error_class == "jobqueue.errors.LeaseExpired"
    assert "w1" in letter.last_error
    assert Job.objects.get(pk=job.pk).state == JobState.DEAD


def test_expired_lease_with_attempts_left_is_claimable_again_and_the_crash_is_recorded(
    caplog, django_capture_on_commit_callbacks
):
    enqueue(max_attempts=3)
    claim(at(0), lease=1)
    with django_capture_on_commit_callbacks(execute=True):
        [again] = claim(at(2), worker="w2")
    [line] = [r.getMessage() for r in caplog.records if r.name == "jobqueue.sweep"]
    assert "attempt=1 worker=w1 outcome=retry" in line
    assert again.attempts == 2 and again.locked_by == "w2"
    assert again.errors[0]["exception_class_path"] == "jobqueue.errors.LeaseExpired"


def test_heartbeat_extends_only_a_live_lease_that_is_ours():
    enqueue()
    [job] = claim(at(0), lease=1)
    assert store.extend_leases([job], lease_seconds=1, now=at(0.5)) == {job.pk}
    assert Job.objects.get(pk=job.pk).locked_until == at(1.5)
    assert claim(at(1.2)) == []  # still leased thanks to the heartbeat
    assert store.extend_leases([job], lease_seconds=1, now=at(1.5)) == set()  # expired: lost


def test_release_gives_the_job_back_without_spending_an_attempt():
    enqueue()
    [job] = claim(at(0))
    assert store.release([job], now=at(0.2)) == 1
    row = Job.objects.get(pk=job.pk)
    assert row.state == JobState.READY and row.attempts == 0 and row.worker_ids == []
    assert claim(at(0.2))[0].attempts == 1


def test_enqueue_with_a_live_key_returns_the_existing_job():
    first = enqueue(idempotency_key="k")
    again, created = store.enqueue(
        store.NewJob(task_path="tests.tasks.noop", idempotency_key="k"), now=T0
    )
    assert not created and again.pk == first.pk
    assert Job.objects.count() == 1


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job():
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue()
        raise RuntimeError("the business write failed")
    assert not Job.objects.exists()


def test_enqueue_refuses_what_json_cannot_carry():
    with pytest.raises(ValueError):
        enqueue(args=[float("nan")])
    with pytest.raises(TypeError):
        enqueue(kwargs={"when": object()})
    assert not Job.objects.exists()


def dead_letter_from_worker(max_attempts=1, key="receipt:1"):
    """A dead letter produced through the real transitions, not inserted."""
    enqueue(max_attempts=max_attempts, idempotency_key=key, args=[1])
    [job] = claim(timezone.now())
    assert store.fail(job, error(job, timezone.now()), retry_at=None)
    return DeadLetter.objects.get(job_id=job.pk)


def test_replay_keeps_identity_with_a_fresh_budget_and_refuses_a_second_replay():
    letter = dead_letter_from_worker()
    outcome = store.replay([letter.pk])
    new = outcome.done[letter.pk]
    assert outcome.skipped == {}
    assert (new.task_path, new.args, new.kwargs, new.idempotency_key) == (
        letter.task_path,
        letter.args,
        letter.kwargs,
        letter.idempotency_key,
    )
    assert new.attempts == 0 and new.state == JobState.READY
    assert new.replayed_from_id == letter.pk
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYING and letter.replays == 1
    assert letter.replay_job_id == new.pk
    again = store.replay([letter.pk])
    assert again.done == {} and again.skipped == {letter.pk: store.SKIP_REASONS["replaying"]}
    assert Job.objects.filter(replayed_from=letter).count() == 1


def test_replayed_job_done_marks_the_letter_replayed():
    letter = dead_letter_from_worker()
    store.replay([letter.pk])
    [job] = claim(timezone.now())
    assert store.acknowledge([(job, None)]) == {job.pk}
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYED
    assert store.replay([letter.pk]).skipped == {letter.pk: store.SKIP_REASONS["replayed"]}


def test_replayed_job_that_dies_again_returns_the_same_letter_to_pending(burials):
    letter = dead_letter_from_worker()
    store.replay([letter.pk])
    [job] = claim(timezone.now())
    assert store.fail(job, error(job, timezone.now(), "still down"), retry_at=None)
    burials.returned(letter)
    assert DeadLetter.objects.count() == 1
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.PENDING and letter.replays == 1
    assert letter.last_error == "still down" and len(letter.errors) == 2
    assert store.replay([letter.pk]).done  # replayable again


def test_replay_skips_an_item_whose_key_a_live_job_holds():
    letter = dead_letter_from_worker(key="k")
    enqueue(idempotency_key="k")  # someone enqueued the same obligation afresh
    outcome = store.replay([letter.pk, 999_999])
    assert outcome.skipped == {letter.pk: store.SKIP_KEY_HELD, 999_999: store.SKIP_MISSING}


def test_discard_keeps_the_row_and_marks_it():
    letter = DeadLetterFactory()
    replaying = DeadLetterFactory(replaying=True)
    outcome = store.discard([letter.pk, replaying.pk])
    assert list(outcome.done) == [letter.pk] and replaying.pk in outcome.skipped
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.DISCARDED and letter.discarded_at is not None
    assert store.replay([letter.pk]).skipped == {letter.pk: "discarded"}


def test_once_records_a_key_and_rolls_back_with_the_work():
    import jobqueue

    with jobqueue.once("charge:1") as first:
        assert first
    with jobqueue.once("charge:1") as first:
        assert not first
    with pytest.raises(RuntimeError), jobqueue.once("charge:2") as first:
        assert first
        raise RuntimeError("the work failed")
    assert list(Execution.objects.values_list("idempotency_key", flat=True)) == ["charge:1"]


def test_factories_build_consistent_rows():
    running = JobFactory(running=True)
    assert running.lease_token and running.locked_until
    assert DeadLetterFactory(permanent=True).attempts == 1


def test_a_new_job_carries_every_column_of_the_model():
    """store._job_from skips Model.__init__: a column it forgot would be a deferred field that
    silently queries the database when read."""
    job = jobs._job_from(store.NewJob(task_path="t"), now=T0)
    assert {f.attname for f in Job._meta.concrete_fields} <= set(vars(job))
    assert job.get_deferred_fields() == set()


def test_each_leased_table_is_extended_by_a_statement_for_its_own_leased_state():
    """The heartbeat's SQL is one template per dialect, formatted per leased table: the state
    it guards on must be the one the lease lifecycle calls leased."""
    from jobqueue.store import leases, postgresql, sqlite
    from jobqueue.store.sql_common import LEASED

    assert {table.table: table.leased for table in (leases.JOBS, leases.OUTBOX)} == LEASED
    for dialect in (postgresql, sqlite):
        for table, state in LEASED.items():
            assert (
                f"UPDATE {table}" in dialect.EXTEND[table] and f"'{state}'" in dialect.EXTEND[table]
            )


def test_checked_json_is_stored_as_given_not_encoded_again():
    """The worker checks and encodes a return value once (CheckedJSON); acknowledging it stores
    that text, and a plain string is still a value to encode."""
    checked = store.CheckedJSON(store.storable_json({"ok": [1, 2]}))
    assert store.storable_json(checked) is checked
    assert store.storable_json("plain") == '"plain"'


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("prepared", [True, False])
def test_hot_statements_run_prepared_unless_turned_off(settings, prepared):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    if settings.REDRIVE.get("POOLER"):
        pytest.skip("a pooler's server connections are shared: their statements are not ours")
    settings.REDRIVE = {**settings.REDRIVE, "PREPARED_STATEMENTS": prepared}
    connection.close()  # a fresh session: its prepared statements are only ours
    enqueue()
    [job] = claim(timezone.now(), lease=30)
    assert store.acknowledge([(job, {"ok": True})]) == {job.pk}
    assert Job.objects.get(pk=job.pk).return_value == {"ok": True}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert (cursor.fetchone()[0] >= 3) is prepared
