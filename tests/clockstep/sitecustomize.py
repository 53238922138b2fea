"""Step one process's wall clock, as an NTP correction would: for the clock-step tests only.

Put this directory first on the ``PYTHONPATH`` of ONE worker process and name a file in
``ULTJOBS_TEST_CLOCK_STEP``; Python imports this module at start-up, before anything else, and
from then on every reading of the wall clock in that process (``time.time``, ``time.time_ns``,
``datetime.now``, ``datetime.utcnow``, ``datetime.today``, Django's ``timezone.now``) is off by
the seconds the file holds, re-read at most every ``REREAD`` seconds, so a test steps the clock
mid-run by writing ``30`` or ``-30`` into it. The monotonic clock is left alone: no NTP step
moves it. Nothing outside that process is touched (no root, no other process's clock), and the
library never sees this file: the tests and ``benchmarks.chaos`` put it on the path.
"""

from __future__ import annotations

import datetime as _datetime
import os
import threading
import time as _time
from typing import Any

#: Seconds between two readings of the offset file (the step lands within this).
REREAD = 0.02

_PATH = os.environ.get("ULTJOBS_TEST_CLOCK_STEP", "")
_REAL_DATETIME = _datetime.datetime
_real_time = _time.time
_real_time_ns = _time.time_ns
_real_monotonic = _time.monotonic
_lock = threading.Lock()
_cached = (-1.0, 0.0)  # (monotonic time read, offset in seconds)


def offset() -> float:
    """The seconds this process's wall clock is off by now (0 while the file is unreadable)."""
    global _cached
    read_at, value = _cached
    now = _real_monotonic()
    if now - read_at < REREAD:
        return value
    with _lock:
        try:
            with open(_PATH) as file:
                value = float(file.read().strip() or 0)
        except (OSError, ValueError):
            value = 0.0
        _cached = (now, value)
    return value


def _stepped_time() -> float:
    return _real_time() + offset()


def _stepped_time_ns() -> int:
    return _real_time_ns() + int(offset() * 1e9)


class _SameClass(type):
    """Keep ``isinstance(x, datetime)`` true for the datetimes drivers and C code make."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, _REAL_DATETIME)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _REAL_DATETIME)


class SteppedDatetime(_REAL_DATETIME, metaclass=_SameClass):
    """``datetime`` whose readings of the wall clock are off by ``offset()``."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return _REAL_DATETIME.now(tz) + _datetime.timedelta(seconds=offset())

    @classmethod
    def utcnow(cls) -> Any:
        return cls.now(_datetime.UTC).replace(tzinfo=None)

    @classmethod
    def today(cls) -> Any:
        return cls.now()


def install() -> None:
    """Replace the wall clock's readers before any module imports them."""
    _time.time = _stepped_time
    _time.time_ns = _stepped_time_ns
    _datetime.datetime = SteppedDatetime  # type: ignore[misc]


if _PATH:
    install()
