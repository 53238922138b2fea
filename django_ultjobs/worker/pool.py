"""Executor threads: a fixed pool whose free count is exactly what the claim loop may claim."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import connections

from ..logs import log_event
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")


class ExecutorPool:
    """``size`` threads running one run each; ``free()`` is how many more the worker may claim."""

    def __init__(self, size: int, handler: Callable[[Run], None]) -> None:
        self.size = size
        self._handler = handler
        self._queue: queue.Queue[Run | None] = queue.Queue()
        self._busy = 0
        self._cond = threading.Condition()
        self._threads = [
            threading.Thread(target=self._loop, name=f"ultjobs-exec-{i}", daemon=True)
            for i in range(size)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def busy(self) -> int:
        with self._cond:
            return self._busy

    def free(self) -> int:
        with self._cond:
            return self.size - self._busy

    def submit(self, run: Run) -> None:
        with self._cond:
            self._busy += 1
        self._queue.put(run)

    def wait_for_free(self, timeout: float, at_least: int = 1) -> bool:
        """Block until ``at_least`` threads are free (or ``timeout``); return whether they are."""
        with self._cond:
            return self._cond.wait_for(lambda: self.size - self._busy >= at_least, timeout)

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no run is executing (or ``timeout``); return whether it is idle."""
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout)

    def notify(self) -> None:
        """Wake anything waiting on the pool (used when the worker starts stopping)."""
        with self._cond:
            self._cond.notify_all()

    def stop(self, timeout: float) -> None:
        """Ask every thread to exit once its current run is over; wait up to ``timeout``.

        Threads still inside a body after that are daemons: Python cannot kill a thread, and the
        process exiting is what finally stops a body that ignores its cancellation.
        """
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        try:
            while True:
                run = self._queue.get()
                if run is None:
                    return
                try:
                    self._handler(run)
                except BaseException as exc:
                    # The handler settles every run itself; if even that broke, this thread
                    # must survive it, or the pool would count a dead thread as free forever.
                    log_event(logger, logging.ERROR, "jobs.worker.executor-error",
                              error=repr(exc))
                finally:
                    # Hold nothing of a finished run while idle (rule 13): the next get() may
                    # block for hours, and this local kept the Run, its cancel scope and its
                    # job's arguments alive until then.
                    run = None
                    with self._cond:
                        self._busy -= 1
                        self._cond.notify_all()
        finally:
            # Every thread the worker starts closes its connections when it ends (rule 13).
            connections.close_all()
