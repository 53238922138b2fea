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
from collections.abc import Callable

from django.db import connections

from ..observability.logs import log_event
from .places import Places
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")


class ExecutorPool(Places):
    """``size`` threads running one run each; ``free()`` is how many more the worker may claim."""

    def __init__(self, size: int, handler: Callable[[Run], None], *,
                 on_free: Callable[[], None] | None = None) -> None:
        super().__init__(size, on_free)
        self._handler = handler
        self._threads = [
            threading.Thread(target=self._loop, name=f"ultjobs-exec-{i}", daemon=True)
            for i in range(size)
        ]

    def prepare(self) -> None:
        """Nothing to set up before the worker's threads (the process pool forks here)."""

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def runners(self) -> dict[str, int] | None:
        """Which process runs each run: all of them this one, so the worker's row says nothing."""
        return None

    def trouble(self) -> str | None:
        """Why the pool cannot run bodies, for the liveness probe: threads never stop being
        there, so never anything."""
        return None

    def stop(self, timeout: float) -> None:
        """Ask every thread to exit once the queued runs are taken and its own is over; wait up
        to ``timeout``.

        Threads still inside a body after that are daemons: Python cannot kill a thread, and the
        process exiting is what finally stops a body that ignores its cancellation.
        """
        self.stop_handing_over()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.ident is not None:  # not those a failed start never started
                thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        try:
            while (run := self.next_run()) is not None:
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
                    self.finished()
        finally:
            # Every thread the worker starts closes its connections when it ends
            # (rule 13 (nothing-leaks)).
            connections.close_all()
