"""The ticker: one thread that keeps every run's lease and slot alive, one statement each a tick.

One heartbeat statement per worker per tick covers all its runs, and one renewal statement all
its slots: a worker with 64 runs costs the database two statements per tick, not 128.
"""

from __future__ import annotations

import logging
import threading

from django.db import connections

from ..exceptions import CancelRequestedError, LeaseLostError
from ..logs import log_event
from ..store import JobStore
from .fleet_slots import FleetSlots
from .runs import RunsInFlight

logger = logging.getLogger("django_ultjobs.worker")


class Ticker:
    """Heartbeat (rules 1-3), slot renewal (rules 6-8) and the worker row, every interval."""

    def __init__(self, *, store: JobStore, runs: RunsInFlight, slots: FleetSlots,
                 worker_id: str, visibility_timeout: float, interval: float) -> None:
        self.store = store
        self.runs = runs
        self.slots = slots
        self.worker_id = worker_id
        self.visibility_timeout = visibility_timeout
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ultjobs-ticker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.tick()
        finally:
            # Every thread the worker starts closes its own connection (rule 13).
            connections.close_all()

    def tick(self) -> None:
        """Renew every lease and slot once; public so tests can tick without waiting."""
        runs = self.runs.snapshot()
        if runs:
            self._heartbeat(runs)
        # Every slot the worker holds: its runs' (one not under the ticker yet included) and the
        # ones it keeps between runs, also with no run in flight.
        self.slots.renew()
        try:
            self.store.worker_touch(self.worker_id, len(runs))
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))

    def _heartbeat(self, runs: list) -> None:
        try:
            alive = self.store.heartbeat([(r.id, r.job.token) for r in runs],
                                         self.visibility_timeout)
        except Exception as exc:
            # A heartbeat that fails is not a lost lease (rule 2): a database blip is retried on
            # the next tick, and the timeout leaves several.
            log_event(logger, logging.WARNING, "jobs.worker.heartbeat-failed",
                      worker_id=self.worker_id, runs=len(runs), error=repr(exc))
            return
        for run in runs:
            cancel_requested = alive.get(run.id)
            if cancel_requested is True:
                if run.scope.cancel(CancelRequestedError(
                        f"job {run.job.name!r} (id {run.id}) was cancelled on request")):
                    log_event(logger, logging.INFO, "jobs.worker.cancel-requested",
                              worker_id=self.worker_id, job_id=run.id)
                continue
            if cancel_requested is False:
                continue
            # Absent from the answer: an explicit "no" from the database. A run whose settle is
            # being written may simply have settled first — that is not a loss.
            if run.settling or not self.runs.contains(run):
                continue
            if run.scope.cancel(LeaseLostError(
                    f"job {run.job.name!r} (id {run.id}) lost its lease: another claim owns the "
                    "row now, or it no longer exists")):
                log_event(logger, logging.ERROR, "jobs.worker.lease-lost",
                          worker_id=self.worker_id, job_id=run.id, attempt=run.job.attempt)
