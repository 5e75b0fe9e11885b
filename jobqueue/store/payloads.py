"""Payload and error text as every database stores it: JSON only (no pickle, ever), no NUL, no
lone surrogates, bounded."""

from __future__ import annotations

import json

from django.utils.json import normalize_json

from jobqueue.conf import setting
from jobqueue.errors import UnstorableValue
from jobqueue.models import DeadLetter


def _payload_encoder():
    """Compact JSON, NaN refused. json.dumps with options builds an encoder per call, and
    even JSONEncoder.encode builds its C encoder per call: a third of the time a small payload
    takes. The C encoder is made once here, without the circular-reference check (markers
    None), so a cycle, like a structure nested too deeply, ends in RecursionError: refused as
    the ValueError that check would have raised."""
    encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
    make = json.encoder.c_make_encoder
    if make is None:  # an interpreter without the C accelerator
        return encoder.encode
    chunks = make(
        None,
        encoder.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        False,
        False,
        False,
    )

    def encode(value) -> str:
        try:
            return "".join(chunks(value, 0))
        except RecursionError:
            raise ValueError("nested too deeply (or circular) for JSON") from None

    return encode


_encode = _payload_encoder()


def dumps(value) -> str:
    """JSON for a payload column; refuses anything JSON cannot carry (no pickle, ever)."""
    return _encode(value)


_EMPTY = {type(None): "null", list: "[]", dict: "{}"}

_NATIVE = frozenset({str, int, float, bool, type(None)})


def normalized(value, what: str = "value"):
    """Django's normalize_json(value), the form a TaskResult holds arguments in: the same
    result and the same errors, reached without its pattern match (an isinstance check against
    an abstract class per case) for the plain dicts, lists and scalars nearly every payload is
    made of; anything else (tuples, bytes, other mappings, str subclasses) goes to Django's.
    A value nested past what either walk can follow (Python's recursion limit, far beyond
    MAX_JSON_DEPTH) is refused as storable_json refuses a deep one, by name."""
    try:
        return _normalized(value)
    except RecursionError:
        raise UnstorableValue(_too_deep(what)) from None


def _normalized(value):
    kind = type(value)
    if kind in _NATIVE:
        return value
    if kind is dict:
        return {
            (k if type(k) in _NATIVE else normalize_json(k)): (
                v if type(v) in _NATIVE else _normalized(v)
            )
            for k, v in value.items()
        }
    if kind is list:
        return [v if type(v) in _NATIVE else _normalized(v) for v in value]
    return normalize_json(value)


class CheckedJSON(str):
    """JSON text storable_json already produced: passed where a value is expected (the worker
    hands its checked return values to acknowledge), it is stored as is, not encoded again."""

    __slots__ = ()


MAX_JSON_DEPTH = 64
"""How deeply a stored JSON value may nest: one limit for every value Redrive stores (payloads,
return values, workflow signals and step results, outbox bodies, broker bodies). Real payloads
nest a handful of levels; the limit keeps every page, command and walk that shows a value far
from Python's recursion limit (a value nested ~990 deep was storable and then a 500 wherever it
was shown)."""


