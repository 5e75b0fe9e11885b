"""Counters for the overview, kept by database triggers on jobqueue_deadletter.

`deadletters_pendingcount`: pending items per (job type, queue, error class, fingerprint) and how
many of them died again after a replay; `deadletters_hourlycount`: dead-letterings per job type,
fingerprint and UTC hour.
Counting a million pending rows costs hundreds of milliseconds even from a covering index;
these few rows cost one. The triggers run in the writer's transaction, so a count commits or
rolls back with its change, whoever makes it (store, admin, psql).

Decrements only UPDATE existing rows, so deleting the tables in either order (a test flush)
never leaves a negative count behind.

`ensure` runs from migration 0010 and after every `migrate` (registered with jobqueue.health as
its dead-letter counter, whose `ensure` jobqueue runs after migrating): SQLite rebuilds a table
for many schema changes and drops its triggers with it, so a later jobqueue migration must not
silently stop the counting. Whenever the triggers are (re)created the counts are rebuilt from
the table in the same transaction (the hourly ones from the current rows of the last 48 hours).
"""

from django.db import transaction

REBUILD = [
    "DELETE FROM deadletters_pendingcount",
    """
INSERT INTO deadletters_pendingcount
    (task_path, queue_name, error_class, fingerprint, pending, died_again)
SELECT task_path, queue_name, error_class, fingerprint, COUNT(*),
       SUM(CASE WHEN replays > 0 THEN 1 ELSE 0 END)
FROM jobqueue_deadletter WHERE state = 'pending'
GROUP BY task_path, queue_name, error_class, fingerprint
""",
    "DELETE FROM deadletters_hourlycount",
]
REBUILD_HOURLY = {
    "postgresql": """
INSERT INTO deadletters_hourlycount (task_path, fingerprint, hour, dead_lettered)
SELECT task_path, fingerprint,
       date_trunc('hour', dead_lettered_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', COUNT(*)
FROM jobqueue_deadletter WHERE dead_lettered_at >= now() - interval '48 hours' GROUP BY 1, 2, 3
""",
    "sqlite": """
INSERT INTO deadletters_hourlycount (task_path, fingerprint, hour, dead_lettered)
SELECT task_path, fingerprint, strftime('%Y-%m-%d %H:00:00', dead_lettered_at), COUNT(*)
FROM jobqueue_deadletter WHERE dead_lettered_at >= datetime('now', '-48 hours')
GROUP BY 1, 2, 3
""",
}

POSTGRESQL = [
    """
CREATE OR REPLACE FUNCTION deadletters_count_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state = 'pending' THEN
        UPDATE deadletters_pendingcount
        SET pending = pending - 1, died_again = died_again - (OLD.replays > 0)::int
        WHERE task_path = OLD.task_path AND queue_name = OLD.queue_name
          AND error_class = OLD.error_class AND fingerprint = OLD.fingerprint;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.state = 'pending' THEN
        INSERT INTO deadletters_pendingcount
            (task_path, queue_name, error_class, fingerprint, pending, died_again)
        VALUES (NEW.task_path, NEW.queue_name, NEW.error_class, NEW.fingerprint, 1,
                (NEW.replays > 0)::int)
        ON CONFLICT (task_path, queue_name, error_class, fingerprint) DO UPDATE
        SET pending = deadletters_pendingcount.pending + 1,
            died_again = deadletters_pendingcount.died_again + EXCLUDED.died_again;
    END IF;
    IF NEW.state = 'pending' AND (TG_OP = 'INSERT' OR OLD.state <> 'pending') THEN
        INSERT INTO deadletters_hourlycount (task_path, fingerprint, hour, dead_lettered)
        VALUES (NEW.task_path, NEW.fingerprint,
                date_trunc('hour', NEW.dead_lettered_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 1)
        ON CONFLICT (hour, task_path, fingerprint) DO UPDATE
        SET dead_lettered = deadletters_hourlycount.dead_lettered + 1;
    END IF;
    RETURN NULL;
END
$$
""",
    """
CREATE TRIGGER deadletters_count_insert_delete
AFTER INSERT OR DELETE ON jobqueue_deadletter
FOR EACH ROW EXECUTE FUNCTION deadletters_count_apply()
""",
    """
CREATE TRIGGER deadletters_count_update
AFTER UPDATE OF state, replays, task_path, queue_name, error_class, fingerprint
ON jobqueue_deadletter
FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.replays IS DISTINCT FROM NEW.replays
      OR OLD.task_path IS DISTINCT FROM NEW.task_path
      OR OLD.queue_name IS DISTINCT FROM NEW.queue_name
      OR OLD.error_class IS DISTINCT FROM NEW.error_class
      OR OLD.fingerprint IS DISTINCT FROM NEW.fingerprint)
EXECUTE FUNCTION deadletters_count_apply()
""",
]
POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS deadletters_count_update ON jobqueue_deadletter",
    "DROP TRIGGER IF EXISTS deadletters_count_insert_delete ON jobqueue_deadletter",
    "DROP FUNCTION IF EXISTS deadletters_count_apply()",
]

