"""Check a job's options against the columns that keep them; each refusal names its option.

Each option ends up in a column: ``priority`` and ``max_attempts`` in integers (PostgreSQL's
are 32-bit), ``concurrency`` numbers fleet slots in one too, ``queue`` in 100 characters of
text, ``delay`` and ``expires_in`` added to the database's clock, ``run_at`` a moment in time,
``timeout`` a float; ``retry_on`` stays in the spec and must be exception classes, and
``takes_context`` a bool (it decides what a run is passed). Unchecked, a value a column cannot
hold failed differently on each engine: PostgreSQL raised a ``DataError`` inside the caller's
transaction (which it aborts) or rounded ``priority=1.7`` to 2, SQLite kept 1.7, both took
``"5"`` as 5. The spec is checked when it is built (``@job``, every ``.using()`` copy), so a
refusal always comes before any SQL, the same on both engines (rule 16 (bad-input-refused)).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ..core.jsonargs import is_unicode
from ..core.numeric import is_finite, shown
from ..core.retry import MAX_DELAY
from ..exceptions import JobOptionError


class Declaration(Protocol):
    """A job as declared, what the checks here and in ``unique`` read of it (``JobSpec`` is
    one): declared here so neither module needs the spec, which imports both. The options are
    ``Any`` because they are read to be checked."""

    @property
    def name(self) -> str: ...
    @property
    def func(self) -> Callable[..., Any]: ...
    @property
    def signature(self) -> inspect.Signature | None: ...
    @property
    def takes_context(self) -> Any: ...
    @property
    def queue(self) -> Any: ...
    @property
    def priority(self) -> Any: ...
    @property
    def max_attempts(self) -> Any: ...
    @property
    def concurrency(self) -> Any: ...
    @property
    def delay(self) -> Any: ...
    @property
    def backoff(self) -> Any: ...
    @property
    def max_backoff(self) -> Any: ...
    @property
    def run_at(self) -> Any: ...
    @property
    def timeout(self) -> Any: ...
    @property
    def expires_in(self) -> Any: ...
    @property
    def retry_on(self) -> Any: ...
    @property
    def unique(self) -> Any: ...
    @property
    def unique_for(self) -> Any: ...
    @property
    def unique_key(self) -> Any: ...


#: PostgreSQL's ``integer``, the column type of ``priority`` and ``max_attempts``.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
#: The ``queue`` column's length.
MAX_QUEUE = 100


def check_options(spec: Declaration) -> None:
    """Raise ``JobOptionError`` for the first option of ``spec`` its column cannot keep."""
    name = spec.name
    _check_text(name, "name", name)
    problem = name_problem(spec.queue, MAX_QUEUE)
    if problem is not None:
        _refuse(name, "queue", problem, spec.queue)
    _check_int(name, "priority", spec.priority, INT_MIN)
    _check_int(name, "max_attempts", spec.max_attempts, 1)
    if not isinstance(spec.takes_context, bool):
        _refuse(name, "takes_context", "must be True or False", spec.takes_context)
    if spec.concurrency is not None:
        _check_concurrency(name, spec.concurrency)
    _check_delay(name, spec.delay)
    for option in ("backoff", "max_backoff"):
        _check_seconds(name, option, getattr(spec, option))
    if spec.run_at is not None:
        _check_run_at(name, spec.run_at)
    for option in ("timeout", "expires_in"):
        if getattr(spec, option) is not None:
            _check_duration(name, option, getattr(spec, option))
    _check_retry_on(name, spec.retry_on)


def name_problem(text: Any, longest: int) -> str | None:
    """What keeps ``text`` from being a name its column keeps and its readers can show (a
    queue, a worker's id), said after the name of the option or flag; None if nothing does.

    One rule for a job's ``queue`` and ``runjobworker --queue`` (rule 16 (bad-input-refused)): a
    queue a worker refuses to serve must not take jobs. PostgreSQL's text refuses NUL and a lone
    surrogate (a byte of a command line that is not UTF-8), SQLite would store them; a control
    character would garble the logs and the admin that show the name.
    """
    if not isinstance(text, str) or not 1 <= len(text) <= longest:
        return f"must be 1 to {longest} characters of text"
    if "\x00" in text:
        return "cannot contain a NUL character (\\x00)"
    if not text.isascii() and not is_unicode(text):
        return "cannot contain a lone surrogate (a byte that is not UTF-8)"
    if not text.isprintable():
        return ("cannot contain a character that is not printable (a control character such as "
                "a tab or a line break): the logs and the admin show it")
    return None


def seconds_of(value: Any) -> Any:
    """A ``timedelta`` as its seconds; anything else as given (checked by ``check_options``)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def _check_duration(name: str, option: str, value: Any) -> None:
    """``timeout`` and ``expires_in``: a positive, finite number of seconds
    (rules 55 (timeout-cancels), 58 (expired-never-runs)).

    Zero is refused, not read as "none": a timeout of 0 would cancel every run at its first
    tick, an expiry of 0 would expire every job before any worker could claim it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _refuse(name, option, "must be a number of seconds or a timedelta (or None)", value)
    if not is_finite(value) or value <= 0:
        _refuse(name, option, "must be a finite number of seconds greater than 0", value)
    if value > MAX_DELAY:
        _refuse(name, option, f"cannot be more than 100 years ({MAX_DELAY:,.0f} seconds)",
                value)


def _check_retry_on(name: str, retry_on: Any) -> None:
    """A tuple of exception classes (rule 57 (retry-on-only)); ``()`` retries nothing. An instance
    or a name in quotes would be compared with ``isinstance`` at the first failure, too late to say
    so."""
    if not isinstance(retry_on, tuple):
        _refuse(name, "retry_on", "must be a tuple of exception classes", retry_on)
    for entry in retry_on:
        if not (isinstance(entry, type) and issubclass(entry, BaseException)):
            _refuse(name, "retry_on", "must hold only exception classes (such as "
                    "ConnectionError)", entry)


def _refuse(name: str, option: str, requirement: str, value: Any) -> None:
    raise JobOptionError(f"job {name!r}: {option} {requirement}, not {shown(value)}")


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


def _check_concurrency(name: str, value: Any) -> None:
    """A whole number of fleet slots (rule 5 (fleet-cap)), numbered in PostgreSQL's ``integer``:
    1.5, NaN or 2**31 made every claim of every worker that registered the job fail, so no job of
    any kind ran there."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT_MAX:
        _refuse(name, "concurrency", f"must be a whole number from 1 to {INT_MAX} (or None "
                "for no cap)", value)


def _check_delay(name: str, delay: Any) -> None:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        _refuse(name, "delay", "must be a number of seconds or a timedelta", delay)
    if isinstance(delay, float) and math.isnan(delay):
        _refuse(name, "delay", "must be a number", delay)
    if delay < 0:
        _refuse(name, "delay", "cannot be negative", delay)
    if delay > MAX_DELAY:
        _refuse(name, "delay", f"cannot be more than 100 years ({MAX_DELAY:,.0f} seconds)",
                delay)


def _check_seconds(job_name: str, option: str, value: Any) -> None:
    """Refuse a seconds option no settle could store: not a real number, negative, NaN or
    infinite, or longer than a hundred years (rule 31 (bounded-outcomes)). At import time, naming
    the option: a bad value found later would fail every retry of the job instead."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JobOptionError(
            f"job {job_name!r}: {option} must be a number of seconds, not "
            f"{type(value).__name__} {value!r}")
    if not is_finite(value) or value < 0 or value > MAX_DELAY:
        raise JobOptionError(
            f"job {job_name!r}: {option} is {shown(value)}; it must be a finite number of "
            f"seconds from 0 to {MAX_DELAY:.0f} (a hundred years)")


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
