"""PostgreSQL statements of the store, and the dialect that runs them (`PostgreSQL`): SKIP LOCKED
claims and one-statement batch updates."""

import datetime
import json
import logging
import re
import time
from contextlib import ExitStack, suppress
from typing import Literal, NamedTuple

from django.db import DatabaseError

from jobqueue.conf import setting
from jobqueue.logfmt import log_line

from .sql_common import (
    COUNT_ACKNOWLEDGED,
    JOB_ROWS,
    ORDER_IS_FREE,
    OUTBOX_KEY_IS_FREE,
    OUTBOX_ROWS,
    SharedSQL,
    claimed,
    per_leased_table,
)

logger = logging.getLogger("jobqueue")

NOTIFY_CHANNEL = "jobqueue"

# Each ordering line's head: the first ready job of each line, one probe of ready_line_idx per
# line (a loose index scan, ordering_key > the last line's), at most MAX_LINES lines. A line's
# later jobs can run only after its head, so the head is the only one of its line a claim need
# look at: the claim used to walk every waiting job of every line (0.08 of the plain drain).
LINES = """lines(k, pos, id) AS (
    (SELECT ordering_key, COALESCE(ordering_position, id), id FROM jobqueue_job
     WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NOT NULL
     ORDER BY ordering_key, COALESCE(ordering_position, id) LIMIT 1)
    UNION ALL
    SELECT next.* FROM lines CROSS JOIN LATERAL (
        SELECT ordering_key, COALESCE(ordering_position, id), id FROM jobqueue_job
        WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NOT NULL
          AND ordering_key > lines.k
        ORDER BY ordering_key, COALESCE(ordering_position, id) LIMIT 1
    ) AS next
)"""
# The heads that may run now: due, of a served queue, and free (ORDER_IS_FREE: nothing of the
# line running, or dead and blocking); each looked up by its id (LATERAL: `id IN (lines)` was
# planned as a walk of the whole table on one not yet analyzed), locked as it is found where
# {lock} says so.
HEADS = """
    SELECT head.id, head.priority, head.run_after
    FROM (SELECT id FROM lines LIMIT {max_lines}) AS line CROSS JOIN LATERAL (
        SELECT id, priority, run_after FROM jobqueue_job
        WHERE id = line.id AND state = 'ready' AND run_after <= %(now)s {queue_filter}
          AND queue_name NOT IN (SELECT queue_name FROM jobqueue_pausedqueue)
          AND {order_is_free}
        {lock}
    ) AS head"""
MAX_LINES = 1_000

# The plain jobs' walks keep ORDER_IS_FREE though their jobs have no ordering key (its first
# term decides, nothing more runs): the planner's estimate of the walk stays what it was, and on a
# table not yet analyzed it walks the index rather than reading the whole table to sort it.
#
# MATERIALIZED makes the planner run each locking subquery exactly once: a bare
# `id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)` may be re-evaluated per outer row (for
# example under a nested loop) and lease more than n rows. The plain jobs and the free heads are
# each locked as they are found (FOR UPDATE is refused in a UNION), the best `limit` of both are
# leased, and the others are let go when the transaction ends. The first ORDER BY picks which
# jobs; the last one is the order the worker starts them in (RETURNING promises none).
PLAIN = """
WITH RECURSIVE plain AS MATERIALIZED (
    SELECT id, priority, run_after FROM jobqueue_job
    WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NULL
      AND run_after <= %(now)s {queue_filter}
      AND queue_name NOT IN (SELECT queue_name FROM jobqueue_pausedqueue)
      AND {order_is_free}
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)"""
WITH_HEADS = (
    ", "
    + LINES
    + """, heads AS MATERIALIZED ("""
    + HEADS.replace("{lock}", "FOR UPDATE SKIP LOCKED")
    + """
    ORDER BY head.priority DESC, head.run_after, head.id
    LIMIT %(limit)s
), picked AS MATERIALIZED (
    SELECT id FROM (SELECT * FROM plain UNION ALL SELECT * FROM heads) AS both_kinds
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
)"""
)
PICK = PLAIN + WITH_HEADS

# A key's limit, as a claim reads it: that of its next job (a key's jobs share one as a rule).
# A claim reads no more of a key's jobs than that less what runs (it read `limit` of each key,
# 20,000 rows for 100 keys, to take two of each); each job it takes is still within its own.
KEY_LIMIT = """SELECT concurrency_limit FROM jobqueue_job
            WHERE state = 'ready' AND concurrency_key = key.k
            ORDER BY priority DESC, run_after, id LIMIT 1"""

