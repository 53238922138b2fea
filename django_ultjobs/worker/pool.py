"""Executor threads: a fixed pool whose free count is exactly what the claim loop may claim.

``size`` threads take runs from one queue, each run to the end of its body, as River, Oban and
PgQueuer run a job: a hand-over of N runs wakes N idle threads, so a run never waits behind
another run's body while a thread is free. Runs queued and executing both count as busy, so the
claim loop never claims more than there are threads (no prefetch).

Not ``concurrent.futures.ThreadPoolExecutor``: it holds the process's exit until every body
returns (a body that ignores its cancellation would keep a stopped worker alive), and has no hook
to close a thread's connections when it ends (rule 13 (nothing-leaks)).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from django.db import connections

from ..observability.logs import log_event
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")


class ExecutorPool:
    """``size`` threads running one run each; ``free()`` is how many more the worker may claim."""

    def __init__(self, size: int, handler: Callable[[Run], None], *,
                 on_free: Callable[[], None] | None = None) -> None:
        self.size = size
        self._handler = handler
        #: Called once after ``call_on_free``, by the next run to finish (see there).
        self._on_free = on_free
        self._call_on_free = False
        # Reentrant: the worker's signal handler may run on the main thread inside one of these
        # methods. Executor threads wait on _work; the claim loop and the drain on _freed.
        self._lock = threading.RLock()
        self._work = threading.Condition(self._lock)
        self._freed = threading.Condition(self._lock)
        self._pending: deque[Run] = deque()
        self._busy = 0
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"ultjobs-exec-{i}", daemon=True)
            for i in range(size)
        ]

    def prepare(self) -> None:
        """Nothing to set up before the worker's threads (the process pool forks here)."""

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def busy(self) -> int:
        """Runs handed over and not finished (queued or executing)."""
        return self._busy  # one read of an int: no lock needed

    def free(self) -> int:
        return self.size - self._busy

    def submit_many(self, runs: Iterable[Run]) -> None:
        """Hand runs to the pool; the caller claimed no more than ``free()`` of them."""
        with self._lock:
            before = len(self._pending)
            self._pending.extend(runs)
            added = len(self._pending) - before
            self._busy += added
            self._work.notify(added)

    def wait_for_free(self, timeout: float, at_least: int = 1) -> bool:
        """Block until ``at_least`` threads are free (or ``timeout``); return whether they are."""
        with self._lock:
            return self._freed.wait_for(lambda: self.size - self._busy >= at_least, timeout)

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no run is executing (or ``timeout``); return whether it is idle."""
        with self._lock:
            return self._freed.wait_for(lambda: self._busy == 0, timeout)

    def call_on_free(self) -> None:
        """Have the next run that finishes call ``on_free``, once: for a waiter that waits on
        something else than this pool (the claim loop of a worker with two lanes waits for a
        thread or an async place)."""
        with self._lock:
            self._call_on_free = self._on_free is not None

    def runners(self) -> dict[str, int] | None:
        """Which process runs each run: all of them this one, so the worker's row says nothing."""
        return None

    def trouble(self) -> str | None:
        """Why the pool cannot run bodies, for the liveness probe: threads never stop being
        there, so never anything."""
        return None

    def notify(self) -> None:
        """Make waiters for free threads re-check (the worker starts stopping); they go on
        waiting unless their condition holds."""
        with self._lock:
            self._freed.notify_all()

    def stop(self, timeout: float) -> None:
        """Ask every thread to exit once the queued runs are taken and its own is over; wait up
        to ``timeout``.

        Threads still inside a body after that are daemons: Python cannot kill a thread, and the
        process exiting is what finally stops a body that ignores its cancellation.
        """
        with self._lock:
            self._stopping = True
            self._work.notify_all()
            self._freed.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.ident is not None:  # not those a failed start never started
                thread.join(max(0.0, deadline - time.monotonic()))

    def _next(self) -> Run | None:
        """The next queued run, or None once the pool stops and nothing is queued."""
        with self._lock:
            while not self._pending:
                if self._stopping:
                    return None
                self._work.wait()
            return self._pending.popleft()

    def _finished(self) -> None:
        with self._lock:
            self._busy -= 1
            self._freed.notify_all()
            call = self._call_on_free and self._on_free is not None
            self._call_on_free = False
        # Outside the lock: a callback that takes a lock of its own must not nest it in ours.
        if call:
            self._on_free()

    def _loop(self) -> None:
        try:
            while (run := self._next()) is not None:
                try:
                    self._handler(run)
                except BaseException as exc:
                    # The handler settles every run itself; if even that broke, this thread
                    # must survive it, or the pool would count a dead thread as free forever.
                    log_event(logger, logging.ERROR, "jobs.worker.executor-error",
                              error=repr(exc))
                finally:
                    # Hold nothing of a finished run while idle (rule 13 (nothing-leaks)): the next
                    # wait may last hours, and this local kept the Run, its cancel scope and its
                    # job's arguments alive until then.
                    del run
                    self._finished()
        finally:
            # Every thread the worker starts closes its connections when it ends
            # (rule 13 (nothing-leaks)).
            connections.close_all()
