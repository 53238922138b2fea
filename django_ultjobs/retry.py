"""Retry backoff: exponential, capped, with jitter. Pure functions, randomness injectable."""

from __future__ import annotations

import random
from collections.abc import Callable


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
    return ceiling / 2 + rand() * ceiling / 2
