"""The claim's JSON columns, parsed for a whole batch in one call."""

from __future__ import annotations

import json

from django_ultjobs.store.base import JobStore


def test_every_rows_columns_come_back_as_their_own_values() -> None:
    values = [
        ([1, "a,b]", {"x": [None, True]}], {"k": "}{,"}),
        ([], {}),
        (["é ✓ \\u00e9", 2.5e-3], {"nested": {"deep": ["[", "]"]}}),
        (None, 7),  # any JSON text, not only arrays and objects
    ]
    rows = [(i, "name", json.dumps(a), json.dumps(k), "tail") for i, (a, k) in enumerate(values)]
    assert JobStore.parse_json_columns(rows, 2, 2) == [[a, k] for a, k in values]


def test_no_rows_and_values_the_driver_already_decoded() -> None:
    assert JobStore.parse_json_columns([], 4, 2) == []
    # One decoded value (a driver with its own JSON loader) and the batch falls back to one
    # value at a time, leaving decoded values as they are.
    rows = [(1, "[1]", {"a": 1}), (2, "[]", "{}"), (3, b"[2]", "{}")]
    assert JobStore.parse_json_columns(rows, 1, 2) == [[[1], {"a": 1}], [[], {}], [[2], {}]]


def test_a_value_nested_just_inside_the_json_depth_limit_is_still_parsed() -> None:
    # Batching wraps each text two levels deeper; a value the database stored and json parses on
    # its own must not fail the whole claim for that.
    def nested(depth: int) -> str:
        return "[" * depth + "]" * depth

    low, high = 1, 100_000
    while low < high:  # the deepest text json.loads accepts here
        mid = (low + high + 1) // 2
        try:
            json.loads(nested(mid))
            low = mid
        except RecursionError:
            high = mid - 1
    [[args, kwargs]] = JobStore.parse_json_columns([(1, nested(low), "{}")], 1, 2)
    assert kwargs == {}
    depth = 0
    while args != []:  # (== on the whole value would itself recurse too deep)
        [args] = args
        depth += 1
    assert depth == low - 1
