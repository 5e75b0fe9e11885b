"""Claimed rows as model instances, built without the ORM's per-row machinery.

A claim returns up to a hundred rows per round trip and a worker runs each in microseconds, so
`Model.objects.raw()` (column mapping, per-field converter lookup and `Model.__init__` per row)
cost more than the job. A claim statement instead returns `Rows(model).columns` in field order,
and `Rows.read` applies the same converters the ORM would (JSON decoding; SQLite's text
timestamps) with the lookup done once per database, then fills each instance's fields directly,
as `Model.from_db` leaves them (not adding, bound to the database they came from).
"""

from __future__ import annotations

import json

from django.db.models import JSONField, Model
from django.db.models.base import ModelState

# The stdlib decoder's scanner, called directly: json.loads adds two calls and two whitespace
# matches around it, as long as the scan itself for a claimed job's small documents (hand-run:
# 3.1 against 1.0 us for {"i": 12345}). The database writes no whitespace around a document;
# anything the scanner does not take whole goes to json.loads, for its result or its error.
_scan = json.JSONDecoder().scan_once


def _json_from_db(value, expression, connection):
    """JSONField.from_db_value for the default decoder, with the empty list and object every job
    carries (args, errors, kwargs) made without a parse."""
    if value == "[]":
        return []
    if value == "{}":
        return {}
    try:
        decoded, end = _scan(value, 0)
        if end == len(value):
            return decoded
    except (StopIteration, TypeError, ValueError):
        pass
    try:
        return json.loads(value)
    except ValueError:
        # Not JSON, or JSON Python will not read (an integer past sys.get_int_max_str_digits(),
        # which only a hand-written row can hold): the text as it is, as Django gives undecodable
        # JSON. The worker refuses such a payload (InvalidPayload) rather than failing its claim.
        return value


class Rows:
    """`omit`: fields the statement does not return because the caller knows their values (a
    claim knows the lease it wrote); `read` then takes them as keyword arguments."""

    def __init__(self, model: type[Model], omit: tuple[str, ...] = ()):
        self.model = model
        self.fields = [f for f in model._meta.concrete_fields if f.attname not in omit]
        self.omitted = frozenset(omit)
        self.attnames = [f.attname for f in self.fields]
        self._converters: dict[str, list] = {}

    def columns(self, alias: str | None = None) -> str:
        """The select list, every concrete column in field order (`alias.` prefixed if given)."""
        prefix = f"{alias}." if alias else ""
        return ", ".join(f'{prefix}"{f.column}"' for f in self.fields)

    def _for(self, connection) -> list:
        """(position, converters, expression) for each column that has converters, found once
        per database the way the SQL compiler finds them."""
        found = self._converters.get(connection.alias)
        if found is None:
            found = []
            table = self.model._meta.db_table
            for i, field in enumerate(self.fields):
                expression = field.get_col(table)
                converters = connection.ops.get_db_converters(expression) + field.get_db_converters(
                    connection
                )
                if isinstance(field, JSONField) and field.decoder is None:
                    converters = [
                        _json_from_db if c == field.from_db_value else c for c in converters
                    ]
                if converters:
                    found.append((i, converters, expression))
            self._converters[connection.alias] = found
        return found

    def read(self, connection, rows, **known) -> list:
        if known.keys() != self.omitted:
            raise TypeError(f"read() needs exactly the omitted fields {sorted(self.omitted)}")
        converters = self._for(connection)
        model, attnames, alias = self.model, self.attnames, connection.alias
        instances = []
        for row in rows:
            values = list(row)
            for i, functions, expression in converters:
                value = values[i]
                if value is not None:
                    for convert in functions:
                        value = convert(value, expression, connection)
                    values[i] = value
            instance = model.__new__(model)
            state = instance._state = ModelState()
            state.adding, state.db = False, alias
            instance.__dict__.update(zip(attnames, values, strict=True), **known)
            instances.append(instance)
        return instances
