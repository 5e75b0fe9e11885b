"""Search in dead letters' error text and payload values (the list's `q` filter), per database.

PostgreSQL: full-text search with the `simple` configuration (lower-cased words, no stemming, no
stop words: ids, codes and e-mail addresses match as written) over the last error and every
string and number in the payload, stored by the database in a generated tsvector column with
a GIN index (jobqueue migration 0027; a user who may not see payload values searches a column of
the error text alone). The query is read by
`websearch_to_tsquery`: words are ANDed, "quoted phrases" and `-excluded` words work, and no
input is a syntax error.

SQLite: no index; a substring match (case-insensitive for ASCII) over the error text and the
payload's JSON, bounded to the newest SQLITE_SCAN letters so a search never reads a whole
large table. The list says so when the bound applies.

Jobs (the jobs browser's `q`, deadletters/jobs.py): no index on either database (one over the
arguments and errors would cost every enqueue and every failed attempt its entries), so the same
bound, `newest`: the newest JOB_SCAN jobs the other filters leave, and a time limit on top
(`time_limit`): a search that still takes longer is stopped and the page says so.
"""

import json
import time
from contextlib import contextmanager

from django.db import OperationalError, connections, transaction
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL

# The stored vectors of jobqueue migration 0027, each with its GIN index. Payload values are
# searched only for a user who may see them unmasked (a match would otherwise tell which letters
# hold a masked value): the others search the error text alone, from its own column.
PG_MATCH = "jobqueue_deadletter.search_all @@ websearch_to_tsquery('simple'::regconfig, %s)"
PG_ERROR_MATCH = "jobqueue_deadletter.search_error @@ websearch_to_tsquery('simple'::regconfig, %s)"

SQLITE_SCAN = 100_000
JOB_SCAN = 50_000
TIME_LIMIT = 5.0  # seconds


def newest(qs, scope, n: int):
    """`qs` narrowed to the newest `n` rows of `scope` by id (an index walk of n rows), and the
    newest row of `scope` left out (it and every older one were not searched), or None."""
    left_out = next(iter(scope.order_by("-id").values_list("id", flat=True)[n : n + 1]), None)
    return (qs if left_out is None else qs.filter(id__gt=left_out)), left_out


class SearchTimedOut(Exception):
    """A search stopped at its time limit (`time_limit`)."""

    def __init__(self, seconds: float):
        super().__init__(f"The search took longer than {seconds:g} s and was stopped")
        self.seconds = seconds


@contextmanager
def time_limit(using: str = "default", seconds: float | None = None):
    """The statements inside end after `seconds` (TIME_LIMIT) with SearchTimedOut.

    PostgreSQL: statement_timeout set LOCAL in a transaction of its own (or a savepoint), which
    a transaction pooler (PgBouncer) keeps on one server connection and which ends with it.
    SQLite: a progress handler that interrupts the statement once the deadline has passed."""
    seconds = TIME_LIMIT if seconds is None else seconds
    connection = connections[using]
    try:
        with transaction.atomic(using=using):
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT current_setting('statement_timeout'),"
                        " set_config('statement_timeout', %s, true)",
                        [str(max(1, round(seconds * 1000)))],
                    )
                    before = cursor.fetchone()[0]
                yield
                # Nested in a longer transaction, a LOCAL setting would outlive this block.
                with connection.cursor() as cursor:
                    cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
            else:
                deadline = time.monotonic() + seconds
                connection.connection.set_progress_handler(
                    lambda: time.monotonic() >= deadline, 1000
                )
                try:
                    yield
                finally:
                    connection.connection.set_progress_handler(None, 0)
    except OperationalError as exc:
        cause = exc.__cause__
        if getattr(cause, "sqlstate", None) == "57014" or str(cause) == "interrupted":
            raise SearchTimedOut(seconds) from exc
        raise


def bounded(using: str = "default") -> bool:
    """Whether a search on this database only looks at the newest SQLITE_SCAN letters."""
    return connections[using].vendor != "postgresql"


# Below this many matches a search is "rare": its letters are taken from the GIN index and
# sorted, instead of walking the time index and testing each letter's stored vector (which
# finds a page at once when many match, and reads the whole table when few do).
RARE = 5_000


def _few_matches(sql: str, text: str, using: str) -> bool:
    """Whether at most RARE letters are expected to match, by the planner's statistics of the
    stored vector (its most common words and their frequencies, kept by ANALYZE): a plan, not a
    read, so a common term costs no walk of its posting list (counting it from the index read
    all of it: 90 ms for a word in each of 1,000,000 letters). A word not among the most common
    is estimated rare; one that became common since the last ANALYZE is read from the index,
    the cost of the count this replaces."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"EXPLAIN (FORMAT JSON) SELECT 1 FROM jobqueue_deadletter WHERE {sql}", [text]
        )
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):  # psycopg returns json as text unless a loader is registered
        plan = json.loads(plan)
    return plan[0]["Plan"]["Plan Rows"] <= RARE


def matching(qs, text: str, *, payload: bool = False, using: str = "default"):
    """`qs` narrowed to the letters whose error (and, with `payload`, payload values) match
    `text`."""
    if connections[using].vendor == "postgresql":
        sql = PG_MATCH if payload else PG_ERROR_MATCH
        if _few_matches(sql, text, using):
            # OFFSET 0 keeps the subquery apart: its few ids come from the GIN index.
            return qs.filter(
                pk__in=RawSQL(f"SELECT id FROM jobqueue_deadletter WHERE {sql} OFFSET 0", [text])
            )
        return qs.filter(RawSQL(sql, [text], output_field=BooleanField()))
    qs, _ = newest(qs, qs.model.objects.using(using), SQLITE_SCAN)
    found = Q(last_error__icontains=text)
    if payload:
        found |= Q(args__icontains=text) | Q(kwargs__icontains=text)
    return qs.filter(found)
