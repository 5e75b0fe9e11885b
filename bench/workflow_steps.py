"""The cost of a workflow step (jobqueue.workflows), beside a baseline from the same run.

    uv run python bench/workflow_steps.py [--steps 100] [--jobs 20] [--rounds 3] [--keep]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x uv run python bench/workflow_steps.py

The database: where DATABASE_URL names PostgreSQL, the bench drops and recreates a database of
its own (BENCH_DB, default `redrive_bench_workflows`) on that server (bench/benchdb.py), migrates
it and drops it at the end unless --keep; otherwise a fresh SQLite file in a temporary
directory, with the project's SQLite settings (WAL, synchronous=NORMAL, IMMEDIATE transactions).

Tasks, each calling a trivial function (`trivial(i)`: i + 1) N times (--steps):

1. baseline: `trivial(i)` directly;
2. step: `step(f"s{i}", trivial, i)`, the result recorded after the call;
3. atomic step: the same with `@step_options(atomic=True)`, the call inside the record's
   transaction (trivial here: it writes nothing, so this is the price of the scheme alone);
4. resume: a `step` workflow run again once all its N steps are done (as after a crash past
   its last step, a redeploy or a replay): each step returns its stored result.

Each variant runs as --jobs jobs of the in-process Worker (concurrency 1, burst), the variants
in a rotated order over --rounds rounds after a warm-up round.

What is measured, and how. Time: the handler's time per job, taken around the worker's
Executor.execute (jobqueue.execution) in a Worker subclass: the task's body with what the worker
wraps around it (payload check, the workflow's begin and its final state write), not the claim
and the acknowledgement, which are the same statements for every variant (on other threads'
connections). The handler's connection is opened before the clock starts, so no job pays for
connecting. Extra µs per step = (median job of the variant - median baseline job) / N. Round
trips: everything the handler thread's connection sends during a job, counted in a separate pass
(so counting adds no time to the timed ones): statements through `connection.execute_wrapper`
installed on that thread's connection around the job, plus each COMMIT and ROLLBACK (the
connection's `_commit` and `_rollback`, which execute_wrapper does not see) and, on PostgreSQL,
the BEGIN psycopg sends before a transaction's first statement (one per COMMIT or ROLLBACK; on
SQLite Django sends BEGIN as a statement, already counted). On SQLite a "round trip" is a call
into the library, not the network. The baseline's handler never touches the database: 0.

Yardsticks from the same run, on the main thread's connection: one `SELECT 1` (a round trip),
and the floor of a step: its record's statements as raw SQL (BEGIN, the lease-guarded UPDATE of
the job's row, the INSERT of the step's row, COMMIT), which is what the database must do for a
step whatever builds the statements. A step's cost above the floor is the Python around them
(the ORM building and compiling the queries, the result's JSON checks, the bookkeeping). Prints
figures and ratios; no targets, no assertions on timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DB = os.environ.get("BENCH_DB", "redrive_bench_workflows")


def trivial(i):
    return i + 1


if __name__ != "__main__":
    # The tasks need Django set up: main() does that, then imports this file again as
    # bench.workflow_steps, the path the worker loads the tasks by.
    from django.tasks import task

    from jobqueue.workflows import step, step_options

    @step_options(atomic=True)
    def atomic_trivial(i):
        return i + 1

    @task
    def baseline(n):
        total = 0
        for i in range(n):
            total += trivial(i)
        return total

    @task
    def steps(n):
        total = 0
        for i in range(n):
            total += step(f"s{i}", trivial, i)
        return total

    @task
    def atomic_steps(n):
        total = 0
        for i in range(n):
            total += step(f"s{i}", atomic_trivial, i)
        return total


def log(text=""):
    print(text, flush=True)


# --- set-up -------------------------------------------------------------------------------


def setup(keep: bool) -> tuple[str, callable]:
    """Point Django at a database of the bench's own, migrated; returns its label and a
    clean-up."""
    from bench.benchdb import drop_database, recreate_database

    url = os.environ.get("DATABASE_URL", "")
    os.environ.setdefault("REDRIVE_LOG_LEVEL", "WARNING")  # no line per job on stderr
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    if urlsplit(url).scheme.startswith("postgres"):
        url = recreate_database(DB, migrate=True)
        os.environ["DATABASE_URL"] = url
        label = f"PostgreSQL {url}"

        def cleanup():
            from django.db import connections

            connections.close_all()
            if keep:
                log(f"kept database {DB}")
            else:
                drop_database(DB)

    else:
        if url:
            log(f"(DATABASE_URL {url} is not PostgreSQL: the bench uses a SQLite file of its own)")
        folder = tempfile.mkdtemp(prefix="redrive-bench-workflows-")
        path = Path(folder) / "bench.sqlite3"
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
        os.environ.setdefault("REDRIVE_VAR_DIR", folder)
        label = f"SQLite {path}"

        def cleanup():
            from django.db import connections

            connections.close_all()
            if keep:
                log(f"kept {path}")
            else:
                shutil.rmtree(folder, ignore_errors=True)

    os.chdir(ROOT)
    import django

    django.setup()
    if not label.startswith("PostgreSQL"):
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
    return label, cleanup


# --- the worker, timed and counted ------------------------------------------------------


class Counter:
    """Round trips on one connection: statements, transaction ends and (PostgreSQL) BEGINs."""

    def __init__(self, vendor: str):
        self.vendor = vendor
        self.statements = 0
        self.ends = 0

    def __call__(self, execute, sql, params, many, context):
        self.statements += 1
        return execute(sql, params, many, context)

    @property
    def round_trips(self) -> int:
        begins = self.ends if self.vendor == "postgresql" else 0  # SQLite's BEGIN is a statement
        return self.statements + self.ends + begins


def worker_class():
    from django.db import connections

    from jobqueue.worker import Worker

    class BenchWorker(Worker):
        """The Worker, timing (or counting) each job's run on its handler thread."""

        def __init__(self, *, count: bool, **kw):
            super().__init__(**kw)
            self.count = count
            self.samples: list[tuple[float, int | None]] = []
            self.failures: list[str] = []
            # Handler threads look the executor's `execute` up as they start: this one instead.
            self._execute_untimed = self.executor.execute
            self.executor.execute = self._execute

        def _execute(self, job):
            connection = connections[self.using]  # this handler thread's own
            connection.ensure_connection()  # connecting is not the job's cost
            if not self.count:
                started = time.perf_counter()
                finished = self._execute_untimed(job)
                elapsed = time.perf_counter() - started
                trips = None
            else:
                counter = Counter(connection.vendor)
                commit, rollback = connection._commit, connection._rollback

                def counted_commit():
                    counter.ends += 1
                    return commit()

                def counted_rollback():
                    counter.ends += 1
                    return rollback()

                connection._commit, connection._rollback = counted_commit, counted_rollback
                try:
                    with connection.execute_wrapper(counter):
                        started = time.perf_counter()
                        finished = self._execute_untimed(job)
                        elapsed = time.perf_counter() - started
                finally:
                    del connection._commit, connection._rollback
                trips = counter.round_trips
            if finished.error is not None or finished.suspended is not None:
                self.failures.append(f"job {job.pk}: {finished.error or finished.suspended!r}")
            self.samples.append((elapsed, trips))
            return finished

    return BenchWorker


