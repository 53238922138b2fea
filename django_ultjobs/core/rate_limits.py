"""``@job(rate_limit="N/s" | "N/m" | "N/h")``: at most N starts per period across the fleet.

The algorithm is GCRA (the generic cell rate algorithm, a token bucket kept as one timestamp),
counted in the database so every worker process on every host draws from one budget
(rule 52 (fleet-rate-limit)). Each bucket is one row: its theoretical arrival time ``tat``, in whole
microseconds since 1970 on the database's clock. A start at ``now`` conforms when
``tat - tolerance <= now``; each start it grants pushes ``tat`` to ``max(tat, now) + interval``,
``interval = period / N``. One statement grants a whole claim's runs of a bucket at once, the
row locked by its upsert, so two workers can never both spend the last start.

What it guarantees at window edges: with ``burst = 1 + tolerance / interval`` starts allowed
back to back, any window of one period holds at most ``N + burst - 1`` grants, on the
database's clock. The burst is ``1 + N // 10``: strict (exactly N per window) below 10 a
period, and 10 % over at most above — 50/s lets at most 55 starts into any one-second window.
The tolerance is what lets a start that came late (the claim that takes it was that much behind
the moment it could start: a busy host, a slow statement) not lose that time for good: a
lateness up to the tolerance (100 ms at 50/s) is made up; beyond it, the long-run rate falls
short of N by the excess. With 1 + N // 20 (5 %, 40 ms at 50/s) four worker processes on a
loaded two-core host fell 12-17 % short.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..exceptions import JobOptionError

#: The most starts a period may name: PostgreSQL's ``integer``, the column "granted" is.
INT_MAX = 2**31 - 1

#: Seconds in each period a rate limit may be given in.
PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
# At most ten digits: int() of more than 4,300 raises a ValueError naming no option.
_FORM = re.compile(r"^\s*(?P<n>[0-9]{1,10})\s*/\s*(?P<unit>[smh])\s*$")
#: The burst above one start grows by one per this many starts a period (10 %).
BURST_PER = 10


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A parsed ``rate_limit``: ``count`` starts per ``period`` seconds."""

    count: int
    period: float
    text: str

    @property
    def interval(self) -> int:
        """Microseconds between two starts at the steady rate (GCRA's emission interval),
        rounded up: whole microseconds add and compare exactly on both engines, and rounding
        up can only make the limit stricter (by under a microsecond per start)."""
        return -(-int(self.period * 1_000_000) // self.count)

    @property
    def burst(self) -> int:
        """How many starts may go back to back after the bucket was idle."""
        return 1 + self.count // BURST_PER

    @property
    def tolerance(self) -> int:
        """GCRA's tolerance in microseconds: how far ahead of now the bucket may run
        (``burst - 1`` intervals)."""
        return (self.burst - 1) * self.interval

    @property
    def window_allowance(self) -> int:
        """The most grants any one window of ``period`` seconds can hold beyond ``count``."""
        return self.burst - 1


def parse_rate_limit(job: str, value: Any) -> RateLimit | None:
    """The rate limit ``value`` spells (``"100/m"``), refused by name when it spells none
    (rule 54 (bad-flow-option-refused)); None for None."""
    if value is None:
        return None
    match = _FORM.match(value) if isinstance(value, str) else None
    count = int(match["n"]) if match else 0
    if match is None or not 1 <= count <= INT_MAX:
        raise JobOptionError(
            f"job {job!r}: rate_limit must be a text like \"100/m\": a whole number from 1 to "
            f"{INT_MAX} of starts per second (/s), minute (/m) or hour (/h), not {value!r}")
    return RateLimit(count=count, period=PERIODS[match["unit"]], text=value.strip())


def gcra_take(tat: int | None, now: int, interval: int, tolerance: int, want: int
              ) -> tuple[int, int, int]:
    """Grant up to ``want`` starts from a bucket whose theoretical arrival time is ``tat``
    (None: a bucket never used) at ``now``, all in microseconds: ``(granted, the new tat,
    microseconds until the next start conforms)``. The same arithmetic as PostgreSQL's
    ``rate_take``: whole numbers, so a start conforms exactly when ``tat - tolerance <= now``.
    """
    ahead = 0 if tat is None else max(tat - now, 0)
    room = 0 if ahead > tolerance else (tolerance - ahead) // interval + 1
    granted = min(want, room)
    new_tat = now + ahead + granted * interval
    return granted, new_tat, new_tat - tolerance - now
