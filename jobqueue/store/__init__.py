"""The only code that changes job, outbox, dead-letter and execution state.

Every transition is a guarded UPDATE whose row count is checked (jobqueue.store.leases says the
rule once for jobs and outbox messages). Every function takes `now` so tests can inject a clock.

By concern:
    jobs.py             enqueue, claim, acknowledge, extend, fail, release, sweep; the one
                        insert path every job row goes in by (insert_jobs)
    outbox_messages.py  the outbox table's rows: insert, claim, publish, retry, bury, prune
    leases.py           the lease lifecycle both of them follow
    dead_letters.py     replay (also one letter with an edited payload), discard, and the one
                        bury every source records a death by (a new letter, or a replay's
                        letter back to pending)
    sources/            one module per dead-letter source (jobs, outbox, django-q2, brokers)
    workers.py          the worker registry and per-minute counters
    executions.py       effect keys (jobqueue.once): a key's row in the caller's transaction
    leader.py           leader leases: one holder per name and database (jobqueue.chores)
    queues.py           queue pause and resume, audited
    deploys.py          deploy markers (a pipeline's, a worker's on a new version), audited
    job_actions.py      run a queued job now or cancel it, audited
    schedules.py        periodic jobs: sync, ticks (one job each), pause, resume, run now
    workflows.py        workflows' steps, signals, batch checkpoints and bad items
    payloads.py         JSON and text every database stores
    dialects.py         the Dialect protocol: what the store asks of a database's SQL
    id_lists.py         Among: a filter on a list of ids of any length, one parameter
    postgresql.py, sqlite.py, sql_common.py: the SQL, one named constant per statement, and
                        the class of each dialect (PostgreSQL, SQLite) that runs it

This package re-exports the functions callers use (`from jobqueue import store;
store.enqueue(...)`).
"""

from . import deploys, job_actions, leader, queues, schedules, workers, workflows
from .dead_letters import (
    SKIP_KEY_HELD,
    SKIP_MISSING,
    SKIP_REASONS,
    Resolution,
    discard,
    replay,
    replay_edited,
)
from .id_lists import Among
from .jobs import (
    UNIQUE_STATES,
    NewJob,
    Unique,
    acknowledge,
    claim,
    enqueue,
    enqueue_calls,
    enqueue_many,
    extend_leases,
    fail,
    prune_finished_jobs,
    rate_limits,
    release,
    suspend,
    sweep_expired,
    throttled,
    unfinished,
)
from .leases import SWEEP_LIMIT, error_entry
from .payloads import (
    CLASS_PATH_CHARS,
    MAX_JSON_DEPTH,
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    CheckedJSON,
    check_payload,
    check_value,
    dumps,
    json_depth,
    loads,
    normalized,
    storable_json,
    storable_text,
)
from .workers import Tally, forget_worker, record_worker

__all__ = [
    "CLASS_PATH_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_MESSAGE_CHARS",
    "MAX_TRACEBACK_CHARS",
    "SKIP_KEY_HELD",
    "SKIP_MISSING",
    "SKIP_REASONS",
    "SWEEP_LIMIT",
    "UNIQUE_STATES",
    "Among",
    "CheckedJSON",
    "NewJob",
    "Resolution",
    "Tally",
    "Unique",
    "acknowledge",
    "check_payload",
    "check_value",
    "claim",
    "deploys",
    "discard",
    "dumps",
    "enqueue",
    "enqueue_calls",
    "enqueue_many",
    "error_entry",
    "extend_leases",
    "fail",
    "forget_worker",
    "job_actions",
    "json_depth",
    "leader",
    "loads",
    "normalized",
    "prune_finished_jobs",
    "queues",
    "rate_limits",
    "record_worker",
    "release",
    "replay",
    "replay_edited",
    "schedules",
    "storable_json",
    "storable_text",
    "suspend",
    "sweep_expired",
    "throttled",
    "unfinished",
    "workers",
    "workflows",
]
