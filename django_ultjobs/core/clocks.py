"""The clock leases are judged by in this host's processes."""

from __future__ import annotations

import time

#: ``CLOCK_BOOTTIME`` where the system has one: it goes on counting while the host is
#: suspended, as the database's clock does. None: ``time.monotonic`` stands in.
LEASE_CLOCK_ID: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> float:
    """Seconds on the lease clock (``LEASE_CLOCK_ID``): every process of the host reads the same
    one, so a child can tell when its run's lease may lapse."""
    return time.monotonic() if LEASE_CLOCK_ID is None else time.clock_gettime(LEASE_CLOCK_ID)
