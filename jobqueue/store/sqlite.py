"""SQLite statements of the store, and the dialect that runs them (`SQLite`).

Every store transaction runs as BEGIN IMMEDIATE (settings: transaction_mode), so a claim with its
sweep holds the database's single write lock from its first read. A claim without the sweep is one
UPDATE in autocommit: SQLite takes the write lock when a writing statement starts, before its
subquery reads, so it is as exclusive. Either way no other process can lease the same rows, and
the subquery cannot see a concurrent claim's rows half-updated.
"""

import json
from functools import lru_cache
from typing import NamedTuple

from jobqueue.models import Job

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

_JOB_COLUMNS = JOB_ROWS.columns()

LEASE = """
UPDATE jobqueue_job SET
    state = 'running',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(16))),
    locked_until = %(lease_until)s,
    locked_by = %(worker_id)s,
    started_at = COALESCE(started_at, %(now)s),
    last_attempted_at = %(now)s,
    worker_ids = json_insert(worker_ids, '$[#]', %(worker_id)s)
WHERE id IN ({pick})
RETURNING {returning}
"""
# Each ordering line's first ready job (its head), one probe of ready_line_idx per line (a loose
# index scan), at most MAX_LINES lines, and of those the heads that may run now: due, of a
# served queue, free (ORDER_IS_FREE). A line's later jobs can run only after its head, so the
# claim looks at no other job of the line.
LINES = """WITH RECURSIVE lines(k) AS (
            SELECT min(ordering_key) FROM jobqueue_job
            WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NOT NULL
            UNION ALL
            SELECT (SELECT min(ordering_key) FROM jobqueue_job
                    WHERE state = 'ready' AND concurrency_key IS NULL
                      AND ordering_key IS NOT NULL AND ordering_key > lines.k)
            FROM lines WHERE lines.k IS NOT NULL
            LIMIT {max_lines}
        )"""
HEADS = f"""SELECT id, priority, run_after, concurrency_key, concurrency_limit
        FROM jobqueue_job WHERE id IN (
            {LINES}
            SELECT (SELECT id FROM jobqueue_job
                    WHERE state = 'ready' AND concurrency_key IS NULL
                      AND ordering_key IS NOT NULL AND ordering_key = lines.k
                    ORDER BY COALESCE(ordering_position, id) LIMIT 1)
            FROM lines WHERE lines.k IS NOT NULL
        ) AND state = 'ready' AND run_after <= %(now)s {{queue_filter}}
          AND queue_name NOT IN (SELECT queue_name FROM jobqueue_pausedqueue)
          AND {{order_is_free}}"""
MAX_LINES = 1_000
# The plain jobs' best and the free heads', the best of both.
PICK = f"""
    SELECT id FROM (
        SELECT * FROM (
            SELECT id, priority, run_after FROM jobqueue_job
            WHERE state = 'ready' AND concurrency_key IS NULL AND ordering_key IS NULL
              AND run_after <= %(now)s {{queue_filter}}
              AND queue_name NOT IN (SELECT queue_name FROM jobqueue_pausedqueue)
            ORDER BY priority DESC, run_after, id
            LIMIT %(limit)s)
        UNION ALL
        SELECT id, priority, run_after FROM ({HEADS})
    )
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
"""
# While jobs with a concurrency key are ready: for each key ready_keys found, its next jobs,
# no more than its limit (that of its next job) less what runs (one indexed subquery per key:
# SQLite has no LATERAL), and the keyless jobs' next as one
# more key (the NULL partition); ranked within each key, a key's count capped at its limit less
# what runs now; every key's first before any key's second. One writer at a time (IMMEDIATE
# transactions), so the running count cannot miss a claim in flight.
_CLAIMABLE = """state = 'ready' AND run_after <= %(now)s {queue_filter}
              AND queue_name NOT IN (SELECT queue_name FROM jobqueue_pausedqueue)
              AND {order_is_free}"""
