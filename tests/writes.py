"""Only the store writes the queue's state (DESIGN's one-way rule, issue 33 item 5), checked on
every test of the suite: each INSERT, UPDATE or DELETE on a queue table (jobqueue_*) whose
nearest project frame is library code outside jobqueue/store fails the test that made it,
naming the statement and the frame. Test code writing its fixtures (factories, direct rows),
migrations and the example project's seeding are not the library and may write.
"""

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = tuple(str(ROOT / package) + os.sep for package in ("jobqueue", "deadletters"))
STORE = str(ROOT / "jobqueue" / "store") + os.sep
MIGRATIONS = os.sep + "migrations" + os.sep
# A model's own save() or delete() (the audit log's append-only guard) writes for its caller:
# the frame to judge is the one that called it.
MODELS = str(ROOT / "jobqueue" / "models.py")
PROJECT = (str(ROOT) + os.sep,)
OUTSIDE = (str(ROOT / ".venv") + os.sep,)
# The table each INSERT, UPDATE or DELETE writes (in a WITH's parts too), quoted or not.
TARGETS = re.compile(
    r"\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+[\"`]?(\w+)", re.IGNORECASE
).findall


def writer(sql: str) -> str | None:
    """The library frame outside the store that wrote `sql` to a queue table, or None."""
    if not any(table.lower().startswith("jobqueue_") for table in TARGETS(sql)):
        return None
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if (
            path.startswith(PROJECT)
            and not path.startswith(OUTSIDE)
            and path not in (__file__, MODELS)
        ):
            if path.startswith(STORE) or MIGRATIONS in path or not path.startswith(LIBRARY):
                return None
            return f"{os.path.relpath(path, ROOT)}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return None


class Guard:
    """A connection's execute wrapper keeping each write `writer` finds."""

    def __init__(self):
        self.found: list[str] = []
        self.active = True

    def __call__(self, execute, sql, params, many, context):
        if not self.active:
            return execute(sql, params, many, context)
        where = writer(sql if isinstance(sql, str) else str(sql))
        if where is not None:
            self.found.append(f"{where}: {' '.join(str(sql).split())[:160]}")
        return execute(sql, params, many, context)
