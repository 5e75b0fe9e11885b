"""AMQP 0-9-1 message properties kept as the broker sent them (the RabbitMQ source's reader).

pika reads a message's properties into Python values and writes them back from those, which a
stranger's message does not survive: a float header comes back an integer, a timestamp past
Python's dates (2**63) cannot be read at all and drops the connection, and a value pika cannot
write stops the publish. So the RabbitMQ source keeps the properties' bytes: they are read into
values only to be shown, and a message republished (stamped, or replayed) carries the same bytes
with only Redrive's own headers changed.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal

from pika import frame, spec
from pika.adapters.select_connection import SelectConnection
from pika.exceptions import InvalidFrameError

from ..payloads import MAX_JSON_DEPTH


class Unreadable(ValueError):
    """Properties this reader cannot take apart. RabbitMQ refuses most such messages when they
    are published (an unknown field type, bytes past the last field), not all: a property flag
    no property has passes."""


# The basic class's properties in wire order, the first one at flag bit 15.
FIELDS = (
    ("content_type", "shortstr"),
    ("content_encoding", "shortstr"),
    ("headers", "table"),
    ("delivery_mode", "octet"),
    ("priority", "octet"),
    ("correlation_id", "shortstr"),
    ("reply_to", "shortstr"),
    ("expiration", "shortstr"),
    ("message_id", "shortstr"),
    ("timestamp", "timestamp"),
    ("type", "shortstr"),
    ("user_id", "shortstr"),
    ("app_id", "shortstr"),
    ("cluster_id", "shortstr"),
)
KINDS = dict(FIELDS)
# A field value's type byte: its size, or how struct reads it; S, x, A and F carry their length.
FIXED = {b"t": ">B", b"b": ">b", b"B": ">B", b"s": ">h", b"U": ">h", b"u": ">H", b"I": ">i",
         b"i": ">I", b"l": ">q", b"L": ">q", b"f": ">f", b"d": ">d", b"T": ">Q"}  # fmt: skip
SIZES = {**{kind: struct.calcsize(f) for kind, f in FIXED.items()}, b"D": 5, b"V": 0}
SIZED = frozenset({b"S", b"x", b"A", b"F"})


def _end(data: bytes, offset: int, size: int) -> int:
    if offset + size > len(data):
        raise Unreadable("the message's properties end in the middle of a value")
    return offset + size


def _sized_end(data: bytes, offset: int, prefix: str) -> int:
    """Where the item at `offset`, its length first (as struct `prefix`), ends."""
    start = _end(data, offset, struct.calcsize(prefix))
    return _end(data, start, struct.unpack_from(prefix, data, offset)[0])


def _value_end(data: bytes, offset: int) -> int:
    """Where the field value starting at `offset` (its type byte) ends, read without decoding
    it (no recursion: a nested table or array says its own length)."""
    kind = data[offset : offset + 1]
    if kind in SIZES:
        return _end(data, offset + 1, SIZES[kind])
    if kind in SIZED:
        return _sized_end(data, offset + 1, ">I")
    raise Unreadable(f"a header value has the unknown type {kind!r}")


def _entries(table: bytes) -> list[tuple[bytes, bytes]]:
    """A table's content as (name, encoded value) pairs, in their order."""
    entries, offset = [], 0
    while offset < len(table):
        name_end = _sized_end(table, offset, ">B")
        end = _value_end(table, name_end)
        entries.append((table[offset + 1 : name_end], table[name_end:end]))
        offset = end
    return entries


def _elements(array: bytes) -> list[bytes]:
    values, offset = [], 0
    while offset < len(array):
        end = _value_end(array, offset)
        values.append(array[offset:end])
        offset = end
    return values


def value(encoded: bytes, depth: int = 1):
    """One encoded field value as a Python value to show: what RabbitMQ can carry but Python
    cannot hold (a timestamp past its dates) as text saying so, and a table or array nested
    deeper than any stored value may (MAX_JSON_DEPTH) as a summary of its size."""
    kind, data = encoded[:1], encoded[1:]
    if kind == b"T":
        (seconds,) = struct.unpack(">Q", data)
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return f"timestamp {seconds} (past the dates Python reads)"
    if kind == b"t":
        return bool(data[0])
    if kind in FIXED:
        return struct.unpack(FIXED[kind], data)[0]
    if kind == b"D":
        return Decimal(struct.unpack(">i", data[1:])[0]).scaleb(-data[0])
    if kind == b"V":
        return None
    content = data[4:]
    if kind == b"x":
        return content
    if kind == b"S":
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError:
            return content
    if depth > MAX_JSON_DEPTH:
        return f"[{len(content)} bytes nested deeper than {MAX_JSON_DEPTH} levels]"
    if kind == b"A":
        return [value(element, depth + 1) for element in _elements(content)]
    return {name_of(name): value(v, depth + 1) for name, v in _entries(content)}


def name_of(name: bytes) -> str:
    return name.decode("utf-8", "backslashreplace")


def text(value: str) -> bytes:
    """A long string field value."""
    data = value.encode("utf-8")
    return b"S" + struct.pack(">I", len(data)) + data


def integer(value: int) -> bytes:
    """A signed 64-bit field value."""
    return b"l" + struct.pack(">q", value)


