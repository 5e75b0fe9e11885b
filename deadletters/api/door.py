"""The API's one door: every request passes it after its token and before its endpoint, so
before any action runs or anything is written.

Each endpoint declares what it takes as the Django form fields that check it (`Door`): its
query parameters and its JSON body's fields. From those fields come both the OpenAPI document
(`openapi`: types, choices as `enum`, lengths, patterns, ranges) and the checks made here, so
the document says exactly what the door lets through:

- a query parameter the endpoint does not take: 400 `unknown_parameters`, naming it (a
  misspelled filter must never widen what a list or a selection holds);
- a body larger than `max_body_bytes()`: 413 `body_too_large`, read no further;
- a body that is not a JSON object, or nests deeper than MAX_BODY_DEPTH, or repeats a key:
  400 `not_json` / `body_too_deep`;
- a string (or key) that is no text (a lone surrogate): 400 `unencodable_text`, naming where;
- a body field the endpoint does not take: 422 `unknown_fields`, naming it (with the closest
  known one); a value of the wrong JSON type, outside its choices, length, pattern or range:
  422 `invalid_field`, naming it.

What passes is the body as data (`request.redrive_body`); the forms then refuse what only they
can judge (an unknown letter, a queue name's rules), with their 400s.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from django import forms
from django.core.exceptions import RequestDataTooBig

from jobqueue.conf import setting
from jobqueue.models import MAX_ID
from jobqueue.store import payloads

from ..forms import CursorField, IdField, IdListField, TimeBoundField
from ..timefilter import ACCEPTED
from .core import Refused

# A body holds a payload (an edit's args and kwargs, a signal's) one level down: the payloads'
# own depth limit, plus the body's object.
MAX_BODY_DEPTH = payloads.MAX_JSON_DEPTH + 1

# Fields whose text the form parses as JSON: the API takes the JSON value itself too.
JSON_FIELDS = {
    "args": ["array", "string"],
    "kwargs": ["object", "string"],
    "payload": None,  # any JSON value, or its text
}

Fields = dict[str, forms.Field]


def max_body_bytes() -> int:
    """The largest body the API reads: room for an edited payload at its limit (twice, for
    the body's own spacing and escapes) and the fields beside it."""
    return 2 * int(setting("MAX_PAYLOAD_BYTES")) + 64 * 1024


# --- the schema of a field, from its form field ----------------------------------------------


def _choices(field: forms.ChoiceField) -> list[str]:
    values = []
    for value, label in field.choices:
        if isinstance(label, list | tuple):  # a group
            values += [str(v) for v, _ in label]
        else:
            values.append(str(value))
    if not field.required and "" not in values:
        values.append("")
    return values


def _range(field: forms.Field, schema: dict) -> dict:
    """The bounds a number field takes: its validators', else those its input shows (the
    clean methods that check them say the same range)."""
    low = getattr(field, "min_value", None)
    high = getattr(field, "max_value", None)
    attrs = getattr(field.widget, "attrs", {}) or {}
    low = attrs.get("min") if low is None else low
    high = attrs.get("max") if high is None else high
    if low is not None:
        schema["minimum"] = low
    if high is not None:
        schema["maximum"] = high
    return schema


def field_schema(name: str, field: forms.Field) -> dict:
    """What `field` of a form accepts, as JSON Schema (OpenAPI 3.1)."""
    described = {"description": str(field.help_text)} if field.help_text else {}
    if name in JSON_FIELDS:
        kinds = JSON_FIELDS[name]
        return ({"type": kinds} if kinds else {}) | described
    if isinstance(field, IdListField):
        item = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
        return {"type": "array", "items": item} | described
    if isinstance(field, IdField):
        return {"type": "integer", "minimum": 1, "maximum": MAX_ID} | described
    if isinstance(field, forms.BooleanField):
        return {"type": "boolean"} | described
    if isinstance(field, forms.FloatField):  # before IntegerField, its base class
        return _range(field, {"type": "number"}) | described
    if isinstance(field, forms.IntegerField):
        return _range(field, {"type": "integer"}) | described
    if isinstance(field, forms.ChoiceField):
        return {"type": "string", "enum": _choices(field)} | described
    schema: dict = {"type": "string"}
    if isinstance(field, TimeBoundField):
        described = {"description": ACCEPTED}
    elif isinstance(field, CursorField):
        schema["pattern"] = field.keyset.pattern
    elif isinstance(field, forms.RegexField):
        schema["pattern"] = field.regex.pattern
    if getattr(field, "max_length", None):
        schema["maxLength"] = field.max_length
    if field.required:
        schema["minLength"] = 1
        if "pattern" not in schema:
            schema["pattern"] = r"\S"  # not only spaces: the forms refuse a blank one
    return schema | described


def body_schema(fields: Fields) -> dict:
    """A JSON object of these fields and no others; null is a field not given."""
    properties = {}
    for name, f in fields.items():
        schema = field_schema(name, f)
        if not f.required and "type" in schema:
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            schema["type"] = [*kinds, "null"]
            if "enum" in schema:
                schema["enum"] = [*schema["enum"], None]
        properties[name] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(name for name, f in fields.items() if f.required),
        "additionalProperties": False,
    }


