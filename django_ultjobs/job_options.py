"""Check a job's options against the columns that keep them; each refusal names its option.

Each option ends up in a column: ``priority`` and ``max_attempts`` in integers (PostgreSQL's
are 32-bit), ``queue`` in 100 characters of text, ``delay`` added to the database's clock,
``run_at`` a moment in time. Unchecked, a value a column cannot hold failed differently on each
engine: PostgreSQL raised a ``DataError`` inside the caller's transaction (which it aborts) or
rounded ``priority=1.7`` to 2, SQLite kept 1.7, both took ``"5"`` as 5. The spec is checked when
it is built (``@job``, every ``.using()`` copy), so a refusal always comes before any SQL, the
same on both engines (rule 16).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .exceptions import JobOptionError
from .jsonargs import is_unicode
from .retry import MAX_DELAY

if TYPE_CHECKING:
    from .job_spec import JobSpec

#: PostgreSQL's ``integer``, the column type of ``priority`` and ``max_attempts``.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
#: The ``queue`` column's length.
MAX_QUEUE = 100


def check_options(spec: JobSpec) -> None:
    """Raise ``JobOptionError`` for the first option of ``spec`` its column cannot keep."""
    name = spec.name
    _check_text(name, "name", name)
    if not isinstance(spec.queue, str) or not 1 <= len(spec.queue) <= MAX_QUEUE:
        _refuse(name, "queue", f"must be 1 to {MAX_QUEUE} characters of text", spec.queue)
    _check_text(name, "queue", spec.queue)
    _check_int(name, "priority", spec.priority, INT_MIN)
    _check_int(name, "max_attempts", spec.max_attempts, 1)
    _check_delay(name, spec.delay)
    for option in ("backoff", "max_backoff"):
        _check_seconds(name, option, getattr(spec, option))
    if spec.run_at is not None:
        _check_run_at(name, spec.run_at)


def _refuse(name: str, option: str, requirement: str, value: Any) -> None:
    raise JobOptionError(f"job {name!r}: {option} {requirement}, not {value!r}")


def _check_text(name: str, option: str, text: str) -> None:
    # PostgreSQL's text refuses both; SQLite would store them.
    if "\x00" in text:
        _refuse(name, option, "cannot contain a NUL character (\\x00)", text)
    if not text.isascii() and not is_unicode(text):
        _refuse(name, option, "cannot contain a lone surrogate", text)


def _check_int(name: str, option: str, value: Any, low: int) -> None:
    # Not bool (an int, but True is no priority), not "5", not 1.7: PostgreSQL rounded 1.7 to 2
    # where SQLite kept 1.7, so the same job ran in another order on each engine.
    if isinstance(value, bool) or not isinstance(value, int):
        _refuse(name, option, "must be an int", value)
    if value < low:
        _refuse(name, option, f"must be at least {low}", value)
    if value > INT_MAX:
        _refuse(name, option, f"must be at most {INT_MAX}", value)


def _check_delay(name: str, delay: Any) -> None:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        _refuse(name, "delay", "must be a number of seconds or a timedelta", delay)
    if math.isnan(delay):
        _refuse(name, "delay", "must be a number", delay)
    if delay < 0:
        _refuse(name, "delay", "cannot be negative", delay)
    if delay > MAX_DELAY:
        _refuse(name, "delay", f"cannot be more than 100 years ({MAX_DELAY:,.0f} seconds)",
                delay)


def _check_seconds(job_name: str, option: str, value: Any) -> None:
    """Refuse a seconds option no settle could store: not a real number, negative, NaN or
    infinite, or longer than a hundred years (rule 31). At import time, naming the option: a
    bad value found later would fail every retry of the job instead."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JobOptionError(
            f"job {job_name!r}: {option} must be a number of seconds, not "
            f"{type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or value > MAX_DELAY:
        raise JobOptionError(
            f"job {job_name!r}: {option} is {value!r}; it must be a finite number of seconds "
            f"from 0 to {MAX_DELAY:.0f} (a hundred years)")


def _check_run_at(name: str, run_at: Any) -> None:
    if not isinstance(run_at, datetime):
        _refuse(name, "run_at", "must be a datetime", run_at)
    if run_at.utcoffset() is None:
        _refuse(name, "run_at", "must be timezone-aware (use django.utils.timezone)", run_at)
    try:
        # Both engines keep it in UTC, SQLite rounded up to its clock's millisecond.
        run_at.astimezone(UTC) + timedelta(milliseconds=1)
    except OverflowError:
        _refuse(name, "run_at", "must be a moment both engines can keep (years 1 to 9999 "
                "in UTC)", run_at)