# While jobs with a concurrency key are ready: among the keys this claim holds (LOCK_KEYS), per
# key its next jobs up to its limit less what runs now (counted after the lock, so no other
# claim of the key is in flight), ranked within the key, and the keyless jobs as one more key;
# the batch takes every key's first before any key's second.
PICK_KEYED = (
    """
WITH RECURSIVE """
    + LINES
    + """, candidates AS (
    SELECT next.id, next.priority, next.run_after,
           row_number() OVER (
               PARTITION BY key.k ORDER BY next.priority DESC, next.run_after, next.id
           ) AS rank,
           next.concurrency_limit - running.n AS free
    FROM unnest(%(keys)s::text[]) AS key(k)
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM jobqueue_job
        WHERE state = 'running' AND concurrency_key = key.k
    ) AS running
    CROSS JOIN LATERAL (
        SELECT id, priority, run_after, concurrency_limit FROM jobqueue_job
        WHERE state = 'ready' AND concurrency_key = key.k AND run_after <= %(now)s {queue_filter}
          AND queue_name NOT IN (SELECT queue_name FROM jobqueue_pausedqueue)
          AND {order_is_free}
        ORDER BY priority DESC, run_after, id
        LIMIT least(%(limit)s, greatest(0, ({key_limit}) - running.n))
    ) AS next
    UNION ALL
    -- The jobs without a key share the batch as one more key, without a limit.
    SELECT id, priority, run_after,
           row_number() OVER (ORDER BY priority DESC, run_after, id), %(limit)s
    FROM (
        (SELECT id, priority, run_after FROM jobqueue_job
         WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NULL
           AND run_after <= %(now)s {queue_filter}
           AND queue_name NOT IN (SELECT queue_name FROM jobqueue_pausedqueue)
           AND {order_is_free}
         ORDER BY priority DESC, run_after, id
         LIMIT %(limit)s)
        UNION ALL
        -- The lines' free heads, among them (HEADS).
        ("""
    + HEADS.replace("{lock}", "")
    + """)
    ) AS plain
), picked AS MATERIALIZED (
    -- `state = 'ready'` again here: the candidates were read in this statement's snapshot, and
    -- a job another claim leased and committed since is locked in its new version (PostgreSQL
    -- re-checks this WHERE on it, not the candidates' conditions): without it the job would be
    -- leased a second time while it runs.
    -- = ANY(ARRAY(…)): each by its id (`id IN (…)` was planned as a hash join over a walk of
    -- every ready job).
    SELECT id FROM jobqueue_job
    WHERE id = ANY(ARRAY(
        SELECT id FROM candidates WHERE rank <= free
        ORDER BY rank, priority DESC, run_after, id
        LIMIT %(limit)s
    )) AND state = 'ready'
    FOR UPDATE SKIP LOCKED
)"""
)

# MATERIALIZED makes the planner run the locking subquery exactly once: a bare
# `id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)` may be re-evaluated per outer row (for
# example under a nested loop) and lease more than n rows. The first ORDER BY picks which jobs;
# the last one is the order the worker starts them in (RETURNING promises none).
LEASE = """, claimed AS (
UPDATE jobqueue_job AS j SET
    state = 'running',
    attempts = j.attempts + 1,
    lease_token = gen_random_uuid()::text,
    locked_until = %(lease_until)s,
    locked_by = %(worker_id)s::text,
    started_at = COALESCE(j.started_at, %(now)s),
    last_attempted_at = %(now)s,
    worker_ids = j.worker_ids || jsonb_build_array(%(worker_id)s::text)
FROM picked
WHERE j.id = picked.id
RETURNING {returning}
)
SELECT {columns} FROM claimed ORDER BY priority DESC, run_after, id
"""
CLAIM = PICK + LEASE
CLAIM_KEYED = PICK_KEYED + LEASE

# Queue by queue, for a claim that must leave whole queues out: some are paused, some are under a
# rate limit (claimed apart), or the worker serves several by name. PICK walks every ready job in
# priority order and filters those out one by one (a paused queue of 200,000 jobs made each claim
# take 36 ms instead of 4; several named queues were sorted whole). Here the queues with ready
# jobs are found with one index probe each (a loose index scan of ready_queue_idx), each served
# queue gives at most `limit` of its best jobs, locked as they are found, and the best `limit` of
# those are leased; the others are let go when the transaction ends.
PICK_BY_QUEUE = (
    """
WITH RECURSIVE queues(q) AS ({queue_source}), served AS (
    SELECT q FROM queues
    WHERE q IS NOT NULL {queue_served}
      AND q NOT IN (SELECT queue_name FROM jobqueue_pausedqueue)
), plain AS MATERIALIZED (
    -- unnest(ARRAY(…)): the planner takes it for ten queues rather than the loose scan's
    -- hundred, so the statement's estimate stays below JIT's threshold (compiling it took 24 ms).
    SELECT best.id, best.priority, best.run_after
    FROM unnest(ARRAY(SELECT q FROM served)) AS served(q) CROSS JOIN LATERAL (
        SELECT id, priority, run_after FROM jobqueue_job
        WHERE queue_name = served.q AND state = 'ready' AND concurrency_key IS NULL
          AND ordering_key IS NULL AND run_after <= %(now)s AND {order_is_free}
        ORDER BY priority DESC, run_after, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS best
    ORDER BY best.priority DESC, best.run_after, best.id
    LIMIT %(limit)s
)"""
    + WITH_HEADS
)
CLAIM_BY_QUEUE = PICK_BY_QUEUE + LEASE
READY_QUEUES = """
    (SELECT queue_name FROM jobqueue_job
     WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NULL
     ORDER BY queue_name LIMIT 1)
    UNION ALL
    SELECT (SELECT queue_name FROM jobqueue_job
            WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NULL
              AND queue_name > queues.q
            ORDER BY queue_name LIMIT 1)
    FROM queues WHERE queues.q IS NOT NULL"""
