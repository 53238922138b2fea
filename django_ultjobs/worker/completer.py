"""The completer: writes settles in batches, each row still fenced on its own claim token.

Every extra per-job transaction roughly halves throughput, so outcomes queue here and are written
many to a statement. The runs stay in flight (their leases heartbeated) until their settle
is written, so a slow or retrying completer never lets a finished job be re-delivered; their fleet
slots pass on at submit, when the body has returned (rule 90 (slot-passes-on-return)), so the
batching holds none. A settle the database refuses (the token no longer owns the row) changes
nothing and is logged (rule 4 (fenced-settle)).

A batch the database refuses for its values (rule 30 (refused-outcome-no-wedge)) is split in halves
until the row it refuses is alone; that run is settled as a failure saying why, and every other row
is written as usual. An outage (rule 2 (heartbeat-retried)'s database blip) is different: the batch
waits and is written again whole.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connections

from ..observability import metrics
from ..observability.logs import log_event, logs_event
from ..store import JobStore, Settlement
from ..store.records import settlement_size
from .fleet_slots import FleetSlots
from .runs import Run, RunsInFlight
from .settlements import unstorable_settlement

logger = logging.getLogger("django_ultjobs.worker")

#: A settle batch holds at most this many runs, and this many bytes of outcome (results and
#: errors) beyond its first run: a batch is held in memory three times over while it is encoded
#: and sent, PostgreSQL refuses a parameter over 1 GB (an array of them too), and SQLite's batch
#: is one JSON value (rule 31 (bounded-outcomes)).
_MAX_BATCH = 500
MAX_BATCH_BYTES = 32 * 1024 * 1024


@dataclass(slots=True, eq=False)
class Pending:
    """A run's outcome waiting to be written, and what its writes so far have shown."""

    run: Run
    settlement: Settlement
    size: int
    #: A write of it failed in a way that may have committed (the connection died before the
    #: reply): a later write that finds the row no longer held asks whether it landed
    #: (rule 32 (landed-never-stale)).
    uncertain: bool = False
    #: How often the database refused its outcome and it was replaced
    #: (rule 30 (refused-outcome-no-wedge)).
    refused: int = 0


