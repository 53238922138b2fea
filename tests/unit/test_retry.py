"""retry.backoff_delay: exponential, capped, equal jitter; pure, so no database."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_ultjobs.core.retry import MAX_DELAY, backoff_delay, clamp_delay


def test_equal_jitter_spans_the_upper_half_of_the_ceiling() -> None:
    # attempt 3 with base 2: ceiling 2 * 2**2 = 8, so somewhere in [4, 8].
    assert backoff_delay(3, base=2, cap=3600, rand=lambda: 0.0) == 4.0
    assert backoff_delay(3, base=2, cap=3600, rand=lambda: 0.5) == 6.0
    assert backoff_delay(3, base=2, cap=3600, rand=lambda: math.nextafter(1.0, 0)) <= 8.0


def test_the_ceiling_doubles_per_attempt() -> None:
    lows = [backoff_delay(n, base=1, cap=10**9, rand=lambda: 0.0) for n in range(1, 7)]
    assert lows == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]


def test_the_cap_is_respected() -> None:
    assert backoff_delay(20, base=2, cap=60, rand=lambda: 0.0) == 30.0
    assert backoff_delay(20, base=2, cap=60, rand=lambda: math.nextafter(1.0, 0)) <= 60.0


@pytest.mark.parametrize("attempt", [63, 64, 1_000, 10**9, 10**18, 2**200])
def test_huge_attempt_numbers_do_not_overflow(attempt: int) -> None:
    delay = backoff_delay(attempt, base=2, cap=3600)
    assert 1800.0 <= delay <= 3600.0


@pytest.mark.parametrize("attempt", [0, -1, -(10**9)])
def test_attempt_numbers_below_one_wait_the_base(attempt: int) -> None:
    assert backoff_delay(attempt, base=4, cap=3600, rand=lambda: 0.0) == 2.0


def test_zero_base_retries_at_once() -> None:
    assert backoff_delay(5, base=0, cap=3600) == 0.0


@settings(deadline=None)  # a loaded CI machine must not turn slowness into a failure
@given(
    attempt=st.integers(min_value=-10, max_value=10**6),
    base=st.floats(min_value=0, max_value=1e6),
    cap=st.floats(min_value=0, max_value=1e9),
    r=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_the_delay_is_between_half_the_ceiling_and_the_ceiling(attempt: int, base: float,
                                                               cap: float, r: float) -> None:
    ceiling = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 62))
    delay = backoff_delay(attempt, base=base, cap=cap, rand=lambda: r)
    assert ceiling / 2 <= delay <= ceiling
    assert delay <= cap


def test_the_default_randomness_stays_in_bounds() -> None:
    random.seed(1234)
    delays = [backoff_delay(4, base=1, cap=3600) for _ in range(1000)]
    assert all(4.0 <= d <= 8.0 for d in delays)
    assert len(set(delays)) > 900  # jittered, not one instant for every job


def test_delays_are_clamped_to_what_every_engine_can_add_to_a_timestamp() -> None:
    # rule 31 (bounded-outcomes): never NaN, never infinite, never past a hundred years, never
    # negative.
    assert clamp_delay(float("nan")) == 0.0
    assert clamp_delay(float("inf")) == MAX_DELAY
    assert clamp_delay(float("-inf")) == 0.0
    assert clamp_delay(-5.0) == 0.0
    assert clamp_delay(1e300) == MAX_DELAY
    assert clamp_delay(12.5) == 12.5


@given(attempt=st.integers(min_value=-5, max_value=10**6),
       base=st.floats(allow_nan=True, allow_infinity=True),
       cap=st.floats(allow_nan=True, allow_infinity=True))
@settings(max_examples=300, deadline=None)
def test_no_backoff_is_ever_non_finite_or_past_the_bound(attempt: int, base: float,
                                                          cap: float) -> None:
    # rule 31 (bounded-outcomes): whatever a spec held (registration refuses these; a row written by
    # hand, or a spec built around the check, may not), the delay a settle writes is storable.
    delay = backoff_delay(attempt, base=base, cap=cap)
    assert math.isfinite(delay) and 0.0 <= delay <= MAX_DELAY
