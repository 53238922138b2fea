"""Worker recycling: when a worker has done its share (``--max-jobs``, ``--max-memory``).

A worker that reached either bound stops claiming, lets its runs finish and exits 0, so the
supervisor (systemd, Kubernetes) starts a fresh process before a slow leak takes the host
(rule 76 (recycle-at-bound)). Counting and measuring live here; the claim loop only asks.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable

#: Seconds between two readings of the process's memory: a reading is a file read (Linux), and a
#: busy worker goes round its claim loop thousands of times a second.
MEMORY_CHECK_INTERVAL = 1.0


def resident_memory_mb() -> float:
    """The process's resident memory now, in MiB (its peak where "now" cannot be read)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1_048_576
    except (OSError, ValueError, IndexError):
        # No /proc (macOS, the BSDs): the peak, which only grows; a leak shows in it all the same.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1_048_576 if sys.platform == "darwin" else peak / 1024


class Recycler:
    """Whether this worker has reached ``max_jobs`` started runs or ``max_memory`` MiB."""

    def __init__(self, max_jobs: int | None, max_memory: float | None, *,
                 memory: Callable[[], float] = resident_memory_mb,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_jobs = max_jobs
        self.max_memory = max_memory
        self._memory = memory
        self._clock = clock
        self._memory_read_at: float | None = None
        #: Runs this worker started (claimed and handed to a thread).
        self.started = 0
        #: What was reached: ``max-jobs``, ``max-memory``; None while neither is.
        self.reason: str | None = None
        #: The memory reading that reached ``max_memory``, in MiB.
        self.memory_mb: float | None = None

    def room(self, free: int) -> int:
        """How many of ``free`` threads may take a run: never past ``max_jobs`` in all, so no
        run is claimed that would only be handed back."""
        if self.max_jobs is None:
            return free
        return max(0, min(free, self.max_jobs - self.started))

    def note_started(self, count: int) -> None:
        """Count runs started; reaching ``max_jobs`` ends the claiming."""
        self.started += count
        if self.max_jobs is not None and self.started >= self.max_jobs and self.reason is None:
            self.reason = "max-jobs"

    def reached(self) -> bool:
        """Whether to stop claiming now (memory read at most once per
        ``MEMORY_CHECK_INTERVAL``).

        Memory counts only once a run has started: a process whose baseline is already past
        ``max_memory`` still does one run per start instead of restarting for ever with none.
        """
        if self.reason is None and self.max_memory is not None and self.started:
            now = self._clock()
            if self._memory_read_at is None or now - self._memory_read_at >= \
                    MEMORY_CHECK_INTERVAL:
                self._memory_read_at = now
                used = self._memory()
                if used >= self.max_memory:
                    self.reason, self.memory_mb = "max-memory", used
        return self.reason is not None