# A worker's named queues are its queues as they are: no need to look for the others.
NAMED_QUEUES = "SELECT DISTINCT unnest(%(queues)s::text[])"


class ClaimShape(NamedTuple):
    """Which of the claim statements (CLAIMS) a claim runs."""

    pick: Literal["plain", "keyed", "by_queue"]  # CLAIM, CLAIM_KEYED or CLAIM_BY_QUEUE
    named: bool = False  # only the worker's named queues (%(queues)s)
    excluding: bool = False  # some queues left out (%(excluded)s: those under a rate limit)


# Every claim statement, one per shape (built here, once). A claim without keys that leaves
# whole queues out (a paused one, the rate-limited ones claimed apart: jobqueue.store.jobs.claim)
# or names several goes queue by queue; a keyed one leaves them out in its filter.
CLAIM_SHAPES = (
    ClaimShape("plain"),
    ClaimShape("plain", named=True),
    ClaimShape("keyed"),
    ClaimShape("keyed", named=True),
    ClaimShape("keyed", excluding=True),
    ClaimShape("keyed", named=True, excluding=True),
    ClaimShape("by_queue"),
    ClaimShape("by_queue", named=True),
    ClaimShape("by_queue", excluding=True),
    ClaimShape("by_queue", named=True, excluding=True),
)


def _claim_statement(shape: ClaimShape) -> str:
    parts = {
        "returning": JOB_ROWS.columns("j"),
        "columns": JOB_ROWS.columns(),
        "order_is_free": ORDER_IS_FREE,
        "max_lines": MAX_LINES,
        "key_limit": KEY_LIMIT,
    }
    queue_filter = ("AND queue_name = ANY(%(queues)s)" if shape.named else "") + (
        " AND queue_name <> ALL(%(excluded)s)" if shape.excluding else ""
    )
    if shape.pick == "by_queue":
        return CLAIM_BY_QUEUE.format(
            queue_source=NAMED_QUEUES if shape.named else READY_QUEUES,
            queue_served=" AND q <> ALL(%(excluded)s)" if shape.excluding else "",
            queue_filter=queue_filter,
            **parts,
        )
    return (CLAIM_KEYED if shape.pick == "keyed" else CLAIM).format(
        queue_filter=queue_filter, **parts
    )


CLAIMS = {shape: _claim_statement(shape) for shape in CLAIM_SHAPES}

# The concurrency keys with ready jobs, one index step per key however many jobs each holds
# (a loose index scan), at most MAX_KEYS of them per claim.
READY_KEYS = """
WITH RECURSIVE keys(k) AS (
    (SELECT concurrency_key FROM jobqueue_job
     WHERE state = 'ready' AND concurrency_key IS NOT NULL
     ORDER BY concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT concurrency_key FROM jobqueue_job
            WHERE state = 'ready' AND concurrency_key > keys.k
            ORDER BY concurrency_key LIMIT 1)
    FROM keys WHERE keys.k IS NOT NULL
)
SELECT k FROM keys WHERE k IS NOT NULL LIMIT %(max_keys)s
"""
MAX_KEYS = 1_000

# The keys no other claim holds, held until this transaction ends: a key's running count read
# after this cannot miss a claim of the key that is in flight elsewhere.
LOCK_KEYS = """
SELECT k FROM unnest(%(keys)s::text[]) AS k
WHERE pg_try_advisory_xact_lock(hashtextextended('redrive:concurrency:' || k, 0))
"""

# The batch is one jsonb array of [id, token, value] arrays: return values go in as the JSON text
# the worker already checked, and composing it cost a fraction of quoting three arrays element by
# element; parsed once, each value is taken as it is (json_to_recordset parsed each row's fields
# again: 3.5 against 3.0 ms for 200 jobs, EXPLAIN ANALYZE, hand-run). A JSON null stays a JSON
# null (`-> 2`), not SQL NULL.
# One statement: the jobs done and counted (COUNT_ACKNOWLEDGED) at once, in one round trip.
ACKNOWLEDGE = f"""
WITH acked AS (
    UPDATE jobqueue_job AS j SET
        state = 'done', finished_at = %(now)s, return_value = v.r -> 2,
        lease_token = NULL, locked_until = NULL, locked_by = NULL
    FROM jsonb_array_elements(%(rows)s::jsonb) AS v(r)
    WHERE j.id = (v.r ->> 0)::bigint AND j.state = 'running' AND j.lease_token = v.r ->> 1
      AND j.locked_until > %(now)s
    RETURNING j.id, j.queue_name, j.task_path
), counted AS ({COUNT_ACKNOWLEDGED.format(acked="acked")})
SELECT id FROM acked
"""
_PLAIN_TOKEN = re.compile(r"[0-9A-Za-z-]*").fullmatch  # what gen_random_uuid()::text makes

