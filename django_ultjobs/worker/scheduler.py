"""The scheduler: one thread per worker that enqueues the ticks of its periodic jobs.

Every running worker has one (unless started with ``--no-schedule`` or ``--burst``), and none
leads: each offers a tick's enqueue when the tick comes, and the database keeps the first and
skips the rest (rule 60 (tick-once)). So a tick is neither lost when a worker dies nor doubled when
two run, and no election, lock or heartbeat is needed.

The time is the database's (rule 102 (database-clock-ticks)). Which ticks are due, which the
catch-up policy keeps and where the shared cursor moves are decided by the tick statement on the
database's clock; this thread only chooses *when* to ask, and what to offer: the ticks from its
cursor to a little past its estimate of the database's clock. That estimate is the database's clock
at its last answer plus the monotonic time since, so a step of this host's wall clock (an NTP
correction) moves nothing, and an estimate wrong for any other reason costs an early or late
question, never a tick: the statement keeps only what its own clock has reached, and this thread's
cursor moves only as far as the database's.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from django.db import connections

from ..jobs.periodic import periodic_jobs
from ..jobs.registry import registry_generation
from ..jobs.spec import JobSpec
from ..observability.logs import log_event
from ..observability.metrics import record_enqueued
from ..store import Clock, JobStore
from ..store.schedules import ScheduleInfo, ScheduleStore, TickAnswer, TickJob

logger = logging.getLogger("django_ultjobs.worker")

#: Seconds between syncs: re-registering the schedules and re-reading their cursors.
SYNC_EVERY = 60.0
#: The longest the thread sleeps: a tick a year away is still looked at again.
MAX_SLEEP = 30.0
#: Sent a little after the tick, so the job is already visible when the enqueue lands and its
#: notification wakes a worker at once (the estimate of the database's clock lags it by at most
#: the last answer's round trip, a few milliseconds).
AFTER_TICK = 0.01
#: Seconds to the next tick from which the thread closes its connection until then.
KEEP_CONNECTION = 5.0
#: Back-off after a failed statement (the database is down): doubling up to the last.
RETRY_FIRST, RETRY_MAX = 0.5, 30.0
#: Offers one tick statement makes: the second around the clock the first answered, for an
#: estimate so far off that the first offer did not reach the database's clock
#: (rule 102 (database-clock-ticks)).
OFFERS = 2


class Scheduler:
    """Enqueue each due tick of every registered periodic job (rules 60 (tick-once) to
    62 (catch-up-policy), 102 (database-clock-ticks))."""

    def __init__(self, *, store: JobStore, worker_id: str, clock: Clock | None = None) -> None:
        self.store = store
        self.schedules = ScheduleStore(store)
        self.worker_id = worker_id
        #: Tests only: what this worker reckons the database's clock to be, right or wrong.
        self.clock = clock
        #: Per periodic job: the newest tick the database has dealt with (enqueued, skipped by
        #: the catch-up policy or the pause), as its last answer said; never further.
        self.cursors: dict[str, datetime] = {}
        #: The database's clock at its last answer, and the monotonic clock when it came.
        self._db_seen: datetime | None = None
        self._seen_at = 0.0
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
            # Every thread the worker starts closes its own connection (rule 13 (nothing-leaks)).
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
        # Each job's next question as a moment of the estimate, which the monotonic clock moves:
        # a slow statement for one job does not make another's wait too long.
        wake = self.now() + timedelta(seconds=MAX_SLEEP)
        for _, spec in sorted(jobs.items()):
            wake = min(wake, self._ask(spec))
        return max(0.0, (wake - self.now()).total_seconds()) + AFTER_TICK

    def now(self) -> datetime:
        """The database's clock as this worker reckons it (or the injected clock): its clock
        at the last answer plus the monotonic time since, never this host's wall clock, which
        an NTP step may move by any amount between two answers (rule 102 (database-clock-ticks))."""
        if self.clock is not None:
            return self.clock()
        assert self._db_seen is not None, "now() before the first sync"
        return self._db_seen + timedelta(seconds=time.monotonic() - self._seen_at)

    def _heard(self, db_now: datetime) -> None:
        """Take the database's clock from an answer that just came."""
        self._db_seen, self._seen_at = db_now, time.monotonic()

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
        states, db_now = self.schedules.sync(infos)
        self._heard(db_now)
        for name, state in states.items():
            if name in jobs:
                self._move_cursor(name, state.last_tick or db_now)
        self._synced_at = time.monotonic()

    def _move_cursor(self, name: str, cursor: datetime) -> None:
        """Never backwards: a tick the database dealt with stays dealt with."""
        known = self.cursors.get(name)
        self.cursors[name] = cursor if known is None else max(known, cursor)

    def _ask(self, spec: JobSpec) -> datetime:
        """Offer ``spec``'s ticks if one is due by the estimate; return the moment of the
        estimate at which its next tick is due."""
        schedule = spec.schedule
        assert schedule is not None
        pending = schedule.next_tick(self.cursors[spec.name])
        now = self.now()
        if pending > now:
            return pending
        answer = self._offer(spec, now)
        # Timed from the database's answer, not the estimate: an estimate ahead of the
        # database's clock must not make the thread ask again and again until the tick comes.
        return schedule.next_tick(self.cursors[spec.name]) + (self.now() - answer.now)

    def _offer(self, spec: JobSpec, around: datetime) -> TickAnswer:
        """Offer the ticks around ``around``; again around the database's answer when the
        first offer did not reach its clock (rules 60 (tick-once) to 62 (catch-up-policy),
        102 (database-clock-ticks))."""
        schedule = spec.schedule
        assert schedule is not None
        job = TickJob(name=spec.name, queue=spec.queue, priority=spec.priority,
                      max_attempts=spec.max_attempts)
        for _ in range(OFFERS):
            answer = self.schedules.enqueue_ticks(
                job, schedule.candidates(self.cursors[spec.name], around),
                enqueued_by=f"schedule:{self.worker_id}")
            self._take(spec, answer)
            if answer.cursor is None or schedule.next_tick(self.cursors[spec.name]) > answer.now:
                return answer
            around = answer.now
        return answer

    def _take(self, spec: JobSpec, answer: TickAnswer) -> None:
        """Learn the database's clock and cursor from ``answer``; log and count its jobs."""
        self._heard(answer.now)
        self._record(spec, answer)
        if answer.cursor is None:
            self._synced_at = None  # the row is gone: the next step registers it again
            return
        self._move_cursor(spec.name, answer.cursor)
        if answer.paused:
            # Rule 63 (fleet-wide-pause): the ticks of a pause are skipped; a resumed schedule ticks
            # from then.
            self._move_cursor(spec.name, answer.now)

    def _record(self, spec: JobSpec, answer: TickAnswer) -> None:
        """Log and count the jobs this worker's statement created."""
        for job_id, tick in answer.created:
            # A line per tick, like the line per settled job: shown from -v 2.
            log_event(logger, logging.DEBUG, "jobs.scheduler.tick", worker_id=self.worker_id,
                      job=spec.name, job_id=job_id, tick=tick.isoformat())
        if answer.created:
            # Only the ticks this worker inserted: another worker counts the ones it sent.
            record_enqueued([(spec.name, spec.queue)] * len(answer.created), self.store.alias)