def drain(count: bool = False) -> list[tuple[float, int | None]]:
    worker = worker_class()(count=count, burst=True, concurrency=1, poll_interval=0.05)
    code = worker.run()
    if code or worker.failures:
        raise SystemExit(f"the worker exited {code}; failures: {worker.failures[:3]}")
    return worker.samples


def enqueue(task, n_jobs: int, n_steps: int) -> list[int]:
    from django.tasks import task_backends

    results = task_backends["default"].enqueue_many(task, [((n_steps,), {})] * n_jobs)
    return [int(r.id) for r in results]


def again(ids: list[int]) -> None:
    """Done workflows back to ready, as a retry after a crash past their last step would be."""
    from django.utils import timezone

    from jobqueue.models import Job, JobState

    Job.objects.filter(pk__in=ids).update(
        state=JobState.READY, run_after=timezone.now() - timedelta(seconds=1)
    )


def run_round(tasks, n_jobs, n_steps, *, count=False, rotate=0) -> dict[str, list]:
    """Each variant's jobs through a burst of their own, in an order rotated by `rotate` (so
    no variant always follows the same one); resume re-runs the `step` jobs right after."""
    samples: dict[str, list] = {}
    order = ["baseline", "steps", "atomic_steps"]
    for name in order[rotate % 3 :] + order[: rotate % 3]:
        ids = enqueue(getattr(tasks, name), n_jobs, n_steps)
        samples[name] = drain(count)
        if name == "steps":
            again(ids)
            samples["resume"] = drain(count)
    return samples


