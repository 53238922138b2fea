"""The conformance suite's fixture: one clocked store per engine."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_ultjobs.store import JobStore, get_store
from tests.doubles import FakeClock


@pytest.fixture
def cstore(alias: str, clock: FakeClock) -> JobStore:
    """The store of ``alias`` reading the injected clock, never the database's.

    The clock is moved to a whole millisecond first: SQLite keeps times to the millisecond and
    PostgreSQL to the microsecond, and a test that compares times exactly must mean the same
    instant on both.
    """
    extra = clock.now.microsecond % 1000
    if extra:
        clock.now += timedelta(microseconds=1000 - extra)
    return get_store(alias, clock=clock)

