"""Statements whose text is the same on PostgreSQL and SQLite, named once."""

# The leased tables and the state each calls "leased" (jobqueue.store.leases.JOBS, OUTBOX).
LEASED = {"jobqueue_job": "running", "jobqueue_outbox": "leased"}

COUNTERS_UPSERT = """
INSERT INTO jobqueue_jobcounter
    (minute, queue_name, task_path, succeeded, failed, dead, last_success_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
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


# Columns whose values a job claim knows without reading them back: it sets the lease, and a
# claimable (ready) row has no result and no finish time.
CLAIM_KNOWS = (
    "state", "locked_until", "locked_by", "last_attempted_at", "finished_at", "return_value"
)  # fmt: skip


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
