"""Decode the arguments of claimed rows, one batch at a time, each row's failure its own.

Enqueue only writes arguments it has checked (``jsonargs``), but a row may come from elsewhere:
raw SQL, an older or newer version of this package, a producer on another Python whose JSON
reader allows deeper nesting or longer integers. The claim has already taken such a row (its
UPDATE committed) when its arguments turn out to be unreadable, so decoding must never raise:
an exception here would strand every other row of the claim, running under a lease nobody
heartbeats, re-claimed together and failing together until their attempts run out. A row that
cannot be decoded comes back with the reason instead, and the worker fails it alone
(rule 15 (undecodable-row-fails-alone)).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

#: ``(args, kwargs, problem)``: ``problem`` is None, or why the row's arguments cannot be read
#: (then ``args`` and ``kwargs`` are empty). A plain tuple: one is built per claimed job.
Arguments = tuple[list[Any], dict[str, Any], str | None]


def decode_arguments(rows: Sequence[Sequence[Any]], first: int) -> list[Arguments]:
    """Decode the args and kwargs columns (``first`` and the one after it) of every row.

    All rows in ONE ``json.loads`` when it can: parsed one at a time they were two thirds of
    what the claim loop spent on each claimed row, nearly all of it the call, not the (C) decoding.
    When it cannot (a row that does not decode; a value two levels inside json's depth limit,
    which the batch's own brackets push over; texts the driver already decoded), each row is
    decoded on its own, so only the rows that are really unreadable fail.
    """
    if not rows:
        return []
    pairs = [(row[first], row[first + 1]) for row in rows]
    # Most jobs take no arguments: "[]" and "{}" (b"[]", b"{}" from SQLite) need no reader,
    # and each gets lists of its own, as json.loads would give.
    empty = [a in _NO_ARGS and k in _NO_KWARGS for a, k in pairs]
    try:
        texts = [(_text(a), _text(k))
                 for (a, k), none in zip(pairs, empty, strict=True) if not none]
        decoded = iter(json.loads("[" + ",".join(f"[{a},{k}]" for a, k in texts) + "]"))
    except Exception:
        return [_decode_one(a, k) for a, k in pairs]
    return [([], {}, None) if none else _shaped(*next(decoded)) for none in empty]


#: The stored texts of no arguments, as both engines return them (``in`` compares by ``==``:
#: a value the driver decoded, a list or a dict, is never equal to them).
_NO_ARGS = ("[]", b"[]")
_NO_KWARGS = ("{}", b"{}")


def _text(value: Any) -> str:
    """A JSON column as text; bytes (SQLite returns the columns as blobs) must be UTF-8."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if not isinstance(value, str):
        raise TypeError("not a JSON text")
    return value


def _decode_one(args: Any, kwargs: Any) -> Arguments:
    try:
        args = _load(args, "args")
        kwargs = _load(kwargs, "kwargs")
    except _Undecodable as exc:
        return [], {}, str(exc)
    return _shaped(args, kwargs)


class _Undecodable(Exception):
    pass


def _load(value: Any, column: str) -> Any:
    if not isinstance(value, (str, bytes)):
        return value  # a driver with its own JSON loader decoded it already
    try:
        return json.loads(_text(value))
    # Exception, not only ValueError: deep nesting raises RecursionError, and whatever else a
    # stored text can make the reader raise must still fail this row alone.
    except Exception as exc:
        raise _Undecodable(f"the stored {column} {_why(exc)}") from exc


def _why(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nest deeper than this Python's JSON reader allows (RecursionError)"
    if isinstance(exc, UnicodeDecodeError):
        return f"are not UTF-8 text ({exc})"
    return f"are not JSON this Python can read ({type(exc).__name__}: {exc})"


def _shaped(args: Any, kwargs: Any) -> Arguments:
    if not isinstance(args, list):
        return [], {}, f"the stored args are a JSON {_kind(args)}, not an array"
    if not isinstance(kwargs, dict):
        return [], {}, f"the stored kwargs are a JSON {_kind(kwargs)}, not an object"
    return args, kwargs, None


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number"
