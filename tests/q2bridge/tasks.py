"""django-q2 task functions the tests enqueue; the qcluster subprocess imports them by path."""

import os
from pathlib import Path


class ReceiptDown(Exception):
    pass


def always_fails(order_id):
    _mark(f"always_fails {order_id}")
    raise ReceiptDown(f"receipt API down for order {order_id}")


def fails_until_fixed(order_id, switch: str):
    """Fails while the switch file is absent: the fault an operator fixes before a replay."""
    _mark(f"fails_until_fixed {order_id}")
    if not Path(switch).exists():
        raise ReceiptDown(f"receipt API down for order {order_id}")
    return {"order": order_id, "receipt": "sent"}


def fails_once(marker: str):
    """Fails the first time (no marker file yet), succeeds after."""
    _mark(f"fails_once {marker}")
    path = Path(marker)
    if not path.exists():
        path.write_text("failed once\n")
        raise ReceiptDown("first attempt fails")
    return "ok"


def _mark(line: str):
    """Append-only record of every run, outside the database."""
    sink = os.environ.get("REDRIVE_TEST_SINK")
    if sink:
        with open(sink, "a") as fh:
            fh.write(line + "\n")