# --- yardsticks ---------------------------------------------------------------------------


def yardsticks(repeat: int = 2000) -> dict[str, float]:
    """µs of one `SELECT 1`, and of a step's record as raw SQL: the floor of a step, the same
    statements the store sends (BEGIN, the lease-guarded UPDATE of the job's row, the INSERT of
    the step's row, COMMIT) without the ORM building them. On the main thread's connection."""
    from django.db import connection, transaction
    from django.utils import timezone

    from jobqueue.models import Job, JobState, Workflow

    now = timezone.now()
    job = Job.objects.create(
        task_path="bench.floor",
        args=[],
        kwargs={},
        state=JobState.RUNNING,
        run_after=now,
        enqueued_at=now,
        lease_token="bench-floor",
        locked_until=now + timedelta(hours=1),
    )
    Workflow.objects.create(pk=job.pk, task_path="bench.floor", started_at=now, updated_at=now)
    hold = (
        "UPDATE jobqueue_job SET locked_until = locked_until "
        "WHERE id = %s AND state = 'running' AND lease_token = %s AND locked_until > %s"
    )
    record = (
        "INSERT INTO jobqueue_workflowstep "
        "(workflow_id, name, kind, state, attempts, result, errors, started_at, finished_at) "
        "VALUES (%s, %s, 'call', 'done', 1, %s, '[]', %s, %s)"
    )
    best = {"select": float("inf"), "floor": float("inf")}
    serial = 0
    for _ in range(3):
        with connection.cursor() as cursor:
            started = time.perf_counter()
            for _ in range(repeat):
                cursor.execute("SELECT 1")
                cursor.fetchone()
            best["select"] = min(best["select"], (time.perf_counter() - started) / repeat)
            rows = repeat // 4
            started = time.perf_counter()
            for _ in range(rows):
                serial += 1
                with transaction.atomic():
                    cursor.execute(hold, [job.pk, "bench-floor", now])
                    cursor.execute(record, [job.pk, f"s{serial}", str(serial), now, now])
            best["floor"] = min(best["floor"], (time.perf_counter() - started) / rows)
    return {k: v * 1e6 for k, v in best.items()}


# --- main ---------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps (calls) per job")
    parser.add_argument("--jobs", type=int, default=20, help="jobs per variant per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the bench's database")
    args = parser.parse_args(argv)
    if min(args.steps, args.jobs, args.rounds) < 1:
        parser.error("--steps, --jobs and --rounds are at least 1")
    began = time.monotonic()
    label, cleanup = setup(args.keep)
    try:
        report(args, label)
    finally:
        cleanup()
    log(
        f"\ntotal bench time {time.monotonic() - began:.0f}s; load average {os.getloadavg()[0]:.2f}"
    )


