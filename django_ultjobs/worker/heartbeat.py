"""The heartbeat: one thread that keeps every run's lease and slot alive, one statement each a beat.

One heartbeat statement per worker per beat covers all its runs, and one renewal statement all
its slots: a worker with 64 runs costs the database two statements per beat, not 128. The
heartbeat also finds the cancel requests of the runs (rule 59 (cancel-reason-kept)); on
PostgreSQL a notification (``listener.py``) makes it look at once instead of at the next beat
(rule 133 (cancel-reaches-body)).
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import connections

from ..core.clocks import lease_clock
from ..exceptions import CancelRequestedError, LeaseLostError
from ..observability.logs import log_event
from ..store import JobStore
from .deadlines import Deadlines
from .fleet_slots import FleetSlots
from .runs import Run, RunsInFlight
from .vitals import Vitals
from .worker_row import WorkerRow

logger = logging.getLogger("django_ultjobs.worker")


class Heartbeat:
    """Heartbeat (rules 1 (leased-claim) to 3 (lost-lease-cancels)), slot renewal
    (rules 6 (slot-renewed) to 8 (lost-slot-cancels)) and the worker row, every interval."""

    def __init__(self, *, store: JobStore, runs: RunsInFlight, slots: FleetSlots,
                 row: WorkerRow, visibility_timeout: float, interval: float,
                 deadlines: Deadlines | None = None, vitals: Vitals | None = None) -> None:
        self.store = store
        self.runs = runs
        #: The worker's row, touched every beat and written again whole if it is gone.
        self.row = row
        #: Run timeouts have a timer of their own (rule 130 (timeout-on-time)); the heartbeat
        #: writes the runs it finds overrunning to the worker's row (rule 56 (overrun-reported)),
        #: at once when asked (``overrunning_changed``) and again at every beat if that write
        #: failed.
        self.deadlines = deadlines
        self.slots = slots
        #: Told of each beat and whether the database answered it, for the probes
        #: (rules 121 (probe-alive) and 122 (probe-ready)).
        self.vitals = vitals
        self.worker_id = row.worker_id
        self.visibility_timeout = visibility_timeout
        self.interval = interval
        self._stopping = False
        # Ends the wait for the next beat early: to stop, to look for cancel requests now, or to
        # write the overrunning runs now. What to do is in the flags below, set before it.
        self._wake = threading.Event()
        self._cancels_asked = False
        self._overrunning_asked = False
        self._thread = threading.Thread(target=self._loop, name="ultjobs-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()

    def check_cancels(self) -> None:
        """Look for cancel requests of the runs in flight now, not at the next beat: a notice
        from the listener that one of this worker's runs was asked to stop
        (rule 133 (cancel-reaches-body))."""
        self._cancels_asked = True
        self._wake.set()

    def overrunning_changed(self) -> None:
        """Write the overrunning runs to the worker's row now (the timer found one, or one
        ended)."""
        self._overrunning_asked = True
        self._wake.set()

    def _loop(self) -> None:
        try:
            next_beat = time.monotonic() + self.interval
            while True:
                self._wake.wait(max(0.0, next_beat - time.monotonic()))
                # Cleared before the flags are read: a flag set from here on sets it again.
                self._wake.clear()
                if self._stopping:
                    return
                if time.monotonic() >= next_beat:
                    self._cancels_asked = self._overrunning_asked = False
                    self.beat()
                    next_beat = time.monotonic() + self.interval
                    continue
                if self._cancels_asked:
                    self._cancels_asked = False
                    # The heartbeat answers whether each run was asked to stop, fenced on its
                    # token; it renews the leases too, which does no harm.
                    runs = self.runs.snapshot()
                    if runs:
                        self._renew_leases(runs)
                if self._overrunning_asked and self.deadlines is not None:
                    self._overrunning_asked = False
                    self.deadlines.write()
        finally:
            # Every thread the worker starts closes its own connection (rule 13 (nothing-leaks)).
            connections.close_all()

    def beat(self) -> None:
        """Renew every lease and slot once; public so tests can beat without waiting."""
        runs = self.runs.snapshot()
        if self.deadlines is not None:
            self.deadlines.write()
        if runs:
            self._renew_leases(runs)
        # Every slot the worker holds: its runs' (one not under the heartbeat yet included) and the
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

    def _renew_leases(self, runs: list[Run]) -> None:
        sent = lease_clock()
        try:
            alive = self.store.heartbeat([(r.id, r.job.token) for r in runs],
                                         self.visibility_timeout)
        except Exception as exc:
            # A heartbeat that fails is not a lost lease (rule 2 (heartbeat-retried)): a database
            # blip is retried on the next beat, and the timeout leaves several.
            log_event(logger, logging.WARNING, "jobs.worker.heartbeat-failed",
                      worker_id=self.worker_id, runs=len(runs), error=repr(exc))
            return
        requested = [run for run in runs if alive.get(run.id) is True and not run.scope.cancelled]
        if requested:
            self._cancel_requested(requested)
        for run in runs:
            if run.id in alive:
                run.leased_at = sent
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
        of every other beat returns no more than the flag. A read that fails cancels the runs
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
