"""Claimed rows read without the ORM (jobqueue.store.rows): a JSON column decodes as
JSONField.from_db_value would decode it."""

import pytest
from django.db import connection

from jobqueue.models import Job
from jobqueue.store.rows import _json_from_db

DOCUMENTS = [
    "[]",
    "{}",
    '{"i": 12345}',
    '[1, 2.5, "x", null, true, {"a": [{}]}]',
    '"\\u00e9t\\u00e9"',
    "NaN",
    "-Infinity",
    "1e400",
    " [1]",  # whitespace the database would not write, around
    "[1] ",
    '{"a": 1}{"b": 2}',  # not one document
    "[1,",  # not JSON at all
    "",
    '{"a": 1, "a": 2}',
]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_a_json_column_decodes_as_the_orm_decodes_it(text):
    field = Job._meta.get_field("kwargs")
    expected = field.from_db_value(text, None, connection)
    decoded = _json_from_db(text, None, connection)
    assert decoded == expected or (decoded != decoded and expected != expected)  # NaN
    assert type(decoded) is type(expected)


def test_a_value_that_is_no_json_text_fares_as_with_the_orm():
    field = Job._meta.get_field("kwargs")
    assert _json_from_db(b"[1]", None, connection) == field.from_db_value(b"[1]", None, connection)
    for value in ({"a": 1}, 12):
        with pytest.raises(TypeError):
            field.from_db_value(value, None, connection)
        with pytest.raises(TypeError):
            _json_from_db(value, None, connection)