# A heartbeat's leases, in one statement; a table's own state for "leased" is formatted in.
_EXTEND = """
UPDATE {table} AS t SET locked_until = %(until)s
FROM unnest(%(ids)s::bigint[], %(tokens)s::text[]) AS v(id, token)
WHERE t.id = v.id AND t.state = '{leased}' AND t.lease_token = v.token
  AND t.locked_until > %(now)s
RETURNING t.id
"""
EXTEND = per_leased_table(_EXTEND)

INSERT_KEYED = """
INSERT INTO jobqueue_job (
    task_path, queue_name, priority, backend, args, kwargs, idempotency_key, state, run_after,
    attempts, max_attempts, worker_ids, enqueued_at, errors, ordering_key, ordering_on_dead,
    concurrency_key, concurrency_limit, replayed_from_id, ordering_position
) VALUES (
    %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, 'ready', %s, 0, %s, '[]', %s, '[]', %s, %s, %s, %s,
    %s, %s
)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND NOT (state = 'dead')
DO NOTHING
RETURNING id
"""

# Keyed jobs of a batch in one statement (a keyed insert per job was 80% of the outbox relay's
# time, whose fan-out is keyed), their rows as INSERT_MANY's JSON document with the key columns
# after the payloads (keyed_rows_json), inserted in their order: of two with one key the first
# goes in and the second is the no-op. Only inserted rows come back, each with its key, to tell
# which.
INSERT_KEYED_MANY = """
INSERT INTO jobqueue_job (
    task_path, queue_name, priority, backend, args, kwargs, idempotency_key, state, run_after,
    attempts, max_attempts, worker_ids, enqueued_at, errors, ordering_key, ordering_on_dead,
    concurrency_key, concurrency_limit, replayed_from_id, ordering_position
)
SELECT r->>0, r->>1, (r->>2)::int, r->>3, r->6, r->7, r->>8, 'ready', (r->>4)::timestamptz, 0,
       (r->>5)::int, '[]', %(now)s, '[]', r->>9, r->>10, r->>11, (r->>12)::int,
       (r->>13)::bigint, (r->>14)::bigint
FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS e(r, n)
ORDER BY e.n
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND NOT (state = 'dead')
DO NOTHING
RETURNING id, idempotency_key
"""


# One statement per chunk: the rows as one JSON document of arrays, composed from the payloads'
# already checked JSON (quoting arrays of text element by element cost more than the INSERT) and
# parsed once as jsonb, each row's payloads taken from it as they are (json_to_recordset, which
# parses each row's fields again, cost the server 7.5 of 25 us a row, hand-run); ids back in input
# order (RETURNING follows the INSERT … SELECT … ORDER BY order, as Django's bulk_create also
# relies on), and one notification per queue with due jobs.
_INSERT_MANY = """
WITH ins AS (
    INSERT INTO jobqueue_job (
        task_path, queue_name, priority, backend, args, kwargs, state, run_after,
        attempts, max_attempts, worker_ids, enqueued_at, errors{line_columns}
    )
    SELECT r->>0, r->>1, (r->>2)::int, r->>3, r->6, r->7, 'ready', (r->>4)::timestamptz, 0,
           (r->>5)::int, '[]', %(now)s, '[]'{line_values}
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS e(r, n)
    ORDER BY e.n
    RETURNING id, queue_name, run_after
), woken AS (
    SELECT count(pg_notify(%(channel)s, q)) AS n
    FROM (SELECT DISTINCT queue_name AS q FROM ins WHERE run_after <= %(now)s) AS due
)
SELECT id, (SELECT n FROM woken) FROM ins
"""
# The ordering and concurrency keys (of jobs with either; as INSERT_KEYED_MANY's rows):
# through the ORM, a job with a key took four round trips and a third of a plain one's rate.
LINE_COLUMNS = ", ordering_key, ordering_on_dead, concurrency_key, concurrency_limit"
INSERT_MANY = _INSERT_MANY.format(line_columns="", line_values="")
INSERT_MANY_IN_LINES = _INSERT_MANY.format(
    line_columns=LINE_COLUMNS, line_values=", r->>9, r->>10, r->>11, (r->>12)::int"
)


NEVER_BY_COUNT = 2**31


