"""Both dialects implement the store's Dialect protocol exactly: every member, each method's
parameters (names, kinds, defaults), and nothing public beside it, so neither can drift from
what the store calls nor grow a function the other lacks."""

import inspect
import typing

import pytest
from django.db import connection

from jobqueue.store import dialects
from jobqueue.store.dialects import Dialect
from jobqueue.store.postgresql import PostgreSQL
from jobqueue.store.sqlite import SQLite

# Public members a dialect may have beyond the protocol, each with the reason.
EXTRAS: dict[str, str] = {}


# The special methods a protocol may ask for (Sender's: a context manager).
SPECIAL = {"__enter__", "__exit__"}


def protocol_members(protocol) -> set[str]:
    declared = {name for name in vars(protocol) if not name.startswith("_") or name in SPECIAL}
    return declared | set(protocol.__annotations__)


def parameters(function) -> list[tuple]:
    """A signature as what callers rely on: names, kinds and defaults (the protocol carries the
    types), `self` left out."""
    signature = inspect.signature(function)
    return [(p.name, p.kind, p.default) for p in signature.parameters.values() if p.name != "self"]


def drift(cls, protocol=Dialect) -> list[str]:
    """How `cls` departs from `protocol`, one line per difference; [] when it matches."""
    found = []
    hints = typing.get_type_hints(protocol)
    for name in sorted(protocol_members(protocol)):
        if not hasattr(cls, name):
            found.append(f"{name}: missing")
        elif name in hints:
            if not isinstance(getattr(cls, name), hints[name]):
                found.append(f"{name}: not a {hints[name].__name__}")
        elif not callable(getattr(cls, name)):
            found.append(f"{name}: not a method")
        elif parameters(getattr(cls, name)) != parameters(getattr(protocol, name)):
            found.append(f"{name}: {inspect.signature(getattr(cls, name))}")
    public = {name for name in dir(cls) if not name.startswith("_")}
    found += [
        f"{name}: not in the protocol" for name in sorted(public - protocol_members(protocol))
    ]
    return [line for line in found if line.split(":")[0] not in EXTRAS]


@pytest.mark.parametrize("cls", [PostgreSQL, SQLite])
def test_each_dialect_implements_the_protocol_exactly(cls):
    assert drift(cls) == []
    assert isinstance(cls(), Dialect)


@pytest.mark.parametrize("dialect", [PostgreSQL(), SQLite()])
def test_each_dialects_bulk_sender_implements_its_protocol(dialect):
    sender = dialect.sender(connection, None)
    assert drift(type(sender), dialects.Sender) == []


def test_the_protocol_names_what_the_store_calls():
    assert protocol_members(Dialect) == {
        "LOOPS", "SEND_CHUNK", "claim", "ready_keys", "acknowledge", "extend", "insert_many",
        "insert_keyed", "sender", "notify", "mark_replaying", "outbox_insert", "outbox_claim",
        "among", "bound_transaction",
    }  # fmt: skip


def test_a_dialect_that_drifts_is_told_apart():
    """The check itself can fail: a member missing, one that is no method, a parameter dropped,
    a constant of the wrong type and a public extra are each reported."""

    class Drifted(SQLite):
        SEND_CHUNK = "500"
        bound_transaction = None

        def claim(self, connection, *, worker_id, queues, limit, now, lease_until, keys=None):
            return []

        def vacuum(self, connection):
            pass

    without_notify = type(
        "WithoutNotify", SQLite.__bases__, {k: v for k, v in vars(SQLite).items() if k != "notify"}
    )
    assert drift(Drifted) == [
        "SEND_CHUNK: not a int",
        "bound_transaction: not a method",
        "claim: (self, connection, *, worker_id, queues, limit, now, lease_until, keys=None)",
        "vacuum: not in the protocol",
    ]
    assert drift(without_notify) == ["notify: missing"]


def test_the_connection_gets_its_own_dialect_once():
    dialect = dialects.of("default")
    assert isinstance(dialect, PostgreSQL if connection.vendor == "postgresql" else SQLite)
    assert dialects.of("default") is dialect


def test_shared_code_is_written_once():
    """What both dialects did alike is inherited, not repeated."""
    for name in ("outbox_claim",):
        assert name not in vars(PostgreSQL) and name not in vars(SQLite)
        assert getattr(PostgreSQL, name) is getattr(SQLite, name)
