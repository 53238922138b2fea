"""Celery's drain clock: each worker process's first task start and last task finish.

Celery keeps no record of when a task ran (its result backend is off here, as a no-op job needs
none), so the worker's own events time the drain, as each PostgreSQL peer's timestamps time its
own: ``task_prerun`` marks the first start, ``task_postrun`` the last finish and counts. Each
process keeps those in memory and a thread of its own writes them to Redis every
``FLUSH_INTERVAL`` seconds when they changed, so a task pays no Redis round trip of the
benchmark's; the runner reads them all and takes the earliest start and the latest finish.

Plain Python (no Celery, no Redis): the recorder and the merge are unit-tested on their own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass

#: Seconds between a process's writes of its figures (only when they changed).
FLUSH_INTERVAL = 0.1
#: The Redis hash the figures go to: one field per worker process.
KEY = "ultjobs_peers:celery_timings"


class Recorder:
    """One process's first start, last finish and finished count (thread-safe: Celery's threads
    pool runs tasks on many threads of one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.first_start: float | None = None
        self.last_finish: float | None = None
        self.done = 0
        self._written = 0  # the ``done`` last written

    def started(self, now: float) -> None:
        with self._lock:
            if self.first_start is None or now < self.first_start:
                self.first_start = now

    def finished(self, now: float) -> None:
        with self._lock:
            self.done += 1
            if self.last_finish is None or now > self.last_finish:
                self.last_finish = now

    def pending(self) -> str | None:
        """The figures to write (JSON), or None when nothing changed since the last write."""
        with self._lock:
            if self.done == self._written:
                return None
            self._written = self.done
            return json.dumps([self.first_start, self.last_finish, self.done])


@dataclass(frozen=True)
class Span:
    """A drain as the worker processes saw it: ``done`` tasks from ``start`` to ``end``."""

    done: int
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def merge(values: Iterable[str | bytes]) -> Span | None:
    """The processes' figures (``Recorder.pending`` values) as one span; None if none ran."""
    done, starts, ends = 0, [], []
    for value in values:
        first, last, count = json.loads(value)
        done += count
        if first is not None:
            starts.append(first)
        if last is not None:
            ends.append(last)
    if not done or not starts or not ends:
        return None
    return Span(done=done, start=min(starts), end=max(ends))