_NEXT_OF_KEY = f"""SELECT * FROM (
            SELECT id, priority, run_after, concurrency_key, concurrency_limit FROM jobqueue_job
            WHERE concurrency_key = %(k{{n}})s AND {_CLAIMABLE}
            ORDER BY priority DESC, run_after, id LIMIT max(0, coalesce(min(%(limit)s, (
                SELECT concurrency_limit FROM jobqueue_job
                WHERE state = 'ready' AND concurrency_key = %(k{{n}})s
                ORDER BY priority DESC, run_after, id LIMIT 1
            ) - (
                SELECT count(*) FROM jobqueue_job
                WHERE state = 'running' AND concurrency_key = %(k{{n}})s
            )), 0)))"""
_NEXT_KEYLESS = f"""SELECT * FROM (
            SELECT id, priority, run_after, concurrency_key, concurrency_limit FROM jobqueue_job
            WHERE concurrency_key IS NULL AND ordering_key IS NULL AND {_CLAIMABLE}
            ORDER BY priority DESC, run_after, id LIMIT %(limit)s)
        UNION ALL SELECT * FROM ({HEADS})"""
PICK_KEYED = """
    SELECT id FROM (
        SELECT id, priority, run_after,
               row_number() OVER (
                   PARTITION BY concurrency_key ORDER BY priority DESC, run_after, id
               ) AS rank,
               CASE WHEN concurrency_key IS NULL THEN %(limit)s ELSE concurrency_limit - (
                   SELECT count(*) FROM jobqueue_job AS r
                   WHERE r.state = 'running' AND r.concurrency_key = candidate.concurrency_key
               ) END AS free
        FROM ({candidates}) AS candidate
    )
    WHERE rank <= free
    ORDER BY rank, priority DESC, run_after, id
    LIMIT %(limit)s
"""
# SQLite joins at most 500 SELECTs in one compound statement: a claim looks at this many keys.
MAX_KEYS = 200
CLAIM = LEASE.replace("{pick}", PICK)


class ClaimShape(NamedTuple):
    """Which claim statement a claim runs (claim_statement). SQLite has no array parameters:
    each named queue, queue left out and concurrency key is a placeholder of its own, so the
    shape is their counts."""

    queues: int = 0  # %(q0)s…: the worker's named queues; 0: every queue
    excluded: int = 0  # %(x0)s…: queues left out (those under a rate limit, claimed apart)
    keys: int | None = None  # %(k0)s…: the keyed claim's concurrency keys; None: the plain claim


@lru_cache(maxsize=1024)  # shapes are few: a worker's queues, its rate limits, <= MAX_KEYS keys
def claim_statement(shape: ClaimShape) -> str:
    """The claim of this shape: CLAIM, or while concurrency keys are ready, LEASE over
    PICK_KEYED's candidates (each key's next jobs, then the keyless jobs' next)."""
    queue_filter = ""
    if shape.queues:
        names = [f"%(q{i})s" for i in range(shape.queues)]
        queue_filter = f"AND queue_name IN ({', '.join(names)})"
    if shape.excluded:
        names = [f"%(x{i})s" for i in range(shape.excluded)]
        queue_filter += f" AND queue_name NOT IN ({', '.join(names)})"
    template = CLAIM
    if shape.keys is not None:
        candidates = " UNION ALL ".join(
            [*(_NEXT_OF_KEY.replace("{n}", str(n)) for n in range(shape.keys)), _NEXT_KEYLESS]
        )
        template = LEASE.replace("{pick}", PICK_KEYED.replace("{candidates}", candidates))
    return template.format(
        queue_filter=queue_filter,
        returning=_JOB_COLUMNS,
        order_is_free=ORDER_IS_FREE,
        max_lines=MAX_LINES,
    )


READY_KEYS = f"""
SELECT DISTINCT concurrency_key FROM jobqueue_job
WHERE state = 'ready' AND concurrency_key IS NOT NULL
LIMIT {MAX_KEYS}
"""


ACKNOWLEDGE = """
UPDATE jobqueue_job SET
    state = 'done', finished_at = %s, return_value = %s,
    lease_token = NULL, locked_until = NULL, locked_by = NULL
WHERE id = %s AND state = 'running' AND lease_token = %s AND locked_until > %s
"""

