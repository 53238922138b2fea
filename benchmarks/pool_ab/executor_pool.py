"""``ExecutorPool``'s interface on ``concurrent.futures.ThreadPoolExecutor``: the candidate the
hand-written pool (``django_ultjobs/worker/pool.py``) is measured against.
Benchmark-only: ``benchmarks.pool_ab.worker`` swaps it in for one worker process.

The free count the claim loop reads is a counter under a condition: a ``BoundedSemaphore``
would bound the runs handed over just as well, but cannot say how many permits are left, which
is what ``free()`` must answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from django_ultjobs.observability.logs import log_event
from django_ultjobs.worker.runs import Run

logger = logging.getLogger("django_ultjobs.worker")


class ExecutorPool:
    """``size`` executor threads; ``free()`` is how many more runs the worker may claim."""

    def __init__(self, size: int, handler: Callable[[Run], None]) -> None:
        self.size = size
        self._handler = handler
        self._freed = threading.Condition(threading.RLock())
        self._busy = 0
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="ultjobs-exec")

    def start(self) -> None:
        """Nothing to start: the executor makes a thread on a submit that finds none idle."""

    @property
    def _threads(self) -> list[threading.Thread]:
        return list(self._executor._threads)

    @property
    def busy(self) -> int:
        with self._freed:
            return self._busy

    def free(self) -> int:
        with self._freed:
            return self.size - self._busy

    def submit(self, run: Run) -> None:
        self.submit_many((run,))

    def submit_many(self, runs: Iterable[Run]) -> None:
        runs = list(runs)
        with self._freed:
            self._busy += len(runs)
        for run in runs:
            self._executor.submit(self._run, run)

    def wait_for_free(self, timeout: float, at_least: int = 1) -> bool:
        with self._freed:
            return self._freed.wait_for(lambda: self.size - self._busy >= at_least, timeout)

    def wait_idle(self, timeout: float | None) -> bool:
        with self._freed:
            return self._freed.wait_for(lambda: self._busy == 0, timeout)

    def notify(self) -> None:
        with self._freed:
            self._freed.notify_all()

    def stop(self, timeout: float) -> None:
        self._executor.shutdown(wait=False)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self, run: Run) -> None:
        try:
            self._handler(run)
        except BaseException as exc:
            log_event(logger, logging.ERROR, "jobs.worker.executor-error", error=repr(exc))
        finally:
            with self._freed:
                self._busy -= 1
                self._freed.notify_all()
