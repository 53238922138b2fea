"""Arguments and results are JSON only (never pickle): check them, and name what is wrong.

``json.dumps`` alone is not enough: it turns ``{1: "a"}`` into ``{"1": "a"}`` and ``nan`` into a
token PostgreSQL's jsonb rejects, so a job would run with arguments other than the ones it was
given. We refuse those instead, at enqueue, before any row is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import JobArgumentError

_SCALARS = (str, int, bool, type(None))
_FLOAT_LIMIT = 1e16
#: Levels of lists and objects an argument (or a result) may nest. Python's JSON reader gives up
#: near 1,000 (less on a deep stack, as a worker's claim has), SQLite's JSON functions refuse
#: past 1,000 or 2,000 by version; well below all of them, a value is read back on every engine.
MAX_DEPTH = 100
#: Decimal digits an int may have: Python's default ``sys.get_int_max_str_digits()``. A longer
#: one cannot be written as JSON text here, nor read back by a worker with the default limit.
MAX_INT_DIGITS = 4300
#: Below this many bits an int has fewer than MAX_INT_DIGITS digits (4300 * log2(10) = 14284.3),
#: so the digits are counted only for the rare int this long.
_INT_BITS_SURELY_SHORT = 14_284


#: One encoder for every call: ``json.dumps`` with options builds a new ``JSONEncoder`` each
#: time, most of what encoding a job's ``None`` result cost. Encoding
#: keeps no state between calls, so threads share it.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dumps(value: Any) -> str:
    """Serialise an already-checked value compactly."""
    return _ENCODER.encode(value)


def check_arguments(job_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise ``JobArgumentError`` (a ``TypeError``) naming the first argument that is not JSON
    the queue keeps unchanged on every engine, and the path to the bad value inside it."""
    for index, value in enumerate(args):
        _check(value, f"argument {index} of {job_name}()", "", 0)
    for key, value in kwargs.items():
        what = f"argument {key!r} of {job_name}()"
        # Stored as a JSON object's key: the same text rules as any string.
        _check_text(key, what, "", "has a name that")
        _check(value, what, "", 0)


def check_result(job_name: str, value: Any) -> None:
    """Raise ``JobArgumentError`` when a job's return value is not JSON."""
    _check(value, f"the return value of {job_name}()", "", 0)


def check_nesting(job_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Raise ``JobArgumentError`` for arguments nested deeper than ``MAX_DEPTH``, whatever their
    types: for code that walks them recursively before ``check_arguments`` does (Django's
    ``normalize_json`` would raise ``RecursionError`` on 10,000 levels)."""
    for index, value in enumerate(args):
        _check_depth(value, f"argument {index} of {job_name}()", "", 0)
    for key, value in kwargs.items():
        _check_depth(value, f"argument {key!r} of {job_name}()", "", 0)


def _check_depth(value: Any, what: str, path: str, depth: int) -> None:
    if isinstance(value, (str, bytes, bytearray)):
        return
    if isinstance(value, Mapping):
        items: Any = value.items()
    elif isinstance(value, Sequence):
        items = enumerate(value)
    else:
        return
    if depth >= MAX_DEPTH:
        _too_deep(what, path)
    for key, item in items:
        _check_depth(item, what, f"{path}[{key!r}]", depth + 1)


def _too_deep(what: str, path: str) -> None:
    raise JobArgumentError(
        f"{what}{_at(path)} nests lists or objects deeper than {MAX_DEPTH} levels; a worker "
        "could not read it back on every engine. Flatten it, or pass it as a JSON string.")


def _check(value: Any, what: str, path: str, depth: int) -> None:
    if isinstance(value, str):
        _check_text(value, what, path, "is a string that")
        return
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _INT_BITS_SURELY_SHORT and _digits(value) > MAX_INT_DIGITS:
            raise JobArgumentError(
                f"{what}{_at(path)} is an int of more than {MAX_INT_DIGITS} digits, which "
                "Python does not write as (or read from) JSON text. Pass it as a string.")
        return
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JobArgumentError(f"{what}{_at(path)} is {value!r}, which JSON cannot hold")
        if abs(value) >= _FLOAT_LIMIT:
            # Python writes these in exponent form; PostgreSQL's jsonb reads them as exact
            # decimals and gives back an int (1e16) or another number (1.5e300), while SQLite
            # gives back the float. Refused on both, so a job never runs with another value.
            raise JobArgumentError(
                f"{what}{_at(path)} is the float {value!r}; floats of 1e16 or more do not "
                "survive PostgreSQL's JSON storage as floats. Pass an int or a string."
            )
        return
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH:
        _too_deep(what, path)
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check(item, what, f"{path}[{index}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise JobArgumentError(
                    f"{what}{_at(path)} has the key {key!r} ({type(key).__name__}); JSON object "
                    "keys are strings, so it would arrive as a different value. Use str keys."
                )
            _check_text(key, what, path, "has a key that")
            _check(item, what, f"{path}[{key!r}]", depth + 1)
        return
    hint = ""
    if hasattr(value, "pk") and hasattr(value, "_meta"):
        hint = " Pass its primary key (.pk) and load it in the job."
    elif hasattr(value, "isoformat"):
        hint = " Pass value.isoformat() and parse it in the job."
    raise JobArgumentError(
        f"{what}{_at(path)} is a {type(value).__module__}.{type(value).__qualname__}, which is "
        f"not JSON; jobs take JSON values only (str, int, float, bool, None, list, dict).{hint}"
    )


def _check_text(text: str, what: str, path: str, subject: str) -> None:
    # Valid JSON that PostgreSQL's jsonb refuses (and SQLite stores): without this check the same
    # enqueue would work on one engine and fail with a DataError on the other.
    if "\x00" in text:
        problem = "contains a NUL character (\\x00)"
    elif not text.isascii() and not is_unicode(text):
        problem = "contains a lone surrogate, which is not valid Unicode"
    else:
        return
    raise JobArgumentError(
        f"{what}{_at(path)} {subject} {problem}; the database cannot store it as JSON text. "
        "Pass binary data as base64 (or the text with that character removed)."
    )


def _digits(value: int) -> int:
    """Decimal digits of ``value`` without converting it to text (which is what fails)."""
    magnitude = abs(value)
    digits = int(magnitude.bit_length() * 0.30102999566398120)  # log10(2): a lower bound
    return digits + 1 if magnitude >= 10 ** digits else digits


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate), as PostgreSQL's text needs."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _at(path: str) -> str:
    return f" at {path}" if path else ""


def storable_text(text: str) -> str:
    """Return ``text`` with what PostgreSQL's text and jsonb refuse spelt out as escapes.

    A NUL or a lone surrogate would make PostgreSQL reject the whole statement (a settle batch
    with every other run's outcome in it, an enqueue inside the caller's transaction); SQLite
    would store it. Escaped, both engines store the same text. Plain ASCII, the usual case, is
    returned as it is without a copy.
    """
    if text.isascii() and "\x00" not in text:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
