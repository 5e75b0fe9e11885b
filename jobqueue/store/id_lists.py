"""A queryset filter on a list of ids of any length, in one statement: `Among(ids)`.

`pk__in` binds one parameter per id, so a long list was read in chunks (SQLite refuses a
statement of more than SQLITE_LIMIT_VARIABLE_NUMBER parameters), a round trip each, and on
PostgreSQL sending, parsing and planning 100,000 parameters cost more than the read (issue 47).
`Among` binds the whole list as one parameter, in the SQL of the database the query runs on
(Dialect.among: an array on PostgreSQL, JSON text on SQLite):

    DeadLetter.objects.using(using).filter(Among(ids)).values_list(...)
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import F, Lookup

from . import dialects


class Among(Lookup):
    """True where the field `field` (the primary key unless named) is one of `ids`.

    A Lookup, not a plain boolean expression: Django compares any other to True in a WHERE on
    SQLite (no native boolean), and `id IN (...) = 1` is a test per row of the table, not a
    look-up of each id."""

    lookup_name = "among"
    prepare_rhs = False  # the list is bound whole, not each id as a value of the field

    def __init__(self, ids: Iterable[int], field: str = "pk"):
        # Every id an int, as pk__in makes them: neither database compares text with a number.
        super().__init__(F(field), [int(pk) for pk in ids])

    def __repr__(self):
        return f"{self.__class__.__name__}({len(self.rhs)} ids, {self.lhs!r})"

    def as_sql(self, compiler, connection):
        column, params = self.process_lhs(compiler, connection)
        sql, among = dialects.of(connection.alias).among(column, self.rhs)
        return sql, (*params, *among)