def json_depth(value) -> int:
    """How deeply `value` nests (a scalar is 0, [] and {} are 1), walked without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > deepest:
            deepest = depth
            if deepest > MAX_JSON_DEPTH:  # no need to walk a too-deep value to its bottom
                return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _may_nest_too_deep(text: str) -> bool:
    """Whether JSON `text` could nest deeper than MAX_JSON_DEPTH: only if it holds more opening
    brackets than that (and so is longer than twice it). The length, then str.count (a scan in
    C), clear nearly every value without a walk."""
    return len(text) > 2 * MAX_JSON_DEPTH and text.count("[") + text.count("{") > MAX_JSON_DEPTH


def _refuse_too_deep(value, text: str | None, what: str) -> None:
    if text is not None and not _may_nest_too_deep(text):
        return
    if json_depth(value) > MAX_JSON_DEPTH:
        raise UnstorableValue(_too_deep(what))


def _too_deep(what: str) -> str:
    return f"{what} nests deeper than {MAX_JSON_DEPTH} levels; flatten it or pass an id"


def loads(text: str, what: str = "value", **options):
    """JSON text as data, refused (ValueError, UnstorableValue) when it is not JSON, holds an
    integer too long to read, or nests deeper than MAX_JSON_DEPTH: the reading side of the
    same door storable_json is."""
    if _may_nest_too_deep(text) and text_depth(text) > MAX_JSON_DEPTH:
        raise UnstorableValue(_too_deep(what))
    try:
        return json.loads(text, **options)
    except RecursionError:  # unreachable after the depth scan, kept as the last guard
        raise UnstorableValue(f"{what} nests too deeply") from None


def text_depth(text: str, limit: int = MAX_JSON_DEPTH) -> int:
    """The bracket depth of JSON text outside its strings, read no further once past `limit`
    (then some depth above it): a bound checked before parsing, which would recurse."""
    deepest = depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def storable_json(value, what: str = "value") -> str:
    """JSON text both databases store and give back unchanged.

    Raises TypeError (not JSON), ValueError (NaN, infinity, an integer too long to print) or
    UnstorableValue: a value nested deeper than MAX_JSON_DEPTH, or a string or key holding NUL,
    which PostgreSQL refuses in jsonb ("unsupported Unicode escape sequence"), or a lone
    surrogate, which it refuses as invalid JSON. SQLite would take both; they are refused there
    too, so a payload's fate never depends on the database. The encoder escapes every non-ASCII
    character, so one scan for a backslash-u escape clears almost every text; only one
    containing such an escape is walked.
    """
    if type(value) is CheckedJSON:
        return value
    empty = _EMPTY.get(type(value))  # most payloads and return values: no encoding
    if empty is not None and not value:
        return empty
    try:
        text = _encode(value)
    except ValueError:
        # The encoder's own limit (Python's recursion limit, or a cycle): name ours instead.
        if isinstance(value, dict | list | tuple):
            _refuse_too_deep(value, None, what)
        raise
    _refuse_too_deep(value, text, what)
    if "\\u" in text and ("\\u0000" in text or "\\ud" in text):
        _refuse_unstorable(value, what)
    return text


def _refuse_unstorable(value, path: str) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise UnstorableValue(
                f"{path} contains NUL (\\u0000), which PostgreSQL cannot store; "
                "encode binary data (base64) or strip it"
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UnstorableValue(
                f"{path} contains a lone surrogate ({value[exc.start]!a}), which is not text "
                "a database can store; decode bytes with errors='replace'"
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_unstorable(key, f"a key of {path}")
            _refuse_unstorable(item, f"{path}[{key!a}]")
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            _refuse_unstorable(item, f"{path}[{n}]")


def check_payload(args, kwargs, limit: int | None = None) -> tuple[str, str]:
    """JSON only, and small: pass ids, not documents, so a task reads fresh state when it runs
    rather than a copy that went stale in the queue.

    Returns the two JSON texts, so an insert encodes each payload once. `limit`:
    REDRIVE["MAX_PAYLOAD_BYTES"] when not given (a caller checking many reads it once).
    """
    args_json, kwargs_json = storable_json(args, "args"), storable_json(kwargs, "kwargs")
    size = len(args_json) + len(kwargs_json)
    if limit is None:
        limit = setting("MAX_PAYLOAD_BYTES")
    if size > limit:
        raise ValueError(f"payload is {size} bytes, over the {limit}-byte limit")
    return args_json, kwargs_json


def check_value(value, what: str, limit: int | None = None) -> CheckedJSON:
    """One value kept under the payload rules (a task's return value, a workflow signal's
    payload): storable_json, and at most `limit` bytes of JSON, REDRIVE["MAX_PAYLOAD_BYTES"]
    when not given. UnstorableValue (a ValueError) says which rule it breaks."""
    text = storable_json(value, what)
    if limit is None:
        limit = setting("MAX_PAYLOAD_BYTES")
    if len(text) > limit:  # the encoder escapes every non-ASCII character: one byte each
        raise UnstorableValue(
            f"{what} is {len(text)} bytes, over the {limit}-byte limit "
            '(REDRIVE["MAX_PAYLOAD_BYTES"]); store it elsewhere and pass its id'
        )
    return CheckedJSON(text)


MAX_MESSAGE_CHARS = 4_000
CLASS_PATH_CHARS = DeadLetter._meta.get_field("error_class").max_length
MAX_TRACEBACK_CHARS = 64_000


def storable_text(text: str, limit: int) -> str:
    """Text any database column takes: no NUL (PostgreSQL refuses it), no lone surrogates
    (undecodable bytes in an exception message), and bounded, keeping the end of a traceback."""
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limit:
        # The marker counts against the limit (a column may be exactly that wide); the number
        # it prints never has more digits than len(text).
        keep = max(limit - len(f"[{len(text)} characters cut]\n"), 0)
        text = f"[{len(text) - keep} characters cut]\n" + text[len(text) - keep :]
        text = text[-limit:] if len(text) > limit else text
    return text


MAX_REASON_CHARS = 2_000


def operator_action(actor, reason, *, actor_chars: int) -> tuple[str, str]:
    """Who acts and why, as an audit row stores them: both required, bounded, storable."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("say why: a reason is required")
    if not isinstance(actor, str) or not actor.strip():
        raise ValueError("the operator's name is required")
    return (
        storable_text(actor.strip(), actor_chars),
        storable_text(reason.strip(), MAX_REASON_CHARS),
    )
