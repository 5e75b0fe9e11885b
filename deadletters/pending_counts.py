"""Exact pending counts for the overview: database triggers on jobqueue_deadletter.

See models.PendingCount for why. Decrements only UPDATE existing rows, so deleting both tables
in either order (a test flush) never leaves a negative count behind.

`ensure` runs from migration 0003 and after every `migrate` (apps.py): SQLite rebuilds a table
for many schema changes and drops its triggers with it, so a later jobqueue migration must not
silently stop the counting. Whenever the triggers have to be (re)created, the counts are rebuilt
from the table in the same transaction.
"""

from django.db import transaction

BACKFILL = """
INSERT INTO deadletters_pendingcount (task_path, error_class, pending, died_again)
SELECT task_path, error_class, COUNT(*), SUM(CASE WHEN replays > 0 THEN 1 ELSE 0 END)
FROM jobqueue_deadletter WHERE state = 'pending' GROUP BY task_path, error_class
"""

POSTGRESQL = [
    """
CREATE OR REPLACE FUNCTION deadletters_pendingcount_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state = 'pending' THEN
        UPDATE deadletters_pendingcount
        SET pending = pending - 1, died_again = died_again - (OLD.replays > 0)::int
        WHERE task_path = OLD.task_path AND error_class = OLD.error_class;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.state = 'pending' THEN
        INSERT INTO deadletters_pendingcount (task_path, error_class, pending, died_again)
        VALUES (NEW.task_path, NEW.error_class, 1, (NEW.replays > 0)::int)
        ON CONFLICT (task_path, error_class) DO UPDATE
        SET pending = deadletters_pendingcount.pending + 1,
            died_again = deadletters_pendingcount.died_again + EXCLUDED.died_again;
    END IF;
    RETURN NULL;
END
$$
""",
    """
CREATE TRIGGER deadletters_pendingcount_insert_delete
AFTER INSERT OR DELETE ON jobqueue_deadletter
FOR EACH ROW EXECUTE FUNCTION deadletters_pendingcount_apply()
""",
    """
CREATE TRIGGER deadletters_pendingcount_update
AFTER UPDATE OF state, replays, task_path, error_class ON jobqueue_deadletter
FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.replays IS DISTINCT FROM NEW.replays
      OR OLD.task_path IS DISTINCT FROM NEW.task_path
      OR OLD.error_class IS DISTINCT FROM NEW.error_class)
EXECUTE FUNCTION deadletters_pendingcount_apply()
""",
]
POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS deadletters_pendingcount_update ON jobqueue_deadletter",
    "DROP TRIGGER IF EXISTS deadletters_pendingcount_insert_delete ON jobqueue_deadletter",
    "DROP FUNCTION IF EXISTS deadletters_pendingcount_apply()",
]

_SQLITE_SUBTRACT = """
    UPDATE deadletters_pendingcount
    SET pending = pending - 1, died_again = died_again - (OLD.replays > 0)
    WHERE OLD.state = 'pending' AND task_path = OLD.task_path AND error_class = OLD.error_class;
"""
_SQLITE_ADD = """
    INSERT INTO deadletters_pendingcount (task_path, error_class, pending, died_again)
    SELECT NEW.task_path, NEW.error_class, 1, (NEW.replays > 0) WHERE NEW.state = 'pending'
    ON CONFLICT (task_path, error_class) DO UPDATE
    SET pending = pending + 1, died_again = died_again + excluded.died_again;
"""
SQLITE = [
    f"""
CREATE TRIGGER deadletters_pendingcount_insert AFTER INSERT ON jobqueue_deadletter
BEGIN {_SQLITE_ADD} END
""",
    f"""
CREATE TRIGGER deadletters_pendingcount_delete AFTER DELETE ON jobqueue_deadletter
BEGIN {_SQLITE_SUBTRACT} END
""",
    f"""
CREATE TRIGGER deadletters_pendingcount_update
AFTER UPDATE OF state, replays, task_path, error_class ON jobqueue_deadletter
WHEN OLD.state IS NOT NEW.state OR OLD.replays IS NOT NEW.replays
     OR OLD.task_path IS NOT NEW.task_path OR OLD.error_class IS NOT NEW.error_class
BEGIN {_SQLITE_SUBTRACT} {_SQLITE_ADD} END
""",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS deadletters_pendingcount_insert",
    "DROP TRIGGER IF EXISTS deadletters_pendingcount_delete",
    "DROP TRIGGER IF EXISTS deadletters_pendingcount_update",
]


TRIGGER_NAMES = {
    "postgresql": {"deadletters_pendingcount_insert_delete", "deadletters_pendingcount_update"},
    "sqlite": {
        "deadletters_pendingcount_insert",
        "deadletters_pendingcount_delete",
        "deadletters_pendingcount_update",
    },
}
EXISTING = {
    "postgresql": "SELECT tgname FROM pg_trigger WHERE tgrelid = 'jobqueue_deadletter'::regclass",
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'trigger' "
    "AND tbl_name = 'jobqueue_deadletter'",
}


def installed(connection) -> bool:
    vendor = connection.vendor
    with connection.cursor() as cursor:
        cursor.execute(EXISTING[vendor])
        names = {row[0] for row in cursor.fetchall()}
    return TRIGGER_NAMES[vendor] <= names


def ensure(connection) -> bool:
    """Install the triggers and rebuild the counts unless already in place; True if it did."""
    vendor = connection.vendor
    if vendor not in TRIGGER_NAMES:
        raise NotImplementedError(f"pending counts support PostgreSQL and SQLite, not {vendor}")
    if installed(connection):
        return False
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        for sql in (
            (POSTGRESQL_DROP + POSTGRESQL) if vendor == "postgresql" else (SQLITE_DROP + SQLITE)
        ):
            cursor.execute(sql)
        cursor.execute("DELETE FROM deadletters_pendingcount")
        cursor.execute(BACKFILL)
    return True
