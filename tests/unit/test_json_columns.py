"""The claim's JSON columns, decoded for a whole batch in one call, each row's failure its own."""

from __future__ import annotations

import json
import sys

import pytest

from django_ultjobs.store.decoding import _decode_one, decode_arguments


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_every_rows_columns_come_back_as_their_own_values() -> None:
    values = [
        ([1, "a,b]", {"x": [None, True]}], {"k": "}{,"}),
        ([], {}),
        (["é ✓ \\u00e9", 2.5e-3], {"nested": {"deep": ["[", "]"]}}),
    ]
    rows = [(i, "name", json.dumps(a), json.dumps(k), "tail") for i, (a, k) in enumerate(values)]
    assert decode_arguments(rows, 2) == [(a, k, None) for a, k in values]


def test_no_rows_bytes_and_values_the_driver_already_decoded() -> None:
    assert decode_arguments([], 4) == []
    # One decoded value (a driver with its own JSON loader) and the batch falls back to one
    # value at a time, leaving decoded values as they are; bytes are UTF-8 text (SQLite).
    rows = [(1, "[1]", {"a": 1}), (2, "[]", "{}"), (3, b"[2]", b'{"\xc3\xa9":1}')]
    assert decode_arguments(rows, 1) == [([1], {"a": 1}, None), ([], {}, None),
                                         ([2], {"é": 1}, None)]


@pytest.mark.skipif(sys.version_info < (3, 12), reason=(
    "Python 3.11's JSON reader counts nesting against the interpreter's recursion limit, so the "
    "deepest value it reads depends on the caller's stack; 3.12's has a limit of its own"))
def test_a_value_nested_just_inside_the_json_depth_limit_is_still_parsed() -> None:
    # Batching wraps each text two levels deeper; a value the database stored and json parses on
    # its own must not fail for that.
    low, high = 1, 100_000
    while low < high:  # the deepest text json.loads accepts here
        mid = (low + high + 1) // 2
        try:
            json.loads(nested(mid))
            low = mid
        except RecursionError:
            high = mid - 1
    [(args, kwargs, problem)] = decode_arguments([(1, nested(low), "{}")], 1)
    assert (kwargs, problem) == ({}, None)
    depth = 0
    while args != []:  # (== on the whole value would itself recurse too deep)
        [args] = args
        depth += 1
    assert depth == low - 1


@pytest.mark.parametrize(("args", "kwargs", "problem"), [
    # rule 15 (undecodable-row-fails-alone): each of these used to raise out of the claim, stranding
    # the whole batch.
    (nested(3000), "{}", "the stored args nest deeper than this Python's JSON reader allows"),
    ("[]", '{"a":' + nested(3000) + "}", "the stored kwargs nest deeper"),
    ("[" + "9" * 5000 + "]", "{}", "the stored args are not JSON this Python can read "
                                   "(ValueError: Exceeds the limit (4300 digits)"),
    ("[1,", "{}", "the stored args are not JSON this Python can read (JSONDecodeError"),
    (b'["\xff"]', "{}", "the stored args are not UTF-8 text"),
    ('{"a":1}', "{}", "the stored args are a JSON object, not an array"),
    ("[]", "[1]", "the stored kwargs are a JSON array, not an object"),
    ("null", "{}", "the stored args are a JSON null, not an array"),
    ("[]", '"x"', "the stored kwargs are a JSON string, not an object"),
])
def test_a_row_that_cannot_be_decoded_comes_back_with_why_and_the_others_decoded(
        args: str | bytes, kwargs: str, problem: str) -> None:
    rows = [(1, "[1]", "{}"), (2, args, kwargs), (3, "[3]", '{"k":3}')]
    first, bad, last = decode_arguments(rows, 1)
    assert first == ([1], {}, None) and last == ([3], {"k": 3}, None)
    assert bad[:2] == ([], {}) and bad[2] is not None and bad[2].startswith(problem), bad[2]


@pytest.mark.parametrize("rows", [
    [(1, "[]", "{}"), (2, b"[]", b"{}"), (3, "[ ]", "{ }"), (4, "[]", '{"a":1}'),
     (5, "[0]", "{}"), (6, b"[]", "{}"), (7, "[]", "{}")],
    [(1, "[]", "{}"), (2, "[]", "{}")],
    [(1, "[]", "{}"), (2, {"a": 1}, "{}"), (3, "[]", [])],
    [(1, "[]", "{}"), (2, "[1,", "{}"), (3, b"[]", b"{}")],
])
def test_rows_without_arguments_decode_as_the_one_at_a_time_path_decodes_them(
        rows: list[tuple]) -> None:
    # Rows whose texts are "[]" and "{}" skip the reader: the same
    # answer as decoding each row on its own, and lists and dicts of their own per row.
    got = decode_arguments(rows, 1)
    assert got == [_decode_one(a, k) for _, a, k in rows]
    assert [tuple(map(type, g)) for g in got] == [
        tuple(map(type, _decode_one(a, k))) for _, a, k in rows]
    containers = [id(c) for args, kwargs, _ in got for c in (args, kwargs)]
    assert len(set(containers)) == len(containers)