_SQLITE_SUBTRACT = """
    UPDATE deadletters_pendingcount
    SET pending = pending - 1, died_again = died_again - (OLD.replays > 0)
    WHERE OLD.state = 'pending' AND task_path = OLD.task_path AND queue_name = OLD.queue_name
      AND error_class = OLD.error_class AND fingerprint = OLD.fingerprint;
"""
_SQLITE_ADD = """
    INSERT INTO deadletters_pendingcount
        (task_path, queue_name, error_class, fingerprint, pending, died_again)
    SELECT NEW.task_path, NEW.queue_name, NEW.error_class, NEW.fingerprint, 1, (NEW.replays > 0)
    WHERE NEW.state = 'pending'
    ON CONFLICT (task_path, queue_name, error_class, fingerprint) DO UPDATE
    SET pending = pending + 1, died_again = died_again + excluded.died_again;
"""
_SQLITE_HOURLY = """
    INSERT INTO deadletters_hourlycount (task_path, fingerprint, hour, dead_lettered)
    SELECT NEW.task_path, NEW.fingerprint, strftime('%Y-%m-%d %H:00:00', NEW.dead_lettered_at), 1
    WHERE {condition}
    ON CONFLICT (hour, task_path, fingerprint) DO UPDATE SET dead_lettered = dead_lettered + 1;
"""
SQLITE = [
    f"""
CREATE TRIGGER deadletters_count_insert AFTER INSERT ON jobqueue_deadletter
BEGIN {_SQLITE_ADD} {_SQLITE_HOURLY.format(condition="NEW.state = 'pending'")} END
""",
    f"""
CREATE TRIGGER deadletters_count_delete AFTER DELETE ON jobqueue_deadletter
BEGIN {_SQLITE_SUBTRACT} END
""",
    f"""
CREATE TRIGGER deadletters_count_update
AFTER UPDATE OF state, replays, task_path, queue_name, error_class, fingerprint
ON jobqueue_deadletter
WHEN OLD.state IS NOT NEW.state OR OLD.replays IS NOT NEW.replays
     OR OLD.task_path IS NOT NEW.task_path OR OLD.queue_name IS NOT NEW.queue_name
     OR OLD.error_class IS NOT NEW.error_class OR OLD.fingerprint IS NOT NEW.fingerprint
BEGIN
    {_SQLITE_SUBTRACT} {_SQLITE_ADD}
    {_SQLITE_HOURLY.format(condition="NEW.state = 'pending' AND OLD.state <> 'pending'")}
END
""",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS deadletters_count_insert",
    "DROP TRIGGER IF EXISTS deadletters_count_delete",
    "DROP TRIGGER IF EXISTS deadletters_count_update",
]

TRIGGER_NAMES = {
    "postgresql": {"deadletters_count_insert_delete", "deadletters_count_update"},
    "sqlite": {"deadletters_count_insert", "deadletters_count_delete", "deadletters_count_update"},
}
EXISTING = {
    "postgresql": "SELECT tgname FROM pg_trigger WHERE tgrelid = 'jobqueue_deadletter'::regclass",
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'trigger' "
    "AND tbl_name = 'jobqueue_deadletter'",
}


def drop_statements(vendor):
    return POSTGRESQL_DROP if vendor == "postgresql" else SQLITE_DROP


def installed(connection) -> bool:
    vendor = connection.vendor
    with connection.cursor() as cursor:
        cursor.execute(EXISTING[vendor])
        names = {row[0] for row in cursor.fetchall()}
    return TRIGGER_NAMES[vendor] <= names


def pending_by_queue_and_task(using: str = "default") -> dict[tuple[str, str], int]:
    """Pending dead letters per (queue, job type) from the counters of the database `using`
    (the triggers keep them beside the letters): the health dashboard's figure at a million
    rows without counting them (registered with jobqueue.health)."""
    from django.db.models import Sum

    from .models import PendingCount

    rows = (
        PendingCount.objects.using(using)
        .filter(pending__gt=0)
        .values_list("queue_name", "task_path")
        .annotate(n=Sum("pending"))
    )
    return {(queue, task): n for queue, task, n in rows}


SQUASHED = ("deadletters", "0001_squashed_0018_replayrun_to_queue")  # the tables' first migration


def ensure_if_migrated(connection) -> bool:
    """`ensure`, once this app's migrations have made the tables the triggers write (a database
    migrated backwards, or not yet, gets them from migration 0010)."""
    from django.db.migrations.recorder import MigrationRecorder

    applied = MigrationRecorder(connection).applied_migrations()
    # The squash records the migrations it replaces as applied too, while they are kept.
    made_by = {("deadletters", "0010_counts_by_fingerprint"), SQUASHED}
    if not made_by & set(applied):
        return False
    return ensure(connection)


def reinstall(connection) -> None:
    """Replace the triggers with this module's version and recount (after a schema change)."""
    with connection.cursor() as cursor:
        for sql in drop_statements(connection.vendor):
            cursor.execute(sql)
    ensure(connection)


def ensure(connection) -> bool:
    """Install the triggers and rebuild the counts unless already in place; True if it did."""
    vendor = connection.vendor
    if vendor not in TRIGGER_NAMES:
        raise NotImplementedError(
            f"the overview counters support PostgreSQL and SQLite, not {vendor}"
        )
    if installed(connection):
        return False
    create = POSTGRESQL if vendor == "postgresql" else SQLITE
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        for sql in [*drop_statements(vendor), *create, *REBUILD, REBUILD_HOURLY[vendor]]:
            cursor.execute(sql)
    return True
