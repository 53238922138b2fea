"""Retry backoff: exponential, capped, with jitter. Pure functions, randomness injectable."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

#: The longest delay, enqueued or written by a settle: a hundred years. Both engines add it to a
#: timestamp, so anything much longer (or infinite) would overflow there
#: (rules 16 (bad-input-refused) and 31 (bounded-outcomes)); a longer one asked for at enqueue is a
#: unit mistake (milliseconds passed as seconds).
MAX_DELAY = 100 * 365.25 * 86400.0


def clamp_delay(seconds: float) -> float:
    """``seconds`` as a delay every engine can add to a timestamp: finite, 0 .. ``MAX_DELAY``.

    NaN (which compares false with everything) becomes 0: run again now rather than never."""
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), MAX_DELAY)


def backoff_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before retrying after failed attempt number ``attempt`` (1-based).

    ``base * 2 ** (attempt - 1)``, capped at ``cap``, then "equal jitter": somewhere in the upper
    half. Jitter keeps a thousand jobs that failed together (a database blip) from all retrying in
    the same instant; keeping the lower half out keeps the backoff a backoff.
    """
    exponent = min(max(attempt - 1, 0), 62)
    ceiling = min(cap, base * (2.0**exponent))
    return clamp_delay(ceiling / 2 + rand() * ceiling / 2)
