"""Rate-limit buckets on both engines (rule 52 (fleet-rate-limit)): GCRA counted in the database, a
burst of ``1 + N // 10`` and then one start per interval, and the wait until the next start."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_ultjobs.core.rate_limits import parse_rate_limit
from django_ultjobs.store import JobStore
from tests.doubles import FakeClock

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

FIFTY = parse_rate_limit("probe", "50/s")


def take(store: JobStore, want: int, key: str = "job:probe") -> tuple[int, float]:
    assert FIFTY is not None
    taken = store.take_starts([(key, FIFTY.interval, FIFTY.tolerance, want)])[key]
    return taken.granted, taken.wait


def test_a_new_bucket_grants_its_burst_then_one_per_interval(
        cstore: JobStore, clock: FakeClock) -> None:  # rule 52 (fleet-rate-limit)
    assert FIFTY is not None
    granted, wait = take(cstore, 10)
    assert granted == FIFTY.burst == 6  # 1 + 50 // 10
    assert wait == pytest.approx(0.02, abs=1e-3)  # seconds
    assert take(cstore, 10)[0] == 0
    clock.now += timedelta(milliseconds=20)
    assert take(cstore, 10)[0] == 1
    clock.now += timedelta(seconds=1)
    # Idle for fifty intervals: the bucket caught up only as far as its burst.
    assert take(cstore, 10)[0] == FIFTY.burst


def test_no_window_of_one_second_holds_more_than_the_limit_and_its_allowance(
        cstore: JobStore, clock: FakeClock) -> None:  # rule 52 (fleet-rate-limit)
    grants: list[float] = []
    t = 0.0
    for _ in range(400):  # 4 s of takes every 10 ms, each wanting more than it may have
        granted, _wait = take(cstore, 5)
        grants += [t] * granted
        clock.now += timedelta(milliseconds=10)
        t += 0.01
    assert FIFTY is not None
    most = max(sum(1 for g in grants if start <= g < start + 1.0) for start in grants)
    assert most <= 50 + FIFTY.window_allowance
    assert len(grants) == pytest.approx(4 * 50, abs=FIFTY.burst)


def test_buckets_are_apart_per_key(cstore: JobStore) -> None:
    assert take(cstore, 9, "key:5:probe:a")[0] == 6
    assert take(cstore, 9, "key:5:probe:b")[0] == 6
    assert take(cstore, 9, "key:5:probe:a")[0] == 0
