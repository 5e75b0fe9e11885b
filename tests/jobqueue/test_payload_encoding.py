"""The payload path's shortcuts give exactly what the general tools they stand in for give:
`normalized` is Django's normalize_json, the payload encoder is json.dumps with our options,
and `task_result` is the TaskResult constructor."""

import json
from collections import OrderedDict
from dataclasses import fields

import pytest
from django.tasks import TaskResult, TaskResultStatus
from django.utils import timezone
from django.utils.json import normalize_json
from hypothesis import given
from hypothesis import strategies as st

from jobqueue.backend import task_result
from jobqueue.errors import UnstorableValue
from jobqueue.store.payloads import (
    MAX_JSON_DEPTH,
    dumps,
    json_depth,
    loads,
    normalized,
    storable_json,
)
from tests import tasks

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
# Beyond JSON's own types: what normalize_json converts (tuples, bytes, other mappings,
# str subclasses) and what it refuses (sets, objects).
odd = (
    st.binary(max_size=4)
    | st.sets(st.integers(), max_size=2)
    | st.builds(object)
    | st.text(max_size=4).map(type("Name", (str,), {}))
)
keys = st.text(max_size=4) | st.integers() | st.none() | st.booleans() | st.tuples(st.integers())
values = st.recursive(
    scalars | odd,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(keys, inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=2).map(OrderedDict)
    ),
    max_leaves=12,
)


def outcome(function, value):
    try:
        return "value", function(value)
    except Exception as exc:  # noqa: BLE001 - the kind of refusal is what is compared
        return "raised", type(exc)


@given(values)
def test_normalized_is_normalize_json(value):
    got, expected = outcome(normalized, value), outcome(normalize_json, value)
    assert got == expected
    if got[0] == "value":
        assert json.dumps(got[1], sort_keys=False) == json.dumps(expected[1], sort_keys=False)


json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(json_values)
def test_the_payload_encoder_is_json_dumps_with_its_options(value):
    expected = outcome(lambda v: json.dumps(v, separators=(",", ":"), allow_nan=False), value)
    assert outcome(dumps, value) == expected


def test_a_cycle_or_a_structure_nested_past_recursion_is_refused_as_a_value_error():
    cycle = []
    cycle.append(cycle)
    deep = []
    for _ in range(100_000):
        deep = [deep]
    for value in (cycle, deep):
        with pytest.raises(ValueError, match="nested too deeply"):
            dumps(value)


def test_task_result_is_the_constructor_without_a_second_normalisation():
    now = timezone.now()
    values = {
        "task": tasks.add,
        "id": "7",
        "status": TaskResultStatus.READY,
        "enqueued_at": now,
        "started_at": None,
        "finished_at": None,
        "last_attempted_at": None,
        "args": [1, [2]],
        "kwargs": {"b": {"c": None}},
        "backend": "default",
        "errors": [],
        "worker_ids": ["w"],
    }
    assert values.keys() == {f.name for f in fields(TaskResult) if f.init}
    built = task_result(**values)
    assert built == TaskResult(**values)
    assert built.args is values["args"]  # held as given: the row's already-normalised lists
    with pytest.raises(TypeError, match="needs exactly"):
        task_result(**{k: v for k, v in values.items() if k != "worker_ids"})


def nested(depth: int, leaf="x"):
    value = leaf
    for n in range(depth):
        value = [value] if n % 2 else {"k": value}
    return value


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 990, 5_000])
def test_a_value_nested_past_the_one_depth_limit_is_refused_by_name(depth):
    with pytest.raises(UnstorableValue, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        storable_json(nested(depth), "args")
    with pytest.raises(UnstorableValue, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        loads(json.dumps(nested(min(depth, 900))), "the body")


def test_a_value_at_the_depth_limit_is_stored_and_read_back():
    value = nested(MAX_JSON_DEPTH)
    assert json_depth(value) == MAX_JSON_DEPTH
    assert loads(storable_json(value)) == value


@given(st.text(alphabet='[]{}"\\,:ab', max_size=40))
def test_brackets_inside_strings_do_not_count_toward_depth(text):
    value = ["[" * 70 + text]
    assert loads(storable_json(value)) == value
