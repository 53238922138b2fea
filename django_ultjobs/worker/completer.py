"""The completer: writes settles in batches, each row still fenced on its own claim token.

Every extra per-job transaction roughly halves throughput, so outcomes queue here and are written
many to a statement. The runs stay in the registry (their leases and slots heartbeated) until
their settle is written, so a slow or retrying completer never lets a finished job be
re-delivered; a settle the database refuses (the token no longer owns the row) changes nothing and
is logged (rule 4).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import connections

from ..logs import log_event
from ..store import JobStore, Settlement
from .fleet_slots import FleetSlots
from .runs import Run, RunRegistry

logger = logging.getLogger("django_ultjobs.worker")

_MAX_BATCH = 500


class Completer:
    """A thread that settles runs in batches, keeps their slots for the next runs of their
    kinds, and lets them go."""

    def __init__(self, *, store: JobStore, registry: RunRegistry, slots: FleetSlots,
                 worker_id: str, on_written: Callable[[], None] | None = None) -> None:
        self.store = store
        # Called after each batch is written: its slots are kept for the next claim and its
        # hand-backs visible, so a claim loop waiting for either should look again now, not at
        # its next poll.
        self.on_written = on_written
        self.registry = registry
        self.slots = slots
        self.worker_id = worker_id
        self._queue: queue.Queue[tuple[Run, Settlement]] = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._abandon_at: float | None = None
        self._thread = threading.Thread(target=self._loop, name="ultjobs-completer", daemon=True)
        #: How many settles the database refused as stale (tests and the benchmark read this).
        self.stale = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, run: Run, settlement: Settlement, *, abandoned: bool = False) -> bool:
        """Queue ``run``'s settle, once; return False if its outcome was already decided.

        From here on a heartbeat "no" cannot cancel the run. The run is (or stays) registered,
        so its lease and slot are renewed until the settle is written, however long a database
        outage makes that take.
        """
        if not run.start_settling():
            return False
        # Only the caller that decided the outcome may say the body was abandoned (its slot is
        # then left to lapse); a body that finished first hands its slot on as usual.
        run.abandoned = abandoned
        self.registry.add(run)
        with self._lock:
            self._pending += 1
        self._queue.put((run, settlement))
        return True

    @property
    def pending(self) -> int:
        """Settles submitted and not yet written (or abandoned)."""
        with self._lock:
            return self._pending

    def stop(self, timeout: float) -> None:
        """Write what is queued (retrying for up to ``timeout`` seconds), then stop."""
        self._abandon_at = time.monotonic() + timeout
        self._stopping.set()
        self._thread.join()

    def _loop(self) -> None:
        try:
            backoff = 0.05
            batch: list[tuple[Run, Settlement]] = []
            # Settles of a job already in the batch wait for the next one (see _fill).
            later: list[tuple[Run, Settlement]] = []
            while True:
                if not batch and not later:
                    try:
                        batch.append(self._queue.get(timeout=0.1))
                    except queue.Empty:
                        if self._stopping.is_set():
                            return
                        continue
                later = self._fill(batch, later)
                if self._write(batch):
                    batch = []
                    backoff = 0.05
                    continue
                if self._abandon_at is not None and time.monotonic() > self._abandon_at:
                    self._abandon(batch)
                    batch = []
                    backoff = 0.05
                    continue
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        finally:
            connections.close_all()

    def _fill(self, batch: list[tuple[Run, Settlement]], later: list[tuple[Run, Settlement]]
              ) -> list[tuple[Run, Settlement]]:
        """Fill ``batch`` up to the limit, at most one settle per job; return the rest.

        Two runs of one job in this worker (it claimed its own job again after the lease lapsed)
        must not share a statement: the settle matches the batch to rows by id, so a stale
        outcome could otherwise be applied under the newer run's token (rule 4)."""
        ids = {run.id for run, _ in batch}
        deferred: list[tuple[Run, Settlement]] = []
        pending = iter(later)
        while len(batch) < _MAX_BATCH:
            item = next(pending, None)
            if item is None:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if item[0].id in ids:
                deferred.append(item)
            else:
                ids.add(item[0].id)
                batch.append(item)
        deferred.extend(pending)
        return deferred

    def _write(self, batch: list[tuple[Run, Settlement]]) -> bool:
        runs = [run for run, _ in batch]
        try:
            applied = self.store.settle([s for _, s in batch], self.worker_id)
        except Exception as exc:
            # Never drop an outcome: the runs stay registered (their leases alive) and the batch
            # is written again with backoff.
            log_event(logger, logging.WARNING, "jobs.worker.settle-failed",
                      worker_id=self.worker_id, runs=len(batch), error=repr(exc))
            return False
        for run, settlement in batch:
            if run.id in applied:
                log_event(logger, logging.INFO, "jobs.worker.settled", worker_id=self.worker_id,
                          job_id=run.id, job=run.job.name, attempt=settlement.attempt_no,
                          status=settlement.status, outcome=settlement.outcome)
            else:
                # Rule 4: this worker's token no longer owns the row (its lease lapsed and the
                # job was re-delivered, or it was cancelled). The late result changes nothing.
                self.stale += 1
                log_event(logger, logging.WARNING, "jobs.worker.settle-stale",
                          worker_id=self.worker_id, job_id=run.id, job=run.job.name,
                          attempt=settlement.attempt_no, outcome=settlement.outcome)
        self._finish(runs)
        return True

    def _abandon(self, batch: list[tuple[Run, Settlement]]) -> None:
        for run, _ in batch:
            log_event(logger, logging.ERROR, "jobs.worker.settle-abandoned",
                      worker_id=self.worker_id, job_id=run.id,
                      note="the job will be re-delivered when its lease lapses")
        self._finish([run for run, _ in batch])

    def _finish(self, runs: list[Run]) -> None:
        # A run's slot passes to the worker only after its settle (rule 6's other half: the slot
        # is held for as long as the job is); the claim loop hands it to the next run of its kind
        # or gives it back to the fleet.
        self.registry.remove_many(runs)
        self.slots.keep(runs)
        with self._lock:
            self._pending -= len(runs)
        if self.on_written is not None:
            self.on_written()
