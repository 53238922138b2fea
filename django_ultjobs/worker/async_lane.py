"""The async lane: ONE event loop per worker process, on a thread of its own, for every
``async def`` body (``@job`` functions and Django Tasks async tasks alike;
rule 85 (one-event-loop)).

``asyncio.run`` on an executor thread per run capped a process's async runs at ``--threads``
and paid a loop's start-up per run. Here a run is a task on the one loop, and ``size``
(``--async-concurrency``) bounds how many run at once, apart from the threads: ``free()`` is
how many more the claim loop may claim of the async kinds, as ``ExecutorPool.free()`` is of the
others. The loop starts with the first async run, so a worker that has none runs no loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from django.db import connections

from ..observability.logs import log_event
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")

#: What the lane runs for each run: the worker's handler, which settles the run itself.
Handler = Callable[[Run], Coroutine[Any, Any, None]]


class AsyncLane:
    """``size`` places for ``async def`` bodies on one event loop."""

    def __init__(self, size: int, handler: Handler, *, on_free: Callable[[], None]) -> None:
        self.size = size
        self._handler = handler
        #: Called (from the loop's thread) when a place frees up: the claim loop may claim.
        self._on_free = on_free
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._busy = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # The tasks running, so none is collected while it waits (asyncio keeps only weak
        # references to tasks).
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def busy(self) -> int:
        """Runs handed over and not finished."""
        with self._lock:
            return self._busy

    def free(self) -> int:
        with self._lock:
            return self.size - self._busy

    def submit_many(self, runs: Iterable[Run]) -> None:
        """Start ``runs`` on the loop; the caller claimed no more than ``free()`` of them."""
        batch = list(runs)
        if not batch:
            return
        with self._lock:
            self._busy += len(batch)
            loop = self._loop or self._start()
        loop.call_soon_threadsafe(self._start_tasks, batch)

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no run is executing (or ``timeout``); return whether it is idle."""
        with self._lock:
            return self._changed.wait_for(lambda: self._busy == 0, timeout)

    def stop(self, timeout: float) -> None:
        """Stop the loop once no run is left on it; wait up to ``timeout`` for its thread.

        A body that ignored its cancellation keeps the loop (a daemon thread) running until the
        process exits, as a thread of the pool stays in such a body: its job was handed back on
        a dead worker's schedule (``abandonment``)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None or self._busy:
                return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:  # closed already
            return
        thread.join(timeout)

    def _start(self) -> asyncio.AbstractEventLoop:
        """Start the loop's thread (under the lock) and return its loop."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self._serve, args=(loop,), name="ultjobs-async",
                                  daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        return loop

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            # Every thread the worker starts closes its connections when it ends
            # (rule 13 (nothing-leaks)).
            connections.close_all()

    def _start_tasks(self, runs: list[Run]) -> None:
        loop = asyncio.get_running_loop()
        for run in runs:
            task = loop.create_task(self._run(run), name=f"ultjobs-job-{run.id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, run: Run) -> None:
        started = time.monotonic()
        try:
            await self._handler(run)
        except BaseException as exc:
            # The handler settles every run itself; this keeps the place count right if even
            # that broke (a place never freed would be lost for the process's life).
            log_event(logger, logging.ERROR, "jobs.worker.executor-error", job_id=run.id,
                      error=repr(exc), seconds=round(time.monotonic() - started, 3))
        finally:
            # type: ignore[assignment]  # hold nothing of a finished run (rule 13 (nothing-leaks))
            run = None
            self._finished()

    def _finished(self) -> None:
        with self._lock:
            self._busy -= 1
            self._changed.notify_all()
        self._on_free()