def fetch(connection, sql, params, *, timestamps=False) -> list[tuple]:
    """Run one of the queue's hot statements on Django's connection and return its rows.

    PostgreSQL plans a statement anew on each execution unless it is prepared: for a single
    enqueue that was a quarter of its time. So, unless REDRIVE["PREPARED_STATEMENTS"] is off,
    they run prepared (server-side binding, psycopg names and caches them per connection),
    with Django's own checks before and its error translation around.

    `timestamps`: the rows are many and carry timestamps (a claim's), read by _utc_timestamps.
    """
    if not _prepares():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    import psycopg

    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    raw = _preparing(connection)
    try:
        with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
            if timestamps:
                _utc_timestamps(connection, cursor)
            cursor.execute(sql, params, prepare=True)
            return cursor.fetchall()
    except DatabaseError as exc:
        _refused_preparing(exc)
        raise


def _utc_timestamps(connection, cursor) -> None:
    """Django reads each timestamptz with psycopg's loader and then, in Python, gives it the
    connection's zone: about a quarter of a claimed row's reading (three timestamps a row; 14.0
    against 10.2 us of CPU a row, hand-run). Where that zone is UTC and so is the session's,
    psycopg's loader alone gives the same value, the same tzinfo included (datetime.UTC), so
    the cursor uses it."""
    if connection.timezone is datetime.UTC and (
        cursor.connection.pgconn.parameter_status(b"TimeZone") == b"UTC"
    ):
        from psycopg.types.datetime import TimestamptzLoader

        cursor.adapters.register_loader("timestamptz", TimestamptzLoader)


# Set when the server refused our prepared statements (_refused_preparing): from then on this
# process runs its statements unprepared.
_prepared_refused = False


def _prepares() -> bool:
    # Imported here: an install without the postgres extra imports this module too.
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return (
        bool(setting("PREPARED_STATEMENTS"))
        and not setting("POOLER")
        and not _prepared_refused
        and is_psycopg3
    )


def _refused_preparing(exc: BaseException) -> None:
    """A prepared statement another client made, or one that vanished: the connection is shared
    by a transaction pooler that REDRIVE["POOLER"] does not name. Say so once and stop preparing
    in this process, so the retry that follows (the worker's, the caller's) succeeds instead of
    failing the same way forever."""
    global _prepared_refused
    import psycopg

    refused = (psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName)
    cause = exc if isinstance(exc, refused) else exc.__cause__  # psycopg's, or Django's wrapper
    if _prepared_refused or not isinstance(cause, refused):
        return
    _prepared_refused = True
    log_line(
        logger, logging.WARNING, "prepared_statements_off",
        error=(str(cause).splitlines() or [type(cause).__name__])[0],
        hint="behind PgBouncer in transaction pooling mode? set REDRIVE['POOLER'] = "
        "'transaction' (no session state at all)",
    )  # fmt: skip


def _preparing(connection):
    """Django's open psycopg connection, ready to prepare the statements that ask to be."""
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns preparing off for the whole connection (for poolers); psycopg then
        # ignores prepare=True too. A threshold no query reaches prepares only what asks.
        raw.prepare_threshold = NEVER_BY_COUNT
    return raw


def rows_json(jobs, *, keyed=False) -> str:
    """The chunk's rows as INSERT_MANY's JSON array: per job [task, queue, priority, backend,
    run_after, max_attempts, args, kwargs]. Payloads go in as the JSON text check_payload made;
    what rows share (a bulk enqueue is one task: same task, queue, backend, priority, time and
    budget) is encoded once."""
    shared: dict[tuple, str] = {}

    def head(j) -> str:
        key = (j.task_path, j.queue_name, j.priority, j.backend, j.run_after, j.max_attempts)
        text = shared.get(key)
        if text is None:
            text = shared[key] = (
                f"[{json.dumps(j.task_path)},{json.dumps(j.queue_name)},{int(j.priority)},"
                f'{json.dumps(j.backend)},"{j.run_after.isoformat()}",{int(j.max_attempts)},'
            )
        return text

    if not keyed:
        return (
            "["
            + ",".join(f"{head(j)}{j.encoded_payload[0]},{j.encoded_payload[1]}]" for j in jobs)
            + "]"
        )
    return (
        "["
        + ",".join(
            f"{head(j)}{j.encoded_payload[0]},{j.encoded_payload[1]},{_key_columns(j)}]"
            for j in jobs
        )
        + "]"
    )


def keyed_rows_json(jobs) -> str:
    """INSERT_KEYED_MANY's rows: INSERT_MANY's, then per job its idempotency key, ordering key,
    ordering on dead, concurrency key and limit, the letter it replays and its ordering place."""
    return rows_json(jobs, keyed=True)


_NO_LINE = ",null" * 6  # a keyed job of no ordering or concurrency key, of no replay (most)


def _key_columns(j) -> str:
    key = json.dumps(j.idempotency_key)
    if j.ordering_key is None and j.concurrency_key is None and j.replayed_from_id is None:
        return key + _NO_LINE
    rest = (
        j.ordering_key,
        j.ordering_on_dead,
        j.concurrency_key,
        j.concurrency_limit,
        j.replayed_from_id,
        j.ordering_position,
    )
    return ",".join([key, *map(json.dumps, rest)])


