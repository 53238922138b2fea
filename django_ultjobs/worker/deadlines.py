"""Run timeouts: cancel a run still executing past its timeout, report a body that ignores it.

Python cannot kill a thread. A run past its ``timeout`` is cancelled through its signal with
``JobTimeoutError`` (rule 55 (timeout-cancels)), like any other cancellation; a body that never
looks at the signal runs on. Once it has ignored the timeout for ``grace`` seconds more it is
*overrunning*: logged as ``jobs.worker.run-overrunning`` with its job and thread, listed on the
worker's row for the admin, and, with ``runjobworker --exit-on-overrun``, the worker drains and
exits non-zero so its supervisor starts a fresh process: the only way to stop such a body
(rule 56 (overrun-reported)).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..exceptions import JobTimeoutError
from ..observability.logs import log_event
from ..store import JobStore
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")


class Deadlines:
    """The timeouts of one worker's runs, checked at every tick of its ticker."""

    def __init__(self, *, store: JobStore, worker_id: str, grace: float,
                 on_overrun: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.worker_id = worker_id
        #: Seconds a timed-out body gets to unwind before it counts as overrunning.
        self.grace = grace
        self.on_overrun = on_overrun
        self.clock = clock
        # The overrunning runs as the worker's row lists them, by run; rewritten on change only.
        self._overrunning: dict[tuple[int, str], dict[str, Any]] = {}
        self._written: list[dict[str, Any]] | None = None

    def check(self, runs: Sequence[Run]) -> None:
        """Cancel each run past its timeout; report the ones still running ``grace`` later."""
        now = self.clock()
        found = False
        for run in runs:
            deadline = run.deadline
            if deadline is None or now < deadline or run.settling:
                continue
            timeout = run.timeout or 0.0
            if run.scope.cancel(JobTimeoutError(job=run.job.name, job_id=run.id,
                                                timeout=timeout)):
                log_event(logger, logging.WARNING, "jobs.worker.timed-out",
                          worker_id=self.worker_id, job_id=run.id, job=run.job.name,
                          timeout=timeout, thread=run.thread)
            elif (isinstance(run.scope.reason, JobTimeoutError)
                    and now - deadline >= self.grace and run.key not in self._overrunning):
                self._report(run, now - deadline)
                found = True
        if self._overrunning:
            live = {run.key for run in runs if not run.settling}
            for key in [k for k in self._overrunning if k not in live]:
                del self._overrunning[key]
        self._write()
        if found and self.on_overrun is not None:
            self.on_overrun()

    def next_due(self, runs: Sequence[Run]) -> float | None:
        """The soonest moment (``clock``) a run's timeout, or its grace, falls due; None when
        no run has one pending."""
        soonest: float | None = None
        for run in runs:
            due = run.deadline
            if due is None or run.settling:
                continue
            if run.scope.cancelled:
                if (not isinstance(run.scope.reason, JobTimeoutError)
                        or run.key in self._overrunning):
                    continue
                due += self.grace
            if soonest is None or due < soonest:
                soonest = due
        return soonest

    @property
    def overrunning(self) -> list[dict[str, Any]]:
        """The runs reported as overrunning and not settled yet."""
        return list(self._overrunning.values())

    def _report(self, run: Run, over: float) -> None:
        entry = {"job_id": run.id, "job": run.job.name, "thread": run.thread,
                 "timeout": run.timeout, "attempt": run.job.attempt}
        self._overrunning[run.key] = entry
        log_event(logger, logging.ERROR, "jobs.worker.run-overrunning",
                  worker_id=self.worker_id, job_id=run.id, job=run.job.name,
                  thread=run.thread, timeout=run.timeout, overrun=round(over, 3),
                  note="the body ignores its cancellation and Python cannot kill a thread: it "
                       "runs until it returns or the process exits (runjobworker "
                       "--exit-on-overrun drains and exits)")

    def _write(self) -> None:
        """Put the overrunning runs on the worker's row when they changed (the admin reads it);
        a write that fails is tried again at the next tick."""
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

