"""Statements whose text is the same on PostgreSQL and SQLite, named once, and the code both
dialects run alike (SharedSQL)."""

from jobqueue.models import Job, OutboxMessage

from .rows import Rows

# The leased tables and the state each calls "leased" (jobqueue.store.leases.JOBS, OUTBOX).
LEASED = {"jobqueue_job": "running", "jobqueue_outbox": "leased"}


def per_leased_table(template: str) -> dict[str, str]:
    """A statement over a leased table, one per table: its name and its own "leased" state
    formatted in ({table}, {leased})."""
    return {table: template.format(table=table, leased=state) for table, state in LEASED.items()}


# Adding to a minute's counters. Every transaction that writes counter rows writes them last
# and in key order (minute, queue, task): two can then never hold a row the other waits for
# (PostgreSQL reported "deadlock detected" between two workers' counter upserts), and none
# holds a counter row while it waits on a job's.
COUNTERS_ADD = """
ON CONFLICT (minute, queue_name, task_path) DO UPDATE SET
    succeeded = jobqueue_jobcounter.succeeded + excluded.succeeded,
    failed = jobqueue_jobcounter.failed + excluded.failed,
    dead = jobqueue_jobcounter.dead + excluded.dead,
    last_success_at = CASE
        WHEN excluded.last_success_at IS NULL THEN jobqueue_jobcounter.last_success_at
        WHEN jobqueue_jobcounter.last_success_at IS NULL
          OR excluded.last_success_at > jobqueue_jobcounter.last_success_at
        THEN excluded.last_success_at
        ELSE jobqueue_jobcounter.last_success_at
    END
"""
COUNTER_COLUMNS = "(minute, queue_name, task_path, succeeded, failed, dead, last_success_at)"

COUNTERS_UPSERT = f"""
INSERT INTO jobqueue_jobcounter {COUNTER_COLUMNS}
VALUES (%s, %s, %s, %s, %s, %s, %s)
{COUNTERS_ADD}"""

# The jobs an acknowledgement marked done, counted into its minute ({acked}: their rows, with
# queue_name and task_path) in the same transaction: a worker killed after its acknowledgement
# has nothing left uncounted. (The WHERE: SQLite's INSERT ... SELECT ... ON CONFLICT needs one.)
COUNT_ACKNOWLEDGED = f"""
INSERT INTO jobqueue_jobcounter {COUNTER_COLUMNS}
SELECT %(minute)s, a.queue_name, a.task_path, count(*), 0, 0, %(now)s
FROM {{acked}} AS a WHERE true
GROUP BY a.queue_name, a.task_path
ORDER BY a.queue_name, a.task_path
{COUNTERS_ADD}"""

TIMINGS_UPSERT = """
INSERT INTO jobqueue_jobtiming
    (span, minute, queue_name, task_path, kind, bucket, count, seconds)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (span, minute, queue_name, task_path, kind, bucket) DO UPDATE SET
    count = jobqueue_jobtiming.count + excluded.count,
    seconds = jobqueue_jobtiming.seconds + excluded.seconds
"""

# Per-key ordering, the rule of every outbox claim: a message with a key is claimable only if no
# earlier message with the same key is pending or leased, so a key has at most one message in
# flight and they go out in id order. A dead one does not hold its key back (one poison message
# must not stop an order's whole stream until an operator acts).
OUTBOX_KEY_IS_FREE = """(m."key" IS NULL OR NOT EXISTS (
        SELECT 1 FROM jobqueue_outbox AS earlier
        WHERE earlier."key" = m."key" AND earlier.id < m.id
          AND earlier.state IN ('pending', 'leased')))"""

# The guarded batch update of one claim's messages (one token), the same text on both.
OUTBOX_MARK_PUBLISHED = """
UPDATE jobqueue_outbox SET
    state = 'published', published_at = %s, lease_token = NULL, locked_until = NULL,
    locked_by = NULL
WHERE id IN ({ids}) AND state = 'leased' AND lease_token = %s AND locked_until > %s
RETURNING id, dead_letter_id
"""


# A ready job with an ordering key is claimable only when no job of its key comes before it
# and can still hold it back: one waiting (a retry too) or running, or one dead with "block"
# whose dead letter is unresolved (pending, or replaying: its replay has the dead job's position
# and runs first). A job without a key never looks (the OR is decided by its first term).
ORDER_IS_FREE = """(jobqueue_job.ordering_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM jobqueue_job AS earlier
    WHERE earlier.ordering_key = jobqueue_job.ordering_key
      AND earlier.state IN ('ready', 'running', 'dead')
      AND COALESCE(earlier.ordering_position, earlier.id)
          < COALESCE(jobqueue_job.ordering_position, jobqueue_job.id)
      AND (earlier.state <> 'dead' OR (earlier.ordering_on_dead = 'block' AND EXISTS (
          SELECT 1 FROM jobqueue_deadletter AS letter
          WHERE letter.job_id = earlier.id AND letter.state IN ('pending', 'replaying')
      )))
))"""

# Columns whose values a job claim knows without reading them back: it sets the lease, and a
# claimable (ready) row has no result and no finish time.
CLAIM_KNOWS = (
    "state", "locked_until", "locked_by", "last_attempted_at", "finished_at", "return_value"
)  # fmt: skip


# A claim returns what it did not write itself; the lease it wrote is filled in (claimed()).
JOB_ROWS = Rows(Job, omit=CLAIM_KNOWS)
OUTBOX_ROWS = Rows(OutboxMessage)


def claimed(params: dict) -> dict:
    """The CLAIM_KNOWS values of the rows a claim with these parameters leased."""
    return {
        "state": "running",
        "locked_until": params["lease_until"],
        "locked_by": params["worker_id"],
        "last_attempted_at": params["now"],
        "finished_at": None,
        "return_value": None,
    }


# A leader's lease (jobqueue.store.leader): taken when missing or expired, renewed by its
# holder, left alone otherwise; a row comes back only to the holder it now names. One
# statement, so two processes looking at once cannot both take it.
LEADER_UPSERT = """
INSERT INTO jobqueue_leaderlease (name, holder, expires_at, acquired_at)
VALUES (%s, %s, %s, %s)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    expires_at = excluded.expires_at,
    acquired_at = CASE WHEN jobqueue_leaderlease.holder = excluded.holder
        THEN jobqueue_leaderlease.acquired_at ELSE excluded.acquired_at END
WHERE jobqueue_leaderlease.holder = excluded.holder OR jobqueue_leaderlease.expires_at <= %s
RETURNING holder
"""


class SharedSQL:
    """What both dialects run with the same code, each on its own statement."""

    _outbox_claim: str  # the dialect's OUTBOX_CLAIM: RETURNING OUTBOX_ROWS.columns()

    def outbox_claim(self, connection, params) -> list[OutboxMessage]:
        with connection.cursor() as cursor:
            cursor.execute(self._outbox_claim, params)
            return OUTBOX_ROWS.read(connection, cursor.fetchall())
