"""The scheduler: one thread per worker that enqueues the ticks of its periodic jobs.

Every running worker has one (unless started with ``--no-schedule`` or ``--burst``), and none
leads: each sends a tick's enqueue when the tick comes, and the database keeps the first and
skips the rest (rule 60). So a tick is neither lost when a worker dies nor doubled when two run,
and no election, lock or heartbeat is needed. The time is the database's: the offset between
this host's clock and the database's is read at every sync, so hosts whose clocks disagree
still send a tick at its time (and a job is visible only at its tick in any case, rule 61).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

from django.db import connections

from ..job_spec import JobSpec
from ..logs import log_event
from ..metrics import record_enqueued
from ..periodic import periodic_jobs
from ..registry import registry_generation
from ..store import Clock, JobStore
from ..store.schedules import ScheduleInfo, ScheduleStore, TickJob

logger = logging.getLogger("django_ultjobs.worker")

#: Seconds between syncs: re-registering the schedules and re-reading the database's clock.
SYNC_EVERY = 60.0
#: The longest the thread sleeps: a tick a year away is still looked at again.
MAX_SLEEP = 30.0
#: Sent a little after the tick, so the job is already visible when the enqueue lands and its
#: notification wakes a worker at once (the clock offset is known to a few milliseconds).
AFTER_TICK = 0.01
#: Seconds to the next tick from which the thread closes its connection until then.
KEEP_CONNECTION = 5.0
#: Back-off after a failed statement (the database is down): doubling up to the last.
RETRY_FIRST, RETRY_MAX = 0.5, 30.0


class Scheduler:
    """Enqueue each due tick of every registered periodic job (rules 60-62)."""

    def __init__(self, *, store: JobStore, worker_id: str, clock: Clock | None = None) -> None:
        self.store = store
        self.schedules = ScheduleStore(store)
        self.worker_id = worker_id
        self.clock = clock
        #: Per periodic job: the newest tick this worker knows to be enqueued (or skipped).
        self.cursors: dict[str, datetime] = {}
        #: The database's clock minus this host's, from the last sync.
        self._offset = timedelta(0)
        self._synced_at: float | None = None
        self._generation = -1
        self._failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ultjobs-scheduler",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                wait = self._step_safely()
                if wait >= KEEP_CONNECTION:
                    # A schedule that ticks rarely (the daily prune) holds no connection
                    # between its ticks: docs/deployment.md counts it as transient.
                    connections.close_all()
                self._stop.wait(wait)
        finally:
            # Every thread the worker starts closes its own connection (rule 13).
            connections.close_all()

    def _step_safely(self) -> float:
        """One step; a failure (the database is down) is logged and retried with back-off."""
        try:
            wait = self.step()
        except Exception as exc:
            self._failures += 1
            wait = min(RETRY_MAX, RETRY_FIRST * 2 ** min(self._failures - 1, 8))
            self._synced_at = None  # read the cursors again: others may have moved them
            log_event(logger, logging.WARNING, "jobs.scheduler.failed",
                      worker_id=self.worker_id, error=repr(exc), retry_in=wait)
            return wait
        self._failures = 0
        return wait

    def step(self) -> float:
        """Enqueue every tick due now; return the seconds until the next one is due.

        Public so tests can step the scheduler on an injected clock without its thread."""
        jobs = periodic_jobs()
        if not jobs:
            return MAX_SLEEP
        if self._sync_due():
            self._sync(jobs)
        now = self.now()
        wake = now + timedelta(seconds=MAX_SLEEP)
        for name, spec in sorted(jobs.items()):
            self._enqueue_due(spec, now)
            schedule = spec.schedule
            assert schedule is not None
            wake = min(wake, schedule.next_tick(max(now, self.cursors[name])))
        return max(0.0, (wake - self.now()).total_seconds()) + AFTER_TICK

    def now(self) -> datetime:
        """The database's clock as this worker reckons it (or the injected clock)."""
        if self.clock is not None:
            return self.clock()
        return datetime.now(UTC) + self._offset

    def _sync_due(self) -> bool:
        generation = registry_generation()
        if generation != self._generation or self._synced_at is None:
            self._generation = generation
            return True
        return time.monotonic() - self._synced_at >= SYNC_EVERY

    def _sync(self, jobs: dict[str, JobSpec]) -> None:
        """Register the schedules, read their cursors and the database's clock."""
        infos = [ScheduleInfo(name=name, schedule=spec.schedule.describe(),
                              timezone=spec.schedule.timezone or "",
                              catch_up=spec.schedule.catch_up)
                 for name, spec in jobs.items() if spec.schedule is not None]
        sent = datetime.now(UTC)
        states, db_now = self.schedules.sync(infos)
        self._offset = db_now - sent
        for name, state in states.items():
            if name not in jobs:
                continue
            known = self.cursors.get(name)
            cursor = state.last_tick or db_now
            # Never backwards: a tick this worker already sent stays sent.
            self.cursors[name] = cursor if known is None else max(known, cursor)
        self._synced_at = time.monotonic()

    def _enqueue_due(self, spec: JobSpec, now: datetime) -> None:
        """Send the ticks of ``spec`` that are due, by its catch-up policy (rule 62)."""
        schedule = spec.schedule
        assert schedule is not None
        cursor = self.cursors[spec.name]
        ticks = schedule.due(cursor, now)
        if ticks:
            created = self.schedules.enqueue_ticks(
                TickJob(name=spec.name, queue=spec.queue, priority=spec.priority,
                        max_attempts=spec.max_attempts),
                ticks, enqueued_by=f"schedule:{self.worker_id}")
            for job_id, tick in created:
                # A line per tick, like the line per settled job: shown from -v 2.
                log_event(logger, logging.DEBUG, "jobs.scheduler.tick", worker_id=self.worker_id,
                          job=spec.name, job_id=job_id, tick=tick.isoformat())
            # Only the ticks this worker inserted: another worker counts the ones it sent.
            record_enqueued([(spec.name, spec.queue)] * len(created), self.store.alias)
        # Every tick up to now is dealt with: enqueued here, by another worker, skipped by the
        # catch-up policy, or refused because the schedule is paused.
        self.cursors[spec.name] = max(cursor, now)