@dataclass(frozen=True)
class Message:
    """A message as the broker sent it: each present property's encoded value by name, and the
    headers table as (name, encoded value) entries (None when the message has no table)."""

    fields: dict[str, bytes]
    headers: list[tuple[bytes, bytes]] | None
    body: bytes

    @classmethod
    def read(cls, raw: bytes, body: bytes) -> Message:
        if len(raw) < 2:
            raise Unreadable("the message's properties are cut short")
        (flags,) = struct.unpack_from(">H", raw)
        if flags & 0b11:  # a second flag word, or the reserved bit: no property we know
            raise Unreadable(f"the message's property flags {flags:#06x} name unknown properties")
        fields, offset = {}, 2
        for bit, (name, kind) in zip(range(15, 1, -1), FIELDS, strict=True):
            if not flags & (1 << bit):
                continue
            if kind in ("shortstr", "table"):
                end = _sized_end(raw, offset, ">B" if kind == "shortstr" else ">I")
            else:
                end = _end(raw, offset, 1 if kind == "octet" else 8)
            fields[name] = raw[offset:end]
            offset = end
        if offset != len(raw):
            raise Unreadable("the message's properties have bytes past their last field")
        table = fields.pop("headers", None)
        return cls(fields, None if table is None else _entries(table[4:]), body)

    def encode(self) -> bytes:
        """The properties' bytes: those read, with the headers table as it now is."""
        flags, pieces = 0, []
        for bit, (name, _kind) in zip(range(15, 1, -1), FIELDS, strict=True):
            if name == "headers":
                if self.headers is None:
                    continue
                table = b"".join(bytes([len(n)]) + n + v for n, v in self.headers)
                encoded = struct.pack(">I", len(table)) + table
            elif name in self.fields:
                encoded = self.fields[name]
            else:
                continue
            flags |= 1 << bit
            pieces.append(encoded)
        return struct.pack(">H", flags) + b"".join(pieces)

    def with_headers(self, drop=frozenset(), add=()) -> Message:
        """The same message without the headers named in `drop` (names as text) and with the
        (name, encoded value) pairs in `add` at the end."""
        dropped = {name.encode() for name in drop}
        kept = [entry for entry in self.headers or () if entry[0] not in dropped]
        added = [(name.encode(), encoded) for name, encoded in add]
        return replace(self, headers=kept + added if self.headers is not None or added else None)

    def header(self, name: str):
        """The value of the header `name` when the message has it exactly once, else None."""
        found = [v for n, v in self.headers or () if n == name.encode()]
        return value(found[0]) if len(found) == 1 else None

    def shown_headers(self, hidden, *, depth: int = 1) -> dict:
        """The headers but those named in `hidden`, as values; `depth`: how deeply a header's
        value sits in the value they are stored in (a table or array past MAX_JSON_DEPTH
        there is summarised)."""
        hidden = {name.encode() for name in hidden}
        return {name_of(n): value(v, depth) for n, v in self.headers or () if n not in hidden}

    def shown_properties(self) -> dict:
        """The properties besides the headers, as values (short strings as text)."""
        shown = {}
        for name, encoded in self.fields.items():
            if KINDS[name] in ("octet", "timestamp"):
                shown[name] = int.from_bytes(encoded, "big")
            else:
                shown[name] = encoded[1:].decode("utf-8", "backslashreplace")
        return shown

    def digest(self, ignored) -> str:
        """SHA-256 of the body and the properties without the headers in `ignored`, the other
        headers in name order (so a broker that rewrites the table keeps the digest)."""
        ignored = {name.encode() for name in ignored}
        kept = sorted((e for e in self.headers or () if e[0] not in ignored), key=lambda e: e[0])
        return raw_digest(replace(self, headers=kept or None).encode(), self.body)


def raw_digest(properties: bytes, body: bytes) -> str:
    """SHA-256 of a message's properties' bytes and body (also of one this reader cannot
    take apart, as it came)."""
    sha = hashlib.sha256(struct.pack(">Q", len(properties)) + properties)
    sha.update(body)
    return sha.hexdigest()


class Properties(spec.BasicProperties):
    """Properties held as their bytes: what the broker sent, or what a republish sends."""

    def __init__(self, raw: bytes = b""):
        super().__init__()
        self.raw = raw

    def encode(self):
        return [self.raw]


class Connection(SelectConnection):
    """pika's connection with one change: a message's properties come as `Properties` (their
    bytes), never decoded by pika. Given to BlockingConnection as its implementation class."""

    def _read_frame(self):
        data = self._frame_buffer
        if len(data) >= spec.FRAME_HEADER_SIZE and data[0] == spec.FRAME_HEADER:
            _kind, channel, size = struct.unpack_from(">BHL", data)
            end = spec.FRAME_HEADER_SIZE + size + spec.FRAME_END_SIZE
            if end > len(data):
                return 0, None
            if data[end - 1] != spec.FRAME_END:
                raise InvalidFrameError("Invalid FRAME_END marker")
            payload = data[spec.FRAME_HEADER_SIZE : end - 1]
            class_id, _weight, body_size = struct.unpack_from(">HHQ", payload)
            if class_id == spec.BasicProperties.INDEX:
                return end, frame.Header(channel, body_size, Properties(bytes(payload[12:])))
        return super()._read_frame()
