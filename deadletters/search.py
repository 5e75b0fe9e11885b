"""Search in dead letters' error text and payload values (the list's `q` filter), per database.

PostgreSQL: full-text search with the `simple` configuration (lower-cased words, no stemming, no
stop words: ids, codes and e-mail addresses match as written) over the last error and every
string and number in the payload, through the GIN expression index `jobqueue_dl_search_idx`
(jobqueue migration 0018, which spells out the same expression). The query is read by
`websearch_to_tsquery`: words are ANDed, "quoted phrases" and `-excluded` words work, and no
input is a syntax error.

SQLite: no index; a substring match (case-insensitive for ASCII) over the error text and the
payload's JSON, bounded to the newest SQLITE_SCAN letters so a search never reads a whole
large table. The list says so when the bound applies.
"""

from django.db import connections, transaction
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL


# Must stay identical to the index expressions in jobqueue/migrations/0018 (a test EXPLAINs a
# search and checks the index is used). Payload values are searched only for a user who may see
# them unmasked (a match would otherwise tell which letters hold a masked value): the others
# search the error text alone, from its own index.
def _vector(*, payload: bool, table: str = "") -> str:
    """The indexed tsvector expression; with `table`, its columns qualified (a list may join the
    job table, which has args and kwargs too: the planner matches the index by columns)."""
    col = f"{table}." if table else ""
    error = f"to_tsvector('simple'::regconfig, {col}last_error)"
    if not payload:
        return error
    values = '\'["string", "numeric"]\'::jsonb'
    return (
        f"({error} || jsonb_to_tsvector('simple'::regconfig, {col}args, {values})"
        f" || jsonb_to_tsvector('simple'::regconfig, {col}kwargs, {values}))"
    )


def _match(*, payload: bool) -> str:
    vector = _vector(payload=payload, table="jobqueue_deadletter")
    return f"{vector} @@ websearch_to_tsquery('simple'::regconfig, %s)"


PG_MATCH = _match(payload=True)
PG_ERROR_MATCH = _match(payload=False)

SQLITE_SCAN = 100_000


def bounded(using: str = "default") -> bool:
    """Whether a search on this database only looks at the newest SQLITE_SCAN letters."""
    return connections[using].vendor != "postgresql"


# Below this many matches a search is "rare": its letters are taken from the GIN index and
# sorted, instead of walking the time index and testing each letter (which PostgreSQL chooses
# when it expects many matches, and which reads the whole table when there are few).
RARE = 5_000


def _few_matches(sql: str, text: str, using: str) -> bool:
    """Whether at most RARE letters match, counted from the GIN index alone (sequential and
    plain index scans are off for this one statement, so a rare term costs a few index pages
    and a common one stops at RARE + 1 rows)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM jobqueue_deadletter WHERE {sql} "
            f"LIMIT {RARE + 1}) AS m",
            [text],
        )
        return cursor.fetchone()[0] <= RARE


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
    newest = (
        qs.model.objects.using(using)
        .order_by("-id")
        .values_list("id", flat=True)[SQLITE_SCAN - 1 : SQLITE_SCAN]
    )
    floor = next(iter(newest), None)
    if floor is not None:
        qs = qs.filter(id__gte=floor)
    found = Q(last_error__icontains=text)
    if payload:
        found |= Q(args__icontains=text) | Q(kwargs__icontains=text)
    return qs.filter(found)