# The common case, one job: plain parameters (array parameters cost more to quote).
_INSERT_ONE = """
WITH ins AS (
    INSERT INTO jobqueue_job (
        task_path, queue_name, priority, backend, args, kwargs, state, run_after,
        attempts, max_attempts, worker_ids, enqueued_at, errors{line_columns}
    ) VALUES (
        %s, %s, %s, %s, %s::jsonb, %s::jsonb, 'ready', %s, 0, %s, '[]', %s, '[]'{line_values}
    )
    RETURNING id, queue_name, run_after
)
SELECT id, CASE WHEN run_after <= %s THEN pg_notify(%s, queue_name) END FROM ins
"""
INSERT_ONE = _INSERT_ONE.format(line_columns="", line_values="")
INSERT_ONE_IN_LINES = _INSERT_ONE.format(line_columns=LINE_COLUMNS, line_values=", %s, %s, %s, %s")


def _in_lines(job) -> bool:
    return job.ordering_key is not None or job.concurrency_key is not None


def _insert_many(jobs, now) -> tuple[str, dict]:
    """INSERT_MANY and its parameters, or INSERT_MANY_IN_LINES for a batch with keys."""
    params = {"now": now, "channel": NOTIFY_CHANNEL}
    if any(map(_in_lines, jobs)):
        return INSERT_MANY_IN_LINES, params | {"rows": keyed_rows_json(jobs)}
    return INSERT_MANY, params | {"rows": rows_json(jobs)}


def _take_ids(jobs, rows) -> None:
    """INSERT_MANY's rows, in the jobs' order: each job its id."""
    for job, (job_id, _) in zip(jobs, rows, strict=True):
        job.id = job_id  # the attribute itself: Model.pk's setter costs more


class Sender:
    """A bulk enqueue's batches of plain jobs, sent in pipeline mode: each INSERT_MANY goes out
    at once and the caller builds the next batch while the server inserts this one (building a
    job's row took 7-8 µs of Python, inserting it ~10.5 µs of the server's: one after the other
    a 1,000-job call took 17-19.5 µs a job, overlapped 13.5-15.5, hand-run). The ids are read
    back on flush, which the caller does before it commits or reads anything. Without pipeline
    mode (psycopg 2, a libpq older than 14) each batch is inserted as it comes."""

    def __init__(self, dialect, connection, now):
        self.dialect, self.connection, self.now = dialect, connection, now
        self._pipelines = _pipelines()
        self._pipeline: ExitStack | None = None  # holds psycopg's pipeline while one is open
        self._sent: list[tuple] = []  # (cursor, jobs) whose ids are still to be read
        self._prepare, self._raw = False, None  # set as the pipeline opens (send)

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None:
            self.flush()
        elif self._pipeline is not None:
            # Leave pipeline mode; the caller's transaction rolls back. The error that got us
            # here is the one to report, not what closing the pipeline says about it.
            stack, self._pipeline, self._sent = self._pipeline, None, []
            with suppress(Exception):
                stack.__exit__(kind, exc, tb)
        return False

    def send(self, jobs):
        if not self._pipelines:
            self.dialect.insert_many(self.connection, jobs, now=self.now)
            return
        import psycopg

        with self.connection.wrap_database_errors:
            if self._pipeline is None:
                self.connection.ensure_connection()
                self.connection.validate_no_broken_transaction()
                # Asked as each pipeline opens: a refusal (_refused_preparing) turns it off.
                self._prepare = _prepares()
                raw = self.connection.connection
                self._raw = _preparing(self.connection) if self._prepare else raw
                stack = ExitStack()
                stack.enter_context(self._raw.pipeline())
                self._pipeline = stack
            # Server-side binding, as fetch(): Django's cursors bind on the client, quoting the
            # batch's JSON into the statement's text, and cannot prepare it.
            cursor = psycopg.Cursor(self._raw)
            try:
                cursor.execute(*_insert_many(jobs, self.now), prepare=self._prepare)
            except Exception as exc:
                _refused_preparing(exc)
                raise
        self._sent.append((cursor, jobs))

    def flush(self):
        if self._pipeline is None:
            return
        stack, self._pipeline = self._pipeline, None
        sent, self._sent = self._sent, []
        try:
            with self.connection.wrap_database_errors:
                stack.close()  # sends the sync and receives every result
                for cursor, jobs in sent:
                    _take_ids(jobs, cursor.fetchall())
                    cursor.close()
        except DatabaseError as exc:
            _refused_preparing(exc)
            raise


def _pipelines() -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return False
    import psycopg

    return psycopg.Pipeline.is_supported()


# Whether any queue is paused, per database, looked up at most once a second: it only chooses
# the statement (both leave paused queues out), so a pause seen late costs at most a second of
# slower claims, never a wrong one.
PAUSED_LOOKUP_SECONDS = 1.0
ANY_PAUSED = "SELECT EXISTS (SELECT 1 FROM jobqueue_pausedqueue)"
_paused_seen: dict[str, tuple[float, bool]] = {}