def parameters(fields: Fields) -> list[dict]:
    return [
        {"name": name, "in": "query", "required": False, "schema": field_schema(name, f)}
        for name, f in fields.items()
    ]


# --- the checks -------------------------------------------------------------------------------

_TYPES = {
    "string": lambda v: isinstance(v, str),
    # JSON's integers: 7 and 7.0 (a number without a fraction) alike, as JSON Schema says.
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
_NAMES = {
    "string": "text",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


def mismatch(schema: dict, value) -> str:
    """Why `value` is not what `schema` (as field_schema makes it) says, or ""."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_TYPES[k](value) for k in kinds):
            return f"expected {' or '.join(_NAMES[k] for k in kinds)}, not {_shown(value)}"
    if "enum" in schema and value not in schema["enum"]:
        shown = ", ".join(json.dumps(v) for v in schema["enum"] if v not in ("", None))
        return f"{_shown(value)} is not one of {shown}"
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"at most {schema['maxLength']} characters, not {len(value)}"
        if "minLength" in schema and len(value) < schema["minLength"]:
            return "may not be empty"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return f"{_shown(value)} does not match {schema['pattern']}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"at least {schema['minimum']}, not {value}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"at most {schema['maximum']}, not {value}"
    if isinstance(value, list) and "items" in schema:
        for n, item in enumerate(value):
            if why := mismatch(schema["items"], item):
                return f"[{n}]: {why}"
    return ""


def _closest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown(given, known, what: str) -> str:
    """`what` naming each name of `given` not in `known`, or ""."""
    strays = [name for name in given if name not in known]
    if not strays:
        return ""
    named = ", ".join(f"{str(name)[:60]!r}{_closest(str(name), known)}" for name in strays)
    takes = ", ".join(sorted(known)) or "none"
    return f"Unknown {what}{'s' if len(strays) > 1 else ''}: {named}. It takes: {takes}."


def refuse_unknown_fields(body: dict, fields: Fields) -> None:
    if why := unknown(body, fields, "field"):
        raise Refused(422, f"Nothing changed: {why}", "unknown_fields")


def check_body(body: dict, fields: Fields) -> None:
    """422 for a field not among `fields` or one whose value their schema refuses. A required
    field left out is the form's to name (400, with its message by field), as on the console."""
    refuse_unknown_fields(body, fields)
    schema = body_schema(fields)
    for name, value in body.items():
        if why := mismatch(schema["properties"][name], value):
            raise Refused(422, f"Nothing changed: {name}: {why}.", "invalid_field")


def _unique_keys(pairs):
    found = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key[:60]!r} is given twice")
        found[key] = value
    return found


def _no_constant(text):
    raise ValueError(f"{text} is not a JSON number")


def _unencodable(value, where: str) -> str:
    """Where in `value` a string (or key) is no text UTF-8 can write, or ""."""
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"{path or 'a key'}: {item[exc.start]!a} is a lone surrogate, not text"
        elif isinstance(item, dict):
            for key, child in item.items():
                stack.append((key, f"a key of {path}" if path else "a key"))
                stack.append((child, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{n}]") for n, child in enumerate(item))
    return ""


def parsed_body(request) -> dict:
    """The request's body as a JSON object within the bounds, or the refusal saying why."""
    limit = max_body_bytes()
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise Refused(413, _too_large(limit), "body_too_large")
    try:
        raw = request.body
    except RequestDataTooBig:  # the project's DATA_UPLOAD_MAX_MEMORY_SIZE, lower than ours
        raise Refused(413, _too_large(None), "body_too_large") from None
    if len(raw) > limit:
        raise Refused(413, _too_large(limit), "body_too_large")
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, "Invalid request: the body is not UTF-8 text.", "not_json") from None
    brackets = text.count("[") + text.count("{")  # a scan in C clears nearly every body
    if brackets > MAX_BODY_DEPTH and payloads.text_depth(text, MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
        raise Refused(
            400,
            f"Invalid request: the body nests deeper than {MAX_BODY_DEPTH} levels.",
            "body_too_deep",
        )
    try:
        body = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:  # unreachable after the depth scan; kept as the last guard
        raise Refused(400, "Invalid request: the body nests too deeply.", "body_too_deep") from None
    except ValueError as exc:
        raise Refused(400, f"Invalid request: the body is not JSON ({exc}).", "not_json") from None
    if not isinstance(body, dict):
        raise Refused(
            400, "Invalid request: the body is a JSON object of the action's fields.", "not_json"
        )
    if where := _unencodable(body, ""):
        raise Refused(400, f"Invalid request: {where}.", "unencodable_text")
    return body


def _too_large(limit) -> str:
    if limit is None:
        return "Request too large: the body is over this server's limit."
    return f"Request too large: the body is over {limit} bytes."


# --- each endpoint's declaration, and the door itself -------------------------------------------


@dataclass
class Door:
    """What an endpoint takes: `query`, its query parameters; `body`, its JSON body's fields
    (None: no body is read); `before`, a check of the request made before the body's (an
    action's permission: a refusal names what is missing, whatever was sent). `extra`: the rest
    of the endpoint's OpenAPI (its responses)."""

    query: Fields = field(default_factory=dict)
    body: Fields | None = None
    before: Callable | None = None
    extra: dict = field(default_factory=dict)
    description: str = ""

    def openapi(self) -> dict:
        """The endpoint's OpenAPI additions, made now (a backend's choices are the settings')."""
        found = dict(self.extra)
        if self.query:
            found["parameters"] = parameters(self.query)
        if self.body is not None:
            schema = body_schema(self.body)
            if self.description:
                schema["description"] = self.description
            found["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema}},
            }
        return found


NO_INPUT = Door()


def route(method: Callable, path: str, *, door: Door = NO_INPUT, **options):
    """`method` (a router's get or post) for `path`, with the OpenAPI that `door` says and the
    door's checks before the view."""

    def register(view):
        view.door = door
        return method(path, openapi_extra=door.openapi(), **options)(view)

    return register


def guarded(view):
    """The door before `view` (every operation of the API: NinjaAPI.add_decorator)."""

    @functools.wraps(view)
    def checked(request, *args, **kwargs):
        door = getattr(view, "door", NO_INPUT)
        if why := unknown(request.GET, door.query, "query parameter"):
            raise Refused(400, f"Invalid request: {why}", "unknown_parameters")
        if door.before is not None:
            door.before(request)
        if door.body is not None:
            body = parsed_body(request)
            check_body(body, door.body)
            request.redrive_body = body
        return view(request, *args, **kwargs)

    return checked
