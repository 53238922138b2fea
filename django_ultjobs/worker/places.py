"""The hand-over both pools share: runs queued for ``size`` places (threads or children), each
counted busy from hand-over to finish, so ``free()`` is exactly what the claim loop may claim
(no prefetch)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable

from .runs import Run


class Places:
    """``size`` places taking runs from one queue; subclasses run what ``next_run`` hands them
    and call ``finished`` once each run is over."""

    def __init__(self, size: int, on_free: Callable[[], None] | None) -> None:
        self.size = size
        #: Called once after ``call_on_free``, by the next run to finish (see there).
        self._on_free = on_free
        self._call_on_free = False
        # Reentrant: the worker's signal handler may run on the main thread inside one of these
        # methods. Places wait on _work; the claim loop and the drain on _freed.
        self._lock = threading.RLock()
        self._work = threading.Condition(self._lock)
        self._freed = threading.Condition(self._lock)
        self._pending: deque[Run] = deque()
        self._busy = 0
        self._stopping = False

    @property
    def busy(self) -> int:
        """Runs handed over and not finished (queued or executing)."""
        return self._busy  # one read of an int: no lock needed

    def free(self) -> int:
        return self.size - self._busy

    def submit_many(self, runs: Iterable[Run]) -> None:
        """Hand runs over; the caller claimed no more than ``free()`` of them."""
        with self._lock:
            before = len(self._pending)
            self._pending.extend(runs)
            added = len(self._pending) - before
            self._busy += added
            self._work.notify(added)

    def wait_for_free(self, timeout: float, at_least: int = 1) -> bool:
        """Block until ``at_least`` places are free (or ``timeout``); return whether they are."""
        with self._lock:
            return self._freed.wait_for(lambda: self.size - self._busy >= at_least, timeout)

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no run is executing (or ``timeout``); return whether none is."""
        with self._lock:
            return self._freed.wait_for(lambda: self._busy == 0, timeout)

    def call_on_free(self) -> None:
        """Have the next run that finishes call ``on_free``, once: for a waiter that waits on
        something else than this pool (the claim loop of a worker with two lanes waits for a
        thread or an async place)."""
        with self._lock:
            self._call_on_free = self._on_free is not None

    def notify(self) -> None:
        """Make waiters for free places re-check (the worker starts stopping); they go on
        waiting unless their condition holds."""
        with self._lock:
            self._freed.notify_all()

    def stop_handing_over(self) -> None:
        """No run is handed out once the queue is empty; every waiter re-checks."""
        with self._lock:
            self._stopping = True
            self._work.notify_all()
            self._freed.notify_all()

    def next_run(self) -> Run | None:
        """The next queued run, or None once the pool stops and nothing is queued."""
        with self._lock:
            while not self._pending:
                if self._stopping:
                    return None
                self._work.wait()
            return self._pending.popleft()

    def finished(self) -> None:
        """One run is over: its place is free."""
        with self._lock:
            self._busy -= 1
            self._freed.notify_all()
            call = self._call_on_free and self._on_free is not None
            self._call_on_free = False
        # Outside the lock: a callback that takes a lock of its own must not nest it in ours.
        if call and self._on_free is not None:
            self._on_free()
