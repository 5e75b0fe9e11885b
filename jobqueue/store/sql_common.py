"""Statements whose text is the same on PostgreSQL and SQLite, named once."""

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