COUNT_ACKED = COUNT_ACKNOWLEDGED.format(
    acked="(SELECT queue_name, task_path FROM jobqueue_job"
    " WHERE id IN (SELECT value FROM json_each(%(ids)s)))"
)

_EXTEND = """
UPDATE {table} SET locked_until = %s
WHERE id = %s AND state = '{leased}' AND lease_token = %s AND locked_until > %s
"""
EXTEND = per_leased_table(_EXTEND)

INSERT_KEYED = """
INSERT INTO jobqueue_job (
    task_path, queue_name, priority, backend, args, kwargs, idempotency_key, state, run_after,
    attempts, max_attempts, worker_ids, enqueued_at, errors, ordering_key, ordering_on_dead,
    concurrency_key, concurrency_limit, replayed_from_id, ordering_position
) VALUES (
    %s, %s, %s, %s, %s, %s, %s, 'ready', %s, 0, %s, '[]', %s, '[]', %s, %s, %s, %s, %s, %s
)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND NOT (state = 'dead')
DO NOTHING
RETURNING id
"""


def _keyed_row(connection, job) -> list:
    return [
        job.task_path,
        job.queue_name,
        job.priority,
        job.backend,
        *job.encoded_payload,
        job.idempotency_key,
        _ts(connection, job.run_after),
        job.max_attempts,
        _ts(connection, job.enqueued_at),
        job.ordering_key,
        job.ordering_on_dead,
        job.concurrency_key,
        job.concurrency_limit,
        job.replayed_from_id,
        job.ordering_position,
    ]


def _ts(connection, value):
    return connection.ops.adapt_datetimefield_value(value)


def _start_order(job):
    return (-job.priority, job.run_after, job.pk)


def _each(connection, sql, rows):
    """Run one guarded UPDATE per row inside the caller's transaction; return ids it changed.

    SQLite has no round trip to save, so a loop under the write lock is as good as one statement.
    """
    changed = set()
    with connection.cursor() as cursor:
        for job_id, params in rows:
            cursor.execute(sql, params)
            if cursor.rowcount == 1:
                changed.add(job_id)
    return changed


MARK_REPLAYING = """
UPDATE jobqueue_deadletter SET
    state = 'replaying', replays = replays + 1, last_replayed_at = %s, replay_job_id = %s,
    replay_ref = COALESCE(%s, replay_ref)
WHERE id = %s
"""


# --- the outbox table ---------------------------------------------------------------------
# Every store transaction is BEGIN IMMEDIATE, so a claim holds the single write lock from its
# first read: ids follow commit order and no two relays lease the same row.

OUTBOX_INSERT = """
INSERT INTO jobqueue_outbox
    (topic, "key", payload, state, created_at, available_at, attempts, errors)
VALUES (%(topic)s, %(key)s, %(payload)s, 'pending', %(now)s, %(now)s, 0, '[]')
RETURNING id
"""

OUTBOX_CLAIM = f"""
UPDATE jobqueue_outbox SET
    state = 'leased',
    attempts = attempts + 1,
    lease_token = %(token)s,
    locked_until = %(lease_until)s,
    locked_by = %(relay_id)s,
    last_attempted_at = %(now)s
WHERE id IN (
    SELECT m.id FROM jobqueue_outbox AS m
    WHERE m.state = 'pending' AND m.available_at <= %(now)s
      AND {OUTBOX_KEY_IS_FREE}
    ORDER BY m.id
    LIMIT %(limit)s
)
RETURNING {OUTBOX_ROWS.columns()}
"""


# An id column among a list of ids, the list one JSON text parameter however long: a statement
# takes at most SQLITE_LIMIT_VARIABLE_NUMBER parameters (32,766 in a default build), and an IN
# list of thousands costs more to bind and parse than json_each to read.
AMONG = "{column} IN (SELECT value FROM json_each(%s))"


class Sender:
    """A bulk enqueue's batches of plain jobs, each inserted as it comes: SQLite runs in this
    process, so there is nothing to overlap building a batch with."""

    def __init__(self, dialect, connection, now):
        self.dialect, self.connection, self.now = dialect, connection, now

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        return False

    def send(self, jobs):
        self.dialect.insert_many(self.connection, jobs, now=self.now)

    def flush(self):
        pass


