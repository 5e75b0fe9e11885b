"""A selection of more ids than one SQLite statement takes as parameters (32,766 in a default
build) is frozen, previewed and confirmed with exact counts, each read one statement however
many ids (jobqueue.store.Among: one array, or one JSON text, parameter)."""

import sqlite3
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from deadletters import actions, selectors
from deadletters.api.actions import by_cause
from deadletters.models import ReplayRun
from jobqueue import store
from jobqueue.models import AuditEntry, Job, JobState
from tests.deadletters.conftest import user_with_role
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db

DEFAULT_SQLITE_LIMIT = 32_766
N = DEFAULT_SQLITE_LIMIT + 234


@pytest.fixture(autouse=True)
def default_sqlite_limit():
    """SQLite at its default build's parameter limit: a build with a higher one (Debian's takes
    250,000) would hide a read that binds a parameter per id."""
    if connection.vendor != "sqlite":
        yield
        return
    connection.ensure_connection()
    limit = sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER
    was = connection.connection.setlimit(limit, DEFAULT_SQLITE_LIMIT)
    try:
        yield
    finally:
        connection.connection.setlimit(limit, was)


def copies(template, n: int, **columns: str) -> list[int]:
    """`n` copies of the row `template`, made by the database in one statement (a factory
    would take minutes), each column of `columns` an SQL expression of `n`, the copy's number
    from 1 (`%%` for modulo: the statement has parameters); their ids."""
    model = type(template)
    table = model._meta.db_table
    names = [f.column for f in model._meta.concrete_fields if not f.primary_key]
    quoted = [connection.ops.quote_name(name) for name in names]
    values = [
        f"({columns[n]})" if n in columns else f"t.{q}" for n, q in zip(names, quoted, strict=True)
    ]
    start = model.objects.order_by("-pk").values_list("pk", flat=True).first()
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {table} ({", ".join(quoted)})
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < %s)
            SELECT {", ".join(values)} FROM {table} AS t, g WHERE t.id = %s ORDER BY g.n""",
            [n, template.pk],
        )
    ids = list(model.objects.filter(pk__gt=start).order_by("pk").values_list("pk", flat=True))
    assert len(ids) == n
    return ids


# The letters' columns, by their number n, and the same rules in Python for the expected counts.
STATE = "CASE WHEN n %% 10 = 0 THEN 'replayed' WHEN n %% 10 = 1 THEN 'discarded' ELSE 'pending' END"
REPLAYS = "CASE WHEN n %% 7 = 0 THEN 3 WHEN n %% 7 = 1 THEN 1 ELSE 0 END"
TASK = "CASE WHEN n %% 2 = 0 THEN 'tests.even' ELSE 'tests.odd' END"
QUEUE = "CASE WHEN n %% 5 = 0 THEN 'mail' ELSE 'default' END"
SOURCE = "CASE WHEN n %% 11 = 0 THEN 'outbox' ELSE 'jobqueue' END"


def state(n):
    return "replayed" if n % 10 == 0 else "discarded" if n % 10 == 1 else "pending"


def replays(n):
    return 3 if n % 7 == 0 else 1 if n % 7 == 1 else 0


@pytest.fixture
def letters(settings):
    settings.REDRIVE = {**settings.REDRIVE, "MAX_REPLAYS": 3}
    template = DeadLetterFactory()
    ids = copies(
        template,
        N,
        state=STATE,
        replays=REPLAYS,
        task_path=TASK,
        queue_name=QUEUE,
        source=SOURCE,
        idempotency_key="'large:' || n",
        # Many causes: PostgreSQL's counter triggers update a row per cause for each letter,
        # and 33,000 updates of one row in one transaction take minutes.
        fingerprint="'cause' || (n %% 1000)",
    )
    template.delete()
    return ids


def test_a_letters_selection_past_the_sqlite_limit_is_previewed_and_confirmed_exactly(
    letters, django_assert_max_num_queries
):
    operator = user_with_role("operator", "olga")
    missing = [letters[-1] + k for k in range(1, 4)]  # ticked, then gone
    numbers = range(1, N + 1)
    pending = [n for n in numbers if state(n) == "pending"]
    poisoned = [n for n in pending if replays(n) >= 3]

    selection = actions.freeze(
        "letters.replay",
        user=operator,
        channel=AuditEntry.Channel.API,
        data={"ids": [str(pk) for pk in letters + missing]},
    )
    assert selection.ids == letters + missing
    # Whether it is confirmed, the counts (one statement), the paused queues and the sample,
    # whatever the size.
    with django_assert_max_num_queries(4):
        shown = actions.describe(selection)

    assert shown["count"] == N + 3
    assert shown["will_act"] == len(pending) - len(poisoned)
    assert {t["task_path"]: t["count"] for t in shown["by_type"]} == {
        "tests.even": N // 2,
        "tests.odd": N - N // 2,
    }
    assert {s["reason"]: s["count"] for s in shown["skipped"]} == {
        "already replayed successfully": sum(state(n) == "replayed" for n in numbers),
        "discarded": sum(state(n) == "discarded" for n in numbers),
        "replayed 3 times already (poison limit)": len(poisoned),
        "no such dead letter": 3,
    }
    assert shown["poisoned"] == len(poisoned)
    assert shown["previously_replayed"] == sum(replays(n) > 0 for n in numbers)
    assert {q["queue"]: q["count"] for q in shown["queues"]} == {
        "mail": N // 5,
        "default": N - N // 5,
    }
    assert shown["can_change_queue"] is False  # the outbox's letters go back where they came
    assert shown["sample"] == letters[:20]
    assert selectors.preview(selection.ids, action="replay").fixed_queue == N // 11
    causes = by_cause(selection)
    assert len(causes) == 1000 and sum(c["count"] for c in causes) == N

    # Not to another queue: some of its letters are the outbox's, and nothing is written.
    with pytest.raises(actions.Conflict, match=f"{N // 11} letters of source outbox"):
        actions.confirm(
            selection.pk,
            user=operator,
            channel=AuditEntry.Channel.API,
            data={"reason": "fixed", "to_queue": "default"},
        )
    assert not ReplayRun.objects.exists()

    # Confirmed: the run records every job type of the selection and names the paused queue
    # some of its letters go back to.
    store.queues.pause("mail", actor="olga", reason="maintenance")
    outcome = actions.confirm(
        selection.pk, user=operator, channel=AuditEntry.Channel.API, data={"reason": "fixed"}
    )
    assert outcome.result.requested == N + 3
    assert sorted(outcome.result.job_types) == ["tests.even", "tests.odd"]
    assert outcome.data["paused_queues"] == ["mail"]


def test_a_jobs_selection_past_the_sqlite_limit_is_previewed_exactly(
    django_assert_max_num_queries,
):
    operator = user_with_role("operator", "olga")
    later = timezone.now() + timedelta(hours=1)
    template = JobFactory(run_after=later)
    ids = copies(template, N, state="CASE WHEN n %% 4 = 0 THEN 'cancelled' ELSE 'ready' END")
    template.delete()

    selection = actions.freeze(
        "jobs.cancel", user=operator, channel=AuditEntry.Channel.API, data={"ids": ids}
    )
    # Whether it is applied, the count and the sample.
    with django_assert_max_num_queries(3):
        shown = actions.describe(selection)
    assert shown["count"] == N
    assert shown["will_act"] == N - N // 4 == Job.objects.filter(state=JobState.READY).count()
    assert shown["sample"] == ids[::-1][:20]
