"""The guard tests/writes.py installs on every test (tests/conftest.py): a write to a queue
table from library code outside jobqueue/store is found, one from the store or from a test is
not."""

from tests.writes import ROOT, writer

INSERT = "INSERT INTO jobqueue_job (task_path) VALUES (%s)"


def written_from(path, sql):
    """`writer(sql)` as called from code compiled as the file `path` (two frames up, as the
    execute wrapper calls it)."""
    code = compile("def execute(sql):\n    return call(sql)\n", str(path), "exec")
    scope = {"call": lambda sql: writer(sql)}
    exec(code, scope)
    return scope["execute"](sql)


def test_a_write_from_the_console_or_the_worker_is_found():
    assert written_from(ROOT / "deadletters" / "services" / "runs.py", INSERT) == (
        "deadletters/services/runs.py:2 (execute)"
    )
    assert written_from(ROOT / "jobqueue" / "worker.py", "DELETE FROM jobqueue_jobcounter")


def test_a_models_own_save_is_judged_by_its_caller():
    code = compile(
        "def save(sql):\n    return call(sql)\n", str(ROOT / "jobqueue/models.py"), "exec"
    )
    scope = {"call": lambda sql: writer(sql)}
    exec(code, scope)
    from_console = compile(
        "def act(sql):\n    return save(sql)\n", str(ROOT / "deadletters/services/runs.py"), "exec"
    )
    outer = {"save": scope["save"]}
    exec(from_console, outer)
    assert outer["act"](INSERT) == "deadletters/services/runs.py:2 (act)"


def test_the_store_tests_and_reads_may_write_or_read():
    assert written_from(ROOT / "jobqueue" / "store" / "jobs.py", INSERT) is None
    assert written_from(ROOT / "tests" / "factories.py", INSERT) is None
    assert written_from(ROOT / "jobqueue" / "worker.py", "SELECT * FROM jobqueue_job") is None
    assert (
        written_from(ROOT / "deadletters" / "services" / "runs.py", "INSERT INTO deadletters_x")
        is None
    )
    assert (
        written_from(
            ROOT / "jobqueue" / "health.py", "WITH t AS (SELECT 1) SELECT * FROM jobqueue_job"
        )
        is None
    )
    assert (
        written_from(
            ROOT / "jobqueue" / "health.py",
            "WITH t AS (SELECT updated_at FROM jobqueue_job) SELECT 1",
        )
        is None
    )
    assert written_from(
        ROOT / "jobqueue" / "idempotency.py", "WITH t AS (DELETE FROM jobqueue_x) SELECT 1"
    )
    # The console's own counters, rebuilt from the queue's table: a read of it, not a write.
    assert (
        written_from(
            ROOT / "deadletters" / "counters.py",
            "INSERT INTO deadletters_pendingcount (n) SELECT count(*) FROM jobqueue_deadletter",
        )
        is None
    )
    assert written_from(ROOT / "jobqueue" / "worker.py", 'UPDATE "jobqueue_job" SET x = 1')