class SQLite(SharedSQL):
    """The store's SQL on SQLite (jobqueue.store.dialects.Dialect): one writer at a time, so a
    batch is a loop of guarded statements under its write lock."""

    LOOPS = True  # batches are one statement per row: run them under one write lock
    SEND_CHUNK = 500  # jobs a bulk enqueue builds before it writes them (one bulk_create)
    _outbox_claim = OUTBOX_CLAIM

    def claim(
        self, connection, *, worker_id, queues, limit, now, lease_until, excluded=None, keys=None
    ):
        params = {
            "now": _ts(connection, now),
            "limit": limit,
            "lease_until": _ts(connection, lease_until),
            "worker_id": worker_id,
        }
        if queues:
            params.update({f"q{i}": q for i, q in enumerate(queues)})
        if excluded:
            params.update({f"x{i}": q for i, q in enumerate(excluded)})
        if keys is not None:
            params.update({f"k{n}": key for n, key in enumerate(keys)})
        shape = ClaimShape(
            len(queues) if queues else 0,
            len(excluded) if excluded else 0,
            None if keys is None else len(keys),
        )
        with connection.cursor() as cursor:
            cursor.execute(claim_statement(shape), params)
            jobs = JOB_ROWS.read(
                connection,
                cursor.fetchall(),
                **claimed({"now": now, "lease_until": lease_until, "worker_id": worker_id}),
            )
        # SQLite returns RETURNING rows in no promised order (in practice by id): the batch
        # starts in the subquery's order, best priority first, as PostgreSQL's claim returns it.
        jobs.sort(key=_start_order)
        return jobs

    def ready_keys(self, connection) -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute(READY_KEYS)
            return [row[0] for row in cursor.fetchall()]

    def acknowledge(self, connection, rows, *, now):
        minute, now = _ts(connection, now.replace(second=0, microsecond=0)), _ts(connection, now)
        acked = _each(
            connection,
            ACKNOWLEDGE,
            ((job_id, [now, result, job_id, token, now]) for job_id, token, result in rows),
        )
        if acked:  # in the caller's transaction (LOOPS)
            with connection.cursor() as cursor:
                params = {"minute": minute, "now": now, "ids": json.dumps(sorted(acked))}
                cursor.execute(COUNT_ACKED, params)
        return acked

    def extend(self, connection, table, leases, *, now, until):
        now, until = _ts(connection, now), _ts(connection, until)
        return _each(
            connection,
            EXTEND[table],
            ((row_id, [until, row_id, token, now]) for row_id, token in leases),
        )

    def insert_many(self, connection, jobs, *, now):
        Job.objects.using(connection.alias).bulk_create(jobs)

    def insert_keyed(self, connection, jobs, *, now) -> list[int | None]:
        """One statement each (SQLite runs in this process: no round trips to save)."""
        ids = []
        with connection.cursor() as cursor:
            for job in jobs:
                cursor.execute(INSERT_KEYED, _keyed_row(connection, job))
                row = cursor.fetchone()
                ids.append(row[0] if row else None)
        return ids

    def sender(self, connection, now):
        return Sender(self, connection, now)

    def notify(self, connection, queues):
        """SQLite has no notifications: workers poll."""

    def mark_replaying(self, connection, rows, *, now):
        now = _ts(connection, now)
        with connection.cursor() as cursor:
            cursor.executemany(MARK_REPLAYING, [(now, job, ref, pk) for pk, job, ref in rows])

    def outbox_insert(self, connection, params) -> int:
        with connection.cursor() as cursor:
            cursor.execute(OUTBOX_INSERT, params)
            return cursor.fetchone()[0]

    def among(self, column, ids):
        return AMONG.format(column=column), [json.dumps(list(ids))]

    def bound_transaction(self, connection, seconds: float) -> None:
        """Nothing to bound: one process writes at a time, and the others wait for its write
        lock for at most their own busy timeout (OPTIONS["timeout"]) before they fail and
        retry."""