class Completer:
    """A thread that settles runs in batches and lets them go."""

    def __init__(self, *, store: JobStore, runs: RunsInFlight, slots: FleetSlots,
                 worker_id: str, on_written: Callable[[], None] | None = None) -> None:
        self.store = store
        # Called after each batch is written (its hand-backs are visible) and when a run's slot
        # passes on at submit, so a claim loop waiting for either looks again now, not at its
        # next poll.
        self.on_written = on_written
        self.runs = runs
        self.slots = slots
        self.worker_id = worker_id
        # A SimpleQueue: a put and a get cost a fraction of queue.Queue's, whose task counting
        # nothing here uses.
        self._queue: queue.SimpleQueue[Pending] = queue.SimpleQueue()
        self._pending = 0
        self._pending_bytes = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._abandon_at: float | None = None
        self._thread = threading.Thread(target=self._loop, name="ultjobs-completer", daemon=True)
        #: Outcomes written, and settles the database refused as stale (rule 4 (fenced-settle)):
        #: reported when the worker stops (``jobs.worker.stopped``).
        self.settled = 0
        self.stale = 0
        #: Moves when a run that is not on the async lane is submitted (its slot passes on) and
        #: when its settle is written (a hand-back becomes visible): either may make a sync job
        #: claimable, so a claim loop resting its threads' claim looks again.
        self.sync_moves = 0
        #: How many outcomes the database refused to store, each settled as a failure instead.
        self.unstorable = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, run: Run, settlement: Settlement, *, abandoned: bool = False) -> bool:
        """Queue ``run``'s settle, once; return False if its outcome was already decided.

        From here on a heartbeat "no" cannot cancel the run. The run is (or stays) registered,
        so its lease is renewed until the settle is written, however long a database outage
        makes that take; its slot passes on now (rule 90 (slot-passes-on-return)).
        """
        if not run.start_settling():
            return False
        # Only the caller that decided the outcome may say the body was abandoned (its slot is
        # then left to lapse); a body that finished first hands its slot on as usual.
        run.abandoned = abandoned
        self.runs.add(run)
        if not _on_async_lane(run):
            self.sync_moves += 1
        # The body is over: its slot passes on now, not after the settle
        # (rules 9 (slot-held-while-body-runs) and 90 (slot-passes-on-return)). The cap bounds
        # bodies executing; a batch of settles must not hold slots. The run keeps its job lease
        # (heartbeated) until the settle is written.
        if run.slot is not None:
            self.slots.keep([run])
            if self.on_written is not None:
                # A claim loop waiting for a slot of this kind may claim now.
                self.on_written()
        item = Pending(run, settlement, settlement_size(settlement))
        with self._lock:
            self._pending += 1
            self._pending_bytes += item.size
        self._queue.put(item)
        return True

    @property
    def pending(self) -> int:
        """Settles submitted and not yet written (or abandoned)."""
        with self._lock:
            return self._pending

    @property
    def pending_bytes(self) -> int:
        """Roughly the bytes of outcome (results, errors) those settles hold in memory."""
        with self._lock:
            return self._pending_bytes

    def stop(self, timeout: float) -> None:
        """Write what is queued (retrying for up to ``timeout`` seconds), then stop."""
        self._abandon_at = time.monotonic() + timeout
        self._stopping.set()
        self._thread.join()

    def _loop(self) -> None:
        try:
            backoff = 0.05
            batch: list[Pending] = []
            # Settles of a job already in the batch wait for the next one (see _fill).
            later: list[Pending] = []
            while True:
                if not batch and not later:
                    try:
                        batch.append(self._queue.get(timeout=0.1))
                    except queue.Empty:
                        if self._stopping.is_set():
                            return
                        continue
                later = self._fill(batch, later)
                # The slots these runs passed on at submit that go back to the fleet: released
                # now, before their settles are written (rule 90 (slot-passes-on-return)).
                self.slots.release_returned()
                batch = self._write(batch)
                if not batch:
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
            self.slots.release_returned()
            connections.close_all()

    def _fill(self, batch: list[Pending], later: list[Pending]) -> list[Pending]:
        """Fill ``batch`` up to its bounds, at most one settle per job; return the rest.

        Two runs of one job in this worker (it claimed its own job again after the lease lapsed)
        must not share a statement: the settle matches the batch to rows by id, so a stale
        outcome could otherwise be applied under the newer run's token (rule 4 (fenced-settle))."""
        ids = {item.run.id for item in batch}
        size = sum(item.size for item in batch)
        deferred: list[Pending] = []
        pending = iter(later)
        while len(batch) < _MAX_BATCH:
            item = next(pending, None)
            if item is None:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch and size + item.size > MAX_BATCH_BYTES:
                # Full by bytes (rule 31 (bounded-outcomes)): it leads the next batch.
                deferred.insert(0, item)
                break
            if item.run.id in ids:
                deferred.append(item)
            else:
                ids.add(item.run.id)
                size += item.size
                batch.append(item)
        deferred.extend(pending)
        return deferred

    def _write(self, batch: list[Pending]) -> list[Pending]:
        """Write ``batch``; return what is left to write again after a backoff (an outage)."""
        try:
            applied = self.store.settle([item.settlement for item in batch], self.worker_id)
        except Exception as exc:
            if self.store.refuses(exc):
                return self._split(batch, exc)
            # Never drop an outcome: the runs stay registered (their leases alive) and the batch
            # is written again with backoff. It may have committed all the same (the connection
            # died before the reply): the next write will not find those rows held
            # (rule 32 (landed-never-stale)).
            for item in batch:
                item.uncertain = True
            log_event(logger, logging.WARNING, "jobs.worker.settle-failed",
                      worker_id=self.worker_id, runs=len(batch), error=repr(exc))
            return batch
        self._report(batch, applied)
        self._finish(batch)
        return []

    def _split(self, batch: list[Pending], exc: BaseException) -> list[Pending]:
        """Write a batch the database refused for its values, in halves, until the refused row
        is alone (rule 30 (refused-outcome-no-wedge)): one bad outcome costs the others a few
        statements, not their runs."""
        if len(batch) == 1:
            return self._replace(batch[0], exc)
        log_event(logger, logging.DEBUG, "jobs.worker.settle-split", worker_id=self.worker_id,
                  runs=len(batch), error=self.store.refusal_reason(exc))
        half = len(batch) // 2
        left = self._write(batch[:half])
        if left:
            # An outage meanwhile: the rest waits for the retry with it.
            return left + batch[half:]
        return self._write(batch[half:])

    def _replace(self, item: Pending, exc: BaseException) -> list[Pending]:
        """Settle a run whose outcome the database refused as a failure that says why.

        Its replacement holds nothing but the run's own fields and a short error; should even
        that be refused, the run is left to its lease, as a dead worker's would be."""
        reason = self.store.refusal_reason(exc)
        if item.refused >= 2:
            log_event(logger, logging.ERROR, "jobs.worker.settle-abandoned",
                      worker_id=self.worker_id, job_id=item.run.id, error=reason,
                      note="the database refused even the failure; the job will be re-delivered "
                           "when its lease lapses")
            self._finish([item])
            return []
        self.unstorable += item.refused == 0
        replacement = unstorable_settlement(item.run, item.settlement, reason[:2000])
        if item.refused:
            # The first replacement was refused too (its step names?): the bare failure.
            replacement.steps_run = replacement.steps_replayed = ()
        item.refused += 1
        self._resize(item, replacement)
        return self._write([item])

    def _resize(self, item: Pending, settlement: Settlement) -> None:
        size = settlement_size(settlement)
        with self._lock:
            self._pending_bytes += size - item.size
        item.settlement, item.size = settlement, size

    def _report(self, batch: list[Pending], applied: set[int]) -> None:
        unsure = [item for item in batch if item.uncertain and item.run.id not in applied]
        landed = self._landed(unsure) if unsure else set()
        # Asked once a batch: with no SDK configured nothing is collected
        # (rule 70 (no-sdk-no-metrics)).
        finished: list[tuple[str, str, str, float | None]] | None = (
            [] if metrics.enabled() else None)
        say_settled = logs_event(logger, logging.INFO, "jobs.worker.settled")
        for item in batch:
            run, settlement = item.run, item.settlement
            if run.id in applied or (landed is not None and run.id in landed):
                self.settled += 1
                if finished is not None and settlement.outcome is not None:
                    finished.append((run.job.name, run.job.queue, settlement.outcome,
                                     run.duration))
                if say_settled:
                    log_event(logger, logging.INFO, "jobs.worker.settled",
                              worker_id=self.worker_id, job_id=run.id, job=run.job.name,
                              attempt=settlement.attempt_no, status=settlement.status,
                              outcome=settlement.outcome,
                              **({} if run.id in applied
                                 else {"note": "written before a lost reply"}))
            elif item.uncertain and (landed is None or settlement.outcome is None):
                # Rule 32 (landed-never-stale): written before the connection died, or stale;
                # nothing tells which
                # (no attempt row to look for, or the look failed). Not a warning either way.
                log_event(logger, logging.INFO, "jobs.worker.settle-unconfirmed",
                          worker_id=self.worker_id, job_id=run.id, job=run.job.name,
                          attempt=settlement.attempt_no, outcome=settlement.outcome)
            else:
                # Rule 4 (fenced-settle): this worker's token no longer owns the row (its lease
                # lapsed and the job was re-delivered, or it was cancelled). The late result changes
                # nothing.
                self.stale += 1
                log_event(logger, logging.WARNING, "jobs.worker.settle-stale",
                          worker_id=self.worker_id, job_id=run.id, job=run.job.name,
                          attempt=settlement.attempt_no, outcome=settlement.outcome)
        if finished:
            metrics.record_finished(finished)

    def _landed(self, unsure: list[Pending]) -> set[int] | None:
        """Which of ``unsure`` an earlier, unanswered write did settle
        (rule 32 (landed-never-stale)); None when the database could not say."""
        try:
            return self.store.settle_landed([item.settlement for item in unsure], self.worker_id)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.settle-check-failed",
                      worker_id=self.worker_id, runs=len(unsure), error=repr(exc))
            return None

    def _abandon(self, batch: list[Pending]) -> None:
        for item in batch:
            log_event(logger, logging.ERROR, "jobs.worker.settle-abandoned",
                      worker_id=self.worker_id, job_id=item.run.id,
                      note="the job will be re-delivered when its lease lapses")
        self._finish(batch)

    def _finish(self, items: list[Pending]) -> None:
        # The runs' slots passed on at submit (rule 90 (slot-passes-on-return)): a settle, written
        # or given up, only lets the job lease go.
        self.runs.remove_many([item.run for item in items])
        if not all(_on_async_lane(item.run) for item in items):
            self.sync_moves += 1
        with self._lock:
            self._pending -= len(items)
            self._pending_bytes -= sum(item.size for item in items)
        if self.on_written is not None:
            self.on_written()


def _on_async_lane(run: Run) -> bool:
    return run.spec is not None and run.spec.is_coroutine