def _some_queue_paused(connection) -> bool:
    now = time.monotonic()
    seen = _paused_seen.get(connection.alias)
    if seen is None or now - seen[0] >= PAUSED_LOOKUP_SECONDS:
        [(paused,)] = fetch(connection, ANY_PAUSED, {})
        seen = _paused_seen[connection.alias] = (now, paused)
    return seen[1]


def _json_token(token) -> str:
    if token is None:
        return "null"
    return f'"{token}"' if _PLAIN_TOKEN(token) else json.dumps(token)


MARK_REPLAYING = """
UPDATE jobqueue_deadletter AS d SET
    state = 'replaying', replays = d.replays + 1, last_replayed_at = %(now)s,
    replay_job_id = v.job_id, replay_ref = COALESCE(v.ref, d.replay_ref)
FROM unnest(%(ids)s::bigint[], %(jobs)s::bigint[], %(refs)s::text[]) AS v(id, job_id, ref)
WHERE d.id = v.id
"""


# --- the outbox table ---------------------------------------------------------------------

OUTBOX_NOTIFY_CHANNEL = "jobqueue_outbox"
# Advisory locks in PostgreSQL's two-int key space ('outb'), apart from single-bigint users.
OUTBOX_KEY_LOCK_SPACE = 0x6F757462

# Same-key publishers take a transaction-scoped advisory lock on the key before the insert, so
# their ids are allocated in commit order: without it a transaction that took id 10 and commits
# after the one that took id 11 would let the relay publish 11 first.
_OUTBOX_INSERT = """
WITH message AS (
    INSERT INTO jobqueue_outbox
        (topic, "key", payload, state, created_at, available_at, attempts, errors)
    SELECT %(topic)s, %(key)s, %(payload)s::jsonb, 'pending', %(now)s, %(now)s, 0, '[]'
    {serialize}
    RETURNING id
)
SELECT id, pg_notify(%(channel)s, '') FROM message
"""
OUTBOX_SERIALIZE = "FROM (SELECT pg_advisory_xact_lock(%(space)s, hashtext(%(key)s))) AS serialized"
OUTBOX_INSERT = _OUTBOX_INSERT.format(serialize="")  # a message of no key
OUTBOX_INSERT_KEYED = _OUTBOX_INSERT.format(serialize=OUTBOX_SERIALIZE)

# MATERIALIZED: the locking subquery runs exactly once (as in CLAIM).
OUTBOX_CLAIM = f"""
WITH picked AS MATERIALIZED (
    SELECT m.id FROM jobqueue_outbox AS m
    WHERE m.state = 'pending' AND m.available_at <= %(now)s
      AND {OUTBOX_KEY_IS_FREE}
    ORDER BY m.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobqueue_outbox AS m SET
    state = 'leased',
    attempts = m.attempts + 1,
    lease_token = %(token)s,
    locked_until = %(lease_until)s,
    locked_by = %(relay_id)s,
    last_attempted_at = %(now)s
FROM picked
WHERE m.id = picked.id
RETURNING {OUTBOX_ROWS.columns("m")}
"""


# A transaction that cannot hold its locks, nor wait on others', for longer than `seconds`:
# each statement, each lock wait and each pause between statements is bounded (SET LOCAL, so
# through a transaction pooler too, where no session setting would stay the process's own). A
# process frozen inside it (SIGSTOP, a host cut off) has its session ended by the server.
BOUND_TRANSACTION = """
SELECT set_config('statement_timeout', %(ms)s, true),
       set_config('lock_timeout', %(ms)s, true),
       set_config('idle_in_transaction_session_timeout', %(ms)s, true)
"""

# Wake the workers listening on these queues (delivered only if the transaction commits).
NOTIFY = "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q"

# An id column among a list of ids, the list one array parameter however long: an IN list of
# 100,000 parameters costs more to send, parse and plan than the read (issue 47). The array goes
# as its text, '{1,2,3}', cast to the column's type (so its btree and hash operators apply: a
# large array is hashed): psycopg adapting a list of 100,000 ints took 120 ms, the text 18 ms.
AMONG = "{column} = ANY(%s::bigint[])"


def _minute(now: datetime.datetime) -> datetime.datetime:
    return now.replace(second=0, microsecond=0)


