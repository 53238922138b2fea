"""The ticker: one thread that keeps every run's lease and slot alive, one statement each a tick.

One heartbeat statement per worker per tick covers all its runs, and one renewal statement all
its slots: a worker with 64 runs costs the database two statements per tick, not 128.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import connections

from ..exceptions import CancelRequestedError, LeaseLostError
from ..observability.logs import log_event
from ..store import JobStore
from .deadlines import Deadlines
from .fleet_slots import FleetSlots
from .registration import WorkerRow
from .runs import Run, RunsInFlight
from .vitals import Vitals

logger = logging.getLogger("django_ultjobs.worker")


class Ticker:
    """Heartbeat (rules 1 (leased-claim) to 3 (lost-lease-cancels)), slot renewal
    (rules 6 (slot-renewed) to 8 (lost-slot-cancels)) and the worker row, every interval."""

    def __init__(self, *, store: JobStore, runs: RunsInFlight, slots: FleetSlots,
                 row: WorkerRow, visibility_timeout: float, interval: float,
                 deadlines: Deadlines | None = None, vitals: Vitals | None = None) -> None:
        self.store = store
        self.runs = runs
        #: The worker's row, touched every tick and written again whole if it is gone.
        self.row = row
        #: Run timeouts (rules 55 (timeout-cancels), 56 (overrun-reported)), checked first at every
        #: tick: a slow heartbeat must not hold a timeout back.
        self.deadlines = deadlines
        self.slots = slots
        #: Told of each beat and whether the database answered it, for the probes
        #: (rules 121 (probe-alive) and 122 (probe-ready)).
        self.vitals = vitals
        self.worker_id = row.worker_id
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
            next_tick = time.monotonic() + self.interval
            while not self._stop.wait(self._wait(next_tick)):
                if time.monotonic() >= next_tick:
                    self.tick()
                    next_tick = time.monotonic() + self.interval
                elif self.deadlines is not None:
                    self.deadlines.check(self.runs.snapshot())
        finally:
            # Every thread the worker starts closes its own connection (rule 13 (nothing-leaks)).
            connections.close_all()

    def _wait(self, next_tick: float) -> float:
        """Seconds until the next tick, or until the next timeout falls due before it: a run
        is cancelled at its timeout, not up to a heartbeat interval later
        (rule 55 (timeout-cancels)). A run that starts during the wait is seen at its end, within
        one interval."""
        due = next_tick
        if self.deadlines is not None:
            deadline = self.deadlines.next_due(self.runs.snapshot())
            if deadline is not None:
                due = min(due, deadline)
        return max(0.0, due - time.monotonic())

    def tick(self) -> None:
        """Renew every lease and slot once; public so tests can tick without waiting."""
        runs = self.runs.snapshot()
        if self.deadlines is not None:
            self.deadlines.check(runs)
        if runs:
            self._heartbeat(runs)
        # Every slot the worker holds: its runs' (one not under the ticker yet included) and the
        # ones it keeps between runs, also with no run in flight.
        self.slots.renew()
        try:
            self.row.touch(len(runs))
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))
            if self.vitals is not None:
                self.vitals.beat(exc)
            return
        if self.vitals is not None:
            self.vitals.beat()

    def _heartbeat(self, runs: list) -> None:
        try:
            alive = self.store.heartbeat([(r.id, r.job.token) for r in runs],
                                         self.visibility_timeout)
        except Exception as exc:
            # A heartbeat that fails is not a lost lease (rule 2 (heartbeat-retried)): a database
            # blip is retried on the next tick, and the timeout leaves several.
            log_event(logger, logging.WARNING, "jobs.worker.heartbeat-failed",
                      worker_id=self.worker_id, runs=len(runs), error=repr(exc))
            return
        requested = [run for run in runs if alive.get(run.id) is True and not run.scope.cancelled]
        if requested:
            self._cancel_requested(requested)
        for run in runs:
            if run.id in alive:
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

    def _cancel_requested(self, runs: list[Run]) -> None:
        """Cancel ``runs``, whose jobs were asked to stop, with the reason given
        (rule 59 (cancel-reason-kept)).

        The reasons are read in one statement, only when some cancel was found: the heartbeat
        of every other tick returns no more than the flag. A read that fails cancels the runs
        all the same, with no reason: the request is what counts."""
        try:
            reasons = self.store.cancel_reasons([run.id for run in runs])
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.cancel-reason-failed",
                      worker_id=self.worker_id, error=repr(exc))
            reasons = {}
        for run in runs:
            reason = reasons.get(run.id, "")
            if run.scope.cancel(CancelRequestedError(
                    f"job {run.job.name!r} (id {run.id}) was cancelled on request",
                    reason=reason)):
                log_event(logger, logging.INFO, "jobs.worker.cancel-requested",
                          worker_id=self.worker_id, job_id=run.id, reason=reason)
