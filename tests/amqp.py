"""The test RabbitMQ on 127.0.0.1:5672 (guest/guest): a connection, or a skip saying how to run
the tests that need it (a failure under REDRIVE_REQUIRE_RABBITMQ=1, as in CI)."""

import os
import struct

import pytest

AMQP_URL = os.environ.get("REDRIVE_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def connect_or_skip(purpose: str):
    """A pika BlockingConnection to the test broker; the caller closes it."""
    import pika

    params = pika.URLParameters(AMQP_URL)
    params.connection_attempts, params.socket_timeout = 1, 3
    try:
        return pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as exc:
        reason = (
            f"RabbitMQ unreachable at {AMQP_URL} ({type(exc).__name__}): start one on "
            "127.0.0.1:5672 with guest/guest (e.g. `apt-get install rabbitmq-server`) or set "
            f"REDRIVE_RABBITMQ_URL to run {purpose}"
        )
        if os.environ.get("REDRIVE_REQUIRE_RABBITMQ") == "1":
            pytest.fail(f"REDRIVE_REQUIRE_RABBITMQ=1 but {reason}", pytrace=False)
        pytest.skip(reason)


# --- messages pika cannot write --------------------------------------------------------------
# A stranger's client can send any AMQP field value; pika writes only some (no float, no
# timestamp past Python's dates). These build the wire bytes themselves.


def field(kind: bytes, payload: bytes) -> bytes:
    """One encoded field value: its type byte, then its payload (length first where AMQP says)."""
    if kind in (b"S", b"x", b"A", b"F"):
        payload = struct.pack(">I", len(payload)) + payload
    return kind + payload


def table(*entries: tuple[str, bytes]) -> bytes:
    """A table's content: (name, encoded value) pairs."""
    return b"".join(bytes([len(name.encode())]) + name.encode() + value for name, value in entries)


def long_string(value: str) -> bytes:
    return field(b"S", value.encode())


def sent_as(raw: bytes):
    """pika properties that go out as exactly these bytes."""
    import pika

    class Raw(pika.spec.BasicProperties):
        def encode(self):
            return [raw]

    return Raw()


def raw_properties(headers: bytes | None = None, *, content_type: str | None = None, flags=0):
    """Properties of a content type and a headers table (its content), as bytes; `flags`: more
    property flag bits to set."""
    pieces = []
    if content_type is not None:
        flags |= 1 << 15
        pieces.append(bytes([len(content_type)]) + content_type.encode())
    if headers is not None:
        flags |= 1 << 13
        pieces.append(struct.pack(">I", len(headers)) + headers)
    return sent_as(struct.pack(">H", flags) + b"".join(pieces))