def report(args, label):
    from django.db import connection

    from bench import workflow_steps as tasks

    n, m = args.steps, args.jobs
    log(
        f"Redrive workflow step bench on {label} ({os.cpu_count()} CPUs), "
        f"{datetime.now(UTC):%c} UTC"
    )
    log(f"load average {os.getloadavg()[0]:.2f} (other work on this box skews every figure)")
    log(f"{n} calls per job, {m} jobs per variant per round, {args.rounds} rounds (+ warm-up)")
    run_round(tasks, min(m, 3), n)  # warm-up: imports, statement caches, the tables' pages
    timed: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for name, samples in run_round(tasks, m, n, rotate=r).items():
            timed.setdefault(name, []).extend(t for t, _ in samples)
    counted = run_round(tasks, min(m, 5), n, count=True)
    trips = {
        name: statistics.median_low([c for _, c in samples]) for name, samples in counted.items()
    }
    floor = yardsticks()
    connection.close()

    median = {name: statistics.median(times) * 1e6 for name, times in timed.items()}
    base = median["baseline"]
    log(
        f"\nyardsticks on the main thread: SELECT 1 {floor['select']:.1f} µs; a step's record in "
        f"raw SQL (BEGIN, guarded UPDATE, INSERT, COMMIT) {floor['floor']:.1f} µs"
    )
    log(
        f"\n  {'variant':<30} {'job (median)':>13} {'extra/step':>11} {'x raw floor':>11} "
        f"{'round trips/job':>16} {'/step':>6}"
    )
    labels = {
        "baseline": "baseline (direct calls)",
        "steps": "step",
        "atomic_steps": "atomic step",
        "resume": f"resume ({n} steps done)",
    }
    for name in ("baseline", "steps", "atomic_steps", "resume"):
        extra = (median[name] - base) / n
        log(
            f"  {labels[name]:<30} {median[name]:>10,.0f} µs "
            + (f"{extra:>8,.1f} µs" if name != "baseline" else f"{'-':>11}")
            + (f" {extra / floor['floor']:>10.2f}x" if name != "baseline" else f" {'-':>11}")
            + f" {trips[name]:>16,} {(trips[name] - trips['baseline']) / n:>6.2f}"
        )
    log("\nratios")
    log(
        f"  a job of {n} steps takes {median['steps'] / base:,.0f}x the baseline job "
        f"({median['atomic_steps'] / base:,.0f}x atomic); resuming it when all are done, "
        f"{median['resume'] / base:,.1f}x"
    )
    step_extra = (median["steps"] - base) / n
    log(
        f"  a step costs {step_extra / floor['select']:.1f} SELECT 1 round trips' time and "
        f"{step_extra / floor['floor']:.2f}x its raw-SQL floor: of its {step_extra:,.0f} µs, "
        f"{floor['floor']:,.0f} µs are its statements' raw cost, "
        f"{step_extra - floor['floor']:,.0f} µs the rest (the ORM building them, JSON checks, "
        "bookkeeping, the handler thread's waits for the GIL and a CPU)"
    )
    log(
        "  atomic/non-atomic extra per step "
        f"{(median['atomic_steps'] - base) / (median['steps'] - base):.2f} (same statements; "
        "the call runs inside the record's transaction)"
    )
    resume_extra = (median["resume"] - base) / n
    log(
        f"  resuming a done step costs {resume_extra:.1f} µs, {resume_extra / step_extra:.1%} "
        f"of running it (its stored row read at begin, no statement of its own); the resume's "
        f"{trips['resume']} round trips are per workflow (begin: workflow row and steps' rows; "
        "the final state)"
    )
    spread = {
        labels[name]: statistics.quantiles(timed[name], n=10)[-1] * 1e6
        for name in ("baseline", "steps", "atomic_steps", "resume")
        if len(timed[name]) >= 10
    }
    if spread:
        log("  p90 per job: " + ", ".join(f"{k} {v:,.0f} µs" for k, v in spread.items()))


if __name__ == "__main__":
    main()