class PostgreSQL(SharedSQL):
    """The store's SQL on PostgreSQL (jobqueue.store.dialects.Dialect): batches are single
    statements, the hot ones prepared (fetch)."""

    LOOPS = False  # batches are single statements
    # A bulk enqueue builds and sends its plain jobs this many at a time (Sender): small enough
    # that the first batch, built before anything can overlap, is short; large enough that each
    # statement's own cost is spread (100 to 250 were alike, 1,000 a third slower, hand-run).
    SEND_CHUNK = 100
    _outbox_claim = OUTBOX_CLAIM

    def claim(
        self, connection, *, worker_id, queues, limit, now, lease_until, excluded=None, keys=None
    ):
        """Lease jobs without a concurrency key, or with `keys`: those of the given concurrency
        keys (found by ready_keys), in the caller's transaction, which holds them from here on."""
        if keys is not None:
            keys = [row[0] for row in fetch(connection, LOCK_KEYS, {"keys": keys})]
            if not keys:
                return []
            shape = ClaimShape("keyed", bool(queues), bool(excluded))
        elif excluded or (queues and len(queues) > 1) or _some_queue_paused(connection):
            shape = ClaimShape("by_queue", bool(queues), bool(excluded))
        else:
            shape = ClaimShape("plain", bool(queues))
        params = {
            "now": now,
            "limit": limit,
            "lease_until": lease_until,
            "worker_id": worker_id,
            "queues": queues,
            "excluded": excluded,
            "keys": keys,
        }
        return JOB_ROWS.read(
            connection, fetch(connection, CLAIMS[shape], params, timestamps=True), **claimed(params)
        )

    def ready_keys(self, connection) -> list[str]:
        return [row[0] for row in fetch(connection, READY_KEYS, {"max_keys": MAX_KEYS})]

    def acknowledge(self, connection, rows, *, now):
        document = ",".join(
            f"[{int(job_id)},{_json_token(token)},{result}]" for job_id, token, result in rows
        )
        params = {"rows": f"[{document}]", "now": now, "minute": _minute(now)}
        return {row[0] for row in fetch(connection, ACKNOWLEDGE, params)}

    def extend(self, connection, table, leases, *, now, until):
        ids, tokens = zip(*leases, strict=True)
        params = {"ids": list(ids), "tokens": list(tokens), "now": now, "until": until}
        return {row[0] for row in fetch(connection, EXTEND[table], params)}

    def insert_many(self, connection, jobs, *, now):
        if len(jobs) == 1:
            [job] = jobs
            params = [
                job.task_path,
                job.queue_name,
                job.priority,
                job.backend,
                *job.encoded_payload,
                job.run_after,
                job.max_attempts,
                now,
            ]
            sql = INSERT_ONE
            if _in_lines(job):
                sql = INSERT_ONE_IN_LINES
                params += [
                    job.ordering_key,
                    job.ordering_on_dead,
                    job.concurrency_key,
                    job.concurrency_limit,
                ]
            job.pk = fetch(connection, sql, [*params, now, NOTIFY_CHANNEL])[0][0]
            return
        # One statement: a batch is at most SEND_CHUNK jobs (jobqueue.store.jobs.enqueue_many).
        _take_ids(jobs, fetch(connection, *_insert_many(jobs, now)))

    def insert_keyed(self, connection, jobs, *, now) -> list[int | None]:
        """One job: plain parameters, as before there was a batch statement; more:
        INSERT_KEYED_MANY."""
        if len(jobs) == 1:
            [j] = jobs
            with connection.cursor() as cursor:
                cursor.execute(
                    INSERT_KEYED,
                    [
                        j.task_path, j.queue_name, j.priority, j.backend, *j.encoded_payload,
                        j.idempotency_key, j.run_after, j.max_attempts, j.enqueued_at,
                        j.ordering_key, j.ordering_on_dead, j.concurrency_key,
                        j.concurrency_limit, j.replayed_from_id, j.ordering_position,
                    ],
                )  # fmt: skip
                row = cursor.fetchone()
            return [row[0] if row else None]
        rows = fetch(connection, INSERT_KEYED_MANY, {"now": now, "rows": keyed_rows_json(jobs)})
        by_key = {key: job_id for job_id, key in rows}
        # A key's first job took the id; a later one of the same key is a no-op.
        return [by_key.pop(j.idempotency_key, None) for j in jobs]

    def sender(self, connection, now):
        return Sender(self, connection, now)

    def notify(self, connection, queues):
        if not queues:
            return
        with connection.cursor() as cursor:
            cursor.execute(NOTIFY, [NOTIFY_CHANNEL, sorted(queues)])

    def mark_replaying(self, connection, rows, *, now):
        """One statement (bulk_update's CASE per row and field was most of a replay batch's
        time)."""
        if not rows:
            return
        ids, jobs, refs = zip(*rows, strict=True)
        with connection.cursor() as cursor:
            cursor.execute(
                MARK_REPLAYING,
                {"ids": list(ids), "jobs": list(jobs), "refs": list(refs), "now": now},
            )

    def outbox_insert(self, connection, params) -> int:
        sql = OUTBOX_INSERT if params["key"] is None else OUTBOX_INSERT_KEYED
        with connection.cursor() as cursor:
            cursor.execute(
                sql, {**params, "channel": OUTBOX_NOTIFY_CHANNEL, "space": OUTBOX_KEY_LOCK_SPACE}
            )
            return cursor.fetchone()[0]

    def among(self, column, ids):
        return AMONG.format(column=column), ["{" + ",".join(map(str, ids)) + "}"]

    def bound_transaction(self, connection, seconds: float) -> None:
        with connection.cursor() as cursor:
            cursor.execute(BOUND_TRANSACTION, {"ms": f"{max(1, int(seconds * 1000))}ms"})
