"""Run timeouts: one timer thread per worker cancels each run at its deadline (rules
130 (timeout-on-time) to 134 (one-deadline-timer), 55 (timeout-cancels), 56 (overrun-reported)).

Every run whose job has a ``timeout`` is put on a heap of deadlines when its body starts; the
timer thread sleeps until the soonest one and is woken when a sooner one arrives, so a run is
cancelled at its deadline whatever ``--heartbeat-interval`` is (the heartbeat no longer checks
timeouts). One thread and one heap for all of a worker's runs: a thread per run would cost a
thread start on every claim.

Python cannot kill a thread. A run past its timeout is cancelled through its signal with
``JobTimeoutError``, like any other cancellation; a body that never looks at the signal runs on.
If it is still executing ``--cancel-wait`` seconds after that cancel was delivered, it is
*overrunning*: logged as ``jobs.worker.run-overrunning`` with its job and thread, listed on the
worker's row for the admin, and, with ``runjobworker --exit-on-overrun``, the worker drains and
exits non-zero so its supervisor starts a fresh process: the only way to stop such a body.

A body that returns (or raises) after its deadline before the timer fired is cancelled by
``body_over`` as it ends, so its attempt says ``timed_out`` too: a timeout never passes
unrecorded.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..exceptions import JobCancelledError, JobTimeoutError
from ..observability.logs import log_event
from ..store import JobStore
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")

#: What an entry of the heap asks for when it falls due: the run's timeout, or the end of the
#: ``--cancel-wait`` its timed-out body was given.
TIMEOUT = 0
OVERRUN = 1
#: Forgotten entries stay in the heap until they fall due; past this many (and half the heap)
#: it is rebuilt without them, so runs that end well before long timeouts cost no memory.
COMPACT_AT = 256


def timeout_error(run: Run) -> JobTimeoutError:
    return JobTimeoutError(job=run.job.name, job_id=run.id, timeout=run.timeout or 0.0)


def body_over(run: Run, worker_id: str = "") -> JobCancelledError | None:
    """Mark ``run``'s body as over and return its cancel reason, if any (the settlement reads
    it). A body that outlived its deadline before the timer cancelled it is cancelled now with
    ``JobTimeoutError``, so it ends as a timed-out run that returns ends
    (rule 132 (timeout-recorded))."""
    run.over = True
    deadline = run.deadline
    if (deadline is not None and not run.scope.cancelled and time.monotonic() >= deadline
            and run.scope.cancel(timeout_error(run))):
        _log_timed_out(run, worker_id, when="as the body ended")
    return run.scope.reason


def _log_timed_out(run: Run, worker_id: str, *, when: str) -> None:
    fields = {"worker_id": worker_id} if worker_id else {}
    log_event(logger, logging.WARNING, "jobs.worker.timed-out", **fields, job_id=run.id,
              job=run.job.name, timeout=run.timeout, thread=run.thread,
              late=round(time.monotonic() - (run.deadline or 0.0), 3), seen=when)


class Deadlines:
    """The timer of one worker's runs: a heap of ``[due, seq, kind, run]`` and one thread."""

    def __init__(self, *, store: JobStore, worker_id: str, grace: float,
                 on_overrun: Callable[[], None] | None = None,
                 on_change: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.worker_id = worker_id
        #: Seconds (``--cancel-wait``) a timed-out body gets, from the cancel's delivery, to
        #: unwind before it counts as overrunning.
        self.grace = grace
        self.on_overrun = on_overrun
        #: Called (from the timer thread) when the overrunning runs changed: the heartbeat writes
        #: them to the worker's row (``write``), so this thread waits on no database.
        self.on_change = on_change
        self.clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[list[Any]] = []
        # The one pending entry of each run, by run key: ``forget`` blanks it in place.
        self._entries: dict[tuple[int, str], list[Any]] = {}
        self._forgotten = 0
        self._seq = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        # The overrunning runs as the worker's row lists them, by run; rewritten on change only.
        self._overrunning: dict[tuple[int, str], dict[str, Any]] = {}
        self._written: list[dict[str, Any]] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="ultjobs-deadlines",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    # -- the runs -------------------------------------------------------------------------------

    def watch(self, run: Run) -> None:
        """Cancel ``run`` at its deadline (its body starts now); nothing for a run with none."""
        if run.deadline is not None:
            self._push(run, run.deadline, TIMEOUT)

    def forget(self, run: Run) -> None:
        """``run`` has left the worker's hands (its outcome is with the completer): drop its
        pending entry, and its place on the overrunning list."""
        if run.deadline is None:
            return  # never watched: most runs, which should not pay for the lock
        with self._cond:
            entry = self._entries.pop(run.key, None)
            if entry is not None:
                entry[3] = None
                self._forgotten += 1
                if self._forgotten > COMPACT_AT and self._forgotten * 2 > len(self._heap):
                    self._heap = [e for e in self._heap if e[3] is not None]
                    heapq.heapify(self._heap)
                    self._forgotten = 0
            listed = self._overrunning.pop(run.key, None) is not None
        if listed and self.on_change is not None:
            self.on_change()

    @property
    def pending(self) -> int:
        """Entries waiting in the heap, forgotten ones included (tests watch it shrink)."""
        with self._cond:
            return len(self._heap)

    @property
    def overrunning(self) -> list[dict[str, Any]]:
        """The runs reported as overrunning and not settled yet."""
        with self._cond:
            return list(self._overrunning.values())

    def _push(self, run: Run, due: float, kind: int) -> None:
        with self._cond:
            if run.over or run.settling or self._stopping:
                return
            self._seq += 1
            entry = [due, self._seq, kind, run]
            old = self._entries.get(run.key)
            if old is not None:
                old[3] = None
                self._forgotten += 1
            self._entries[run.key] = entry
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                # Sooner than what the timer sleeps for: wake it to sleep less.
                self._cond.notify()

    # -- the timer thread -----------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            entry = self._next_due()
            if entry is None:
                return
            try:
                self._fire(entry[2], entry[3])
            except Exception as exc:  # a bug here must not stop every later timeout
                log_event(logger, logging.ERROR, "jobs.worker.deadline-failed",
                          worker_id=self.worker_id, error=repr(exc))

    def _next_due(self) -> list[Any] | None:
        """Wait for the soonest entry to fall due and take it; None once stopping."""
        with self._cond:
            while not self._stopping:
                heap = self._heap
                while heap and heap[0][3] is None:
                    heapq.heappop(heap)
                    self._forgotten = max(0, self._forgotten - 1)
                if not heap:
                    self._cond.wait()
                    continue
                wait = heap[0][0] - self.clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                entry = heapq.heappop(heap)
                if self._entries.get(entry[3].key) is entry:
                    del self._entries[entry[3].key]
                return entry
        return None

    def _fire(self, kind: int, run: Run) -> None:
        """Act on an entry due now, outside the lock: cancelling may call the async lane's
        canceller, and logging may block."""
        if run.over or run.settling:
            return
        if kind == TIMEOUT:
            if run.scope.cancel(timeout_error(run)):
                _log_timed_out(run, self.worker_id, when="by the timer")
                # Overrunning counts from the cancel's delivery, not from the deadline.
                self._push(run, self.clock() + self.grace, OVERRUN)
            return
        self._report(run)

    def _report(self, run: Run) -> None:
        entry = {"job_id": run.id, "job": run.job.name, "thread": run.thread,
                 "timeout": run.timeout, "attempt": run.job.attempt}
        with self._cond:
            if run.settling:
                return
            self._overrunning[run.key] = entry
        log_event(logger, logging.ERROR, "jobs.worker.run-overrunning",
                  worker_id=self.worker_id, job_id=run.id, job=run.job.name,
                  thread=run.thread, timeout=run.timeout, cancel_wait=self.grace,
                  overrun=round(self.clock() - (run.deadline or 0.0), 3),
                  note="the body ignores its cancellation and Python cannot kill a thread: it "
                       "runs until it returns or the process exits (runjobworker "
                       "--exit-on-overrun drains and exits)")
        if self.on_change is not None:
            self.on_change()
        if self.on_overrun is not None:
            self.on_overrun()

    # -- the worker's row -----------------------------------------------------------------------

    def write(self) -> None:
        """Put the overrunning runs on the worker's row when they changed (the admin reads it);
        a write that fails is tried again at the next call (every beat calls it)."""
        current = self.overrunning
        if current == (self._written or []) and self._written is not None:
            return
        if not current and self._written is None:
            return
        try:
            self.store.worker_overrunning(self.worker_id, current)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))
            return
        self._written = current
