"""The worker process: claim loop, drain, and the wiring of pool, ticker and completer.

The producer (claim only as many as there are free threads), the executor (run one job, turn
exceptions into outcomes), the completer (write outcomes) and the ticker (keep leases alive) are
separate pieces; this module only connects them and decides when to stop.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from django.db import DatabaseError, InterfaceError, connections
from django.db.backends.signals import connection_created

from ..conf import get_settings
from ..core.numeric import is_seconds, shown
from ..exceptions import (
    DatabaseUnavailableError,
    JobConfigurationError,
    JobTablesMissingError,
    JobTimeoutError,
    LeaseLostError,
    WorkerShutdownError,
)
from ..jobs.registry import get_job, registered_jobs, registry_generation
from ..jobs.spec import JobSpec
from ..models import AttemptOutcome
from ..observability import metrics
from ..observability.logs import log_event
from ..store import (
    ClaimBatch,
    ClaimedJob,
    Clock,
    JobStore,
    LostAttempt,
    ParkEpisode,
    get_store,
    unmigrated_message,
)
from .async_executor import arun_job
from .async_lane import AsyncLane
from .claim_lanes import ClaimPlan, claim_plans
from .completer import Completer
from .deadlines import Deadlines
from .drain_report import REPORT_INTERVAL, STOP_NOW, describe_runs
from .executor import (
    UNKNOWN_JOB_PREFIX,
    abandonment,
    failed_by_worker,
    run_job,
    settlement_before_run,
    slot_unavailable_settlement,
)
from .fleet_slots import FleetSlots
from .gauges import GaugeSampler
from .listener import Listener
from .options import MAX_SECONDS, WorkerOptions
from .pool import ExecutorPool
from .rate_gate import RateGate, over_limit_settlement
from .recycle import Recycler
from .registration import WorkerRow
from .runs import Run, RunsInFlight
from .scheduler import Scheduler
from .telemetry import Telemetry, telemetry_now
from .ticker import Ticker

logger = logging.getLogger("django_ultjobs.worker")

#: Finished runs whose settles are not written yet, beyond which the claim loop stops claiming:
#: a completer that falls behind must slow claiming down, not let unsettled runs pile up.
MAX_UNSETTLED = 1000
#: ...and beyond this many bytes of their outcomes (results, errors) held in memory (rule 31).
MAX_UNSETTLED_BYTES = 128 * 1024 * 1024
#: The exit status of a worker stopped by ``--exit-on-overrun`` (rule 56): not 0, which a
#: supervisor reads as "done", nor 1, which ``runjobworker`` uses for a mistake at start.
EXIT_OVERRUN = 3
#: Seconds between a starting worker's tries for its database: doubling from the first, at most
#: the second (a database back from a restart is used within that long).
START_BACKOFF_FIRST = 0.25
START_BACKOFF_MAX = 5.0


class WorkerProcess:
    """One ``runjobworker`` process's worth of job running."""

    def __init__(self, options: WorkerOptions, *, store: JobStore | None = None,
                 clock: Clock | None = None) -> None:
        self.options = options
        self.store = store or get_store(options.database, clock=clock)
        self.worker_id = options.worker_id
        self.runs = RunsInFlight()
        self.recycler = Recycler(options.max_jobs, options.max_memory)
        self.slots = FleetSlots(self.store.slot_store, self.worker_id, options.visibility_timeout)
        self.deadlines = Deadlines(
            store=self.store, worker_id=self.worker_id, grace=options.cancel_wait,
            on_overrun=self._overran if options.exit_on_overrun else None)
        self.row = WorkerRow(self.store, options,
                             overrunning=lambda: self.deadlines.overrunning)
        self.ticker = Ticker(store=self.store, runs=self.runs, slots=self.slots,
                             row=self.row, visibility_timeout=options.visibility_timeout,
                             interval=options.heartbeat_interval, deadlines=self.deadlines)
        self.completer = Completer(store=self.store, runs=self.runs, slots=self.slots,
                                   worker_id=self.worker_id, on_written=self.wake)
        self.pool = ExecutorPool(options.threads, self._execute, on_free=self.wake)
        #: ``async def`` bodies run on one event loop, apart from the threads (rule 85).
        self.async_lane = AsyncLane(options.async_concurrency, self._execute_async,
                                    on_free=self.wake)
        self.listener = (
            Listener(store=self.store, queues=options.queues, wake=self.notified,
                     worker_id=self.worker_id)
            if self.store.vendor == "postgresql" and options.listen else None
        )
        # Every worker may enqueue a tick, none leads (rule 60); a burst worker drains and
        # exits, so it schedules nothing.
        self.scheduler = (
            Scheduler(store=self.store, worker_id=self.worker_id, clock=clock)
            if options.schedule and not options.burst else None
        )
        #: The gauge sampler, started with the other threads when metrics are on (rule 71).
        self.gauges: GaugeSampler | None = None
        self._executing: set[Run] = set()
        self._executing_lock = threading.Lock()
        # The providers the runs report to, looked up again for each claim's runs (see
        # telemetry.py: per run, the lookups were a fifth of a no-op run's Python).
        self._telemetry: Telemetry = telemetry_now()
        self._stopping = threading.Event()
        self._forced = threading.Event()
        # Whether SIGINT and SIGTERM are this worker's (a second one forces the stop).
        self._signals_installed = False
        self._wake = threading.Event()
        # Set by an enqueue notification: work of any kind may have arrived.
        self._notified = threading.Event()
        self.rates = RateGate(self.store, self.worker_id)
        # The registry generation whose job names this worker's row lists.
        self._known_generation = -1
        #: Claim statements sent, reported when the worker stops: a count far above the runs
        #: settled is a loop that spins (an outage, a completer behind, capped kinds held).
        self.claim_statements = 0
        #: Jobs those statements claimed (each run of a job once, a retry again).
        self.jobs_claimed = 0
        self.started = threading.Event()
        #: What ``run`` returns: 0, or ``EXIT_OVERRUN`` after ``--exit-on-overrun`` fired.
        self.exit_code = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def check(self) -> None:
        """Refuse promises that would do nothing (rule 10), and a gauge interval that would
        spin the sampler (django_ultjobs.E050)."""
        interval = get_settings().GAUGE_INTERVAL
        if metrics.enabled() and not is_seconds(interval, MAX_SECONDS):
            raise JobConfigurationError(
                f"ULTJOBS['GAUGE_INTERVAL'] is {shown(interval)}; it must be a number of seconds "
                f"from more than 0 to {MAX_SECONDS:.0f} (leave it out for the default, 15)")
        capped = sorted(n for n, spec in registered_jobs().items() if spec.concurrency)
        if capped and self.store.slot_store is None:
            raise JobConfigurationError(
                f"job(s) {', '.join(capped)} declare concurrency=, but the job store "
                f"{type(self.store).__name__} on database {self.store.alias!r} has no lease "
                "store, so the cap would silently hold per process instead of fleet-wide. "
                "Use the PostgreSQL or SQLite store, or remove concurrency= from those jobs."
            )

    def run(self, *, install_signals: bool = True) -> int:
        """Claim and run jobs until stopped (or, with ``burst``, until none is runnable)."""
        self.check()
        # Before the start-up wait, so a SIGTERM during it stops the worker cleanly.
        restore = self._install_signals() if install_signals else None
        try:
            if self._start():
                self._serve()
        finally:
            if restore is not None:
                restore()
            connections.close_all()
        return self.exit_code

    def _overran(self) -> None:
        """``--exit-on-overrun``: a body ignores its timeout, and only the process exit can stop
        it (rule 56). Drain as on SIGTERM, then exit ``EXIT_OVERRUN`` so the supervisor starts a
        fresh process. The other runs get the grace period; the overrunning one is settled as
        timed out and retried, after the visibility timeout, by another process."""
        if self.exit_code:
            return
        self.exit_code = EXIT_OVERRUN
        log_event(logger, logging.ERROR, "jobs.worker.exit-on-overrun", worker_id=self.worker_id,
                  exit_code=EXIT_OVERRUN, overrunning=len(self.deadlines.overrunning))
        self.request_stop()

    def _serve(self) -> None:
        """Start the threads, claim until stopped, then drain."""
        self._start_threads()
        log_event(logger, logging.INFO, "jobs.worker.started", worker_id=self.worker_id,
                  queues=",".join(self.options.queues), threads=self.options.threads,
                  async_concurrency=self.options.async_concurrency,
                  visibility_timeout=self.options.visibility_timeout,
                  heartbeat_interval=self.options.heartbeat_interval,
                  database=self.store.alias, vendor=self.store.vendor)
        self.started.set()
        try:
            self._claim_loop()
        finally:
            if self.listener is not None:
                self.listener.stop()
            if self.scheduler is not None:
                self.scheduler.stop()
            self._drain()
            self._log_stopped()

    def _log_stopped(self) -> None:
        """Say the worker stopped, with what it did: the one summary a ``--burst`` run prints."""
        done = self.completer
        log_event(logger, logging.INFO, "jobs.worker.stopped", worker_id=self.worker_id,
                  jobs_claimed=self.jobs_claimed, claim_statements=self.claim_statements,
                  settled=done.settled, stale=done.stale, unstorable=done.unstorable)

    def request_stop(self, *, force: bool = False) -> None:
        """Stop claiming and drain (thread- and signal-safe); ``force`` skips the grace period."""
        if force:
            self._forced.set()
        self._stopping.set()
        self._wake.set()
        self.pool.notify()

    def wake(self) -> None:
        """Claim now instead of at the next poll (a settle was written, the worker stops)."""
        self._wake.set()

    def notified(self) -> None:
        """A job was enqueued (LISTEN/NOTIFY): claim now, every kind included."""
        self._notified.set()
        self._wake.set()

    # -- claiming -------------------------------------------------------------------------------

    def _unsettled_full(self) -> bool:
        """Whether the outcomes waiting for the completer are too many, or too big, to claim
        more runs: memory stays bounded however large the results (rule 31)."""
        return (self.completer.pending >= MAX_UNSETTLED
                or self.completer.pending_bytes >= MAX_UNSETTLED_BYTES)

    def _claim_loop(self) -> None:
        """Claim and start jobs until stopped (or, with ``burst``, until none is runnable).

        Each round: give back what waited too long, decide how many to claim (``_room``), claim
        them in one statement (``_claim``), start them (``_dispatch``), then wait for a free
        thread, a written settle or new work (``_after_empty_claim``)."""
        loop = _LoopState(batch=max(1, self.options.threads // 2))
        while not self._stopping.is_set():
            self._refresh_caps(loop)
            # Slots kept from settled runs that no claim has used for a poll interval: this loop
            # may be waiting for a free thread or for the completer, and other workers for them.
            self.slots.give_back_idle(self.options.poll_interval)
            if self.recycler.reached():
                self._log_recycling()
                return
            free = self.recycler.room(self._room(loop))
            if free and not self._claim_round(loop, free):
                return

    def _log_recycling(self) -> None:
        log_event(logger, logging.INFO, "jobs.worker.recycling", worker_id=self.worker_id,
                  reason=self.recycler.reason, runs=self.recycler.started,
                  max_jobs=self.options.max_jobs, memory_mb=self.recycler.memory_mb,
                  max_memory=self.options.max_memory, in_flight=self._busy())

    def _refresh_caps(self, loop: _LoopState) -> None:
        """Bring a job registered after start (a task imported on its first claim) into the
        caps, and into this worker's row, from this round on."""
        generation = registry_generation()
        if loop.generation != generation:
            loop.generation = generation
            jobs = registered_jobs()
            loop.caps = {n: s.concurrency for n, s in jobs.items() if s.concurrency}
            loop.keyed = frozenset(n for n in loop.caps if jobs[n].concurrency_key is not None)
            loop.slot_caps = {n: c for n, c in loop.caps.items() if n not in loop.keyed}
            loop.rated = {n: s for n, s in jobs.items() if s.rate is not None}
            loop.async_names = frozenset(n for n, s in jobs.items() if s.is_coroutine)
        # Outside the branch above: a write that failed is tried again next round.
        self._record_known_jobs(loop.generation)

    def _room(self, loop: _LoopState) -> int:
        """How many runs to claim now: the free threads (and free async places, rule 87); 0,
        after a wait, when no place is free or the outcomes waiting for the completer are too
        many or too big (rule 31)."""
        if loop.async_names:
            free = self._lanes_room(loop)
        else:
            free = loop.free_sync = self.pool.free()
            if free <= 0:
                self.pool.wait_for_free(self.options.poll_interval)
        if free <= 0:
            return 0
        if self._unsettled_full():
            # The completer has fallen behind (a slow or failing settle): claiming on would
            # only grow the runs waiting for it, each heartbeated and held in memory. Wait for
            # a batch to be written (it wakes this loop).
            self._wake.clear()
            if self._unsettled_full():
                self._wake.wait(self.options.poll_interval)
            return 0
        # One deadline for both waits below: the claim waits 2 ms at most, not 2 ms per wait.
        deadline = time.monotonic() + 0.002
        if loop.backlog and free < loop.batch and not loop.async_names:
            # The last claim came back full, so there is a backlog: let a few more threads free
            # up (a couple of ms at most) and claim them in one statement, rather than pay a
            # round trip per finished run. An idle queue skips this: latency first.
            self.pool.wait_for_free(0.002, at_least=loop.batch)
            free = loop.free_sync = self.pool.free()
        if loop.slot_bound:
            # The last claim took every slot free to a capped kind it has a backlog of: let its
            # runs pass their slots on (a couple of ms at most) and claim them in one statement,
            # as above for threads. Claiming at the first slot back took one run per statement,
            # every other claim of a capped drain (performance.md item 90).
            self.slots.wait_for_kept(loop.slot_bound, max(0.0, deadline - time.monotonic()))
            # The runs that passed their slots on freed their places too: count them, or the
            # claim takes only the places free before the wait (with fewer than twice the cap
            # of threads, every other claim was a short one).
            free = self._free_places(loop)
        return free

    def _free_places(self, loop: _LoopState) -> int:
        """The free places of the lanes this worker runs, noted in ``loop`` for the claim."""
        loop.free_sync = self.pool.free()
        if not loop.async_names:
            return loop.free_sync
        loop.free_async = self.async_lane.free()
        return max(0, loop.free_sync) + max(0, loop.free_async)

    def _lanes_room(self, loop: _LoopState) -> int:
        """The free places of both lanes (threads and async places), noted in ``loop`` for the
        claim to split; 0 after a wait when both are full. The wait ends when a settle is
        written, a thread or an async place frees up (each wakes this loop), or after a poll
        interval."""
        free = self._free_places(loop)
        if free <= 0:
            self._wake.clear()
            if self.async_lane.free() <= 0:
                self._wait_for_work(loop, self.options.poll_interval)
        return free

    def _claim_round(self, loop: _LoopState, free: int) -> bool:
        """Claim up to ``free`` runs, start them and wait as the answer says; False when a
        ``burst`` worker has drained its queues."""
        # Read before the claim: only if nothing was in flight while the claim looked can an
        # empty answer mean "nothing is runnable now" (a hand-back written meanwhile would
        # otherwise be missed by --burst).
        idle = self._busy() == 0 and self.completer.pending == 0
        self._wake.clear()
        if loop.async_names:
            # Read again after the clear: an async place freed since ``_room`` read the lanes
            # set the wake-up this clear dropped, and a round that saw no room in that lane
            # would wait for the next place to free, a whole body's time when the lane's runs
            # end together (performance.md item 99). Places only free up meanwhile.
            free = self.recycler.room(self._free_places(loop))
        if self._notified.is_set():
            self._notified.clear()
            loop.others_checked_at = loop.async_checked_at = None
        uncapped = loop.others_due(self.options.poll_interval)
        # The slots this worker kept from its last runs of each capped kind: the claim may take
        # that many more runs of the kind than the fleet has free slots.
        kept = self.slots.offer(loop.caps) if loop.caps else {}
        # Read after the offer: a slot kept since is not free to this claim, nor counted here.
        room = self.slots.room(loop.slot_caps) if loop.slot_caps else {}
        claimed = self._claim(loop, free, uncapped=uncapped, kept=kept)
        if claimed is None:
            loop.slot_bound = frozenset()
            return True
        loop.note_slots(claimed, room)
        started = self._dispatch(claimed) if claimed else 0
        self.recycler.note_started(started)
        if kept:
            # A kept slot that no run of this claim took goes back to the fleet: its kind has
            # nothing runnable for this worker now, and another worker may have.
            self.slots.give_back_unused()
        if claimed:
            if not started:
                # Everything claimed went straight back (slots taken by a racing worker, or
                # over a rate limit): pause rather than claim the same rows again at once, but
                # no longer than until a run handed back over its rate limit is due.
                self._wake.wait(self.rates.until_due(min(self.options.poll_interval, 0.05)))
            elif not loop.backlog and not self.options.burst:
                # It took every runnable row it saw: a claim at once would find none, and would
                # take the core (and the GIL) the runs just handed over need to start. New work
                # notifies or is polled for; a written settle wakes this loop (item 74).
                wait = loop.poll_wait(self.options.poll_interval, uncapped=uncapped)
                self._wait_for_work(loop, self.rates.until_due(wait))
            return True
        return self._after_empty_claim(loop, idle=idle, uncapped=uncapped)

    def _claim(self, loop: _LoopState, free: int, *, uncapped: bool, kept: dict[str, int]
               ) -> Sequence[ClaimedJob] | None:
        """The round's claim statements (one per lane with room, ``claim_lanes``); None when
        none claimed anything and one failed (after the outage backoff has been waited).

        A dead database is an outage to wait out, with backoff, not a crash; the kept slots the
        claim was offered go back (or lapse, if the database is down)."""
        # Jobs limited as a whole are claimed no faster than their buckets give starts.
        caps = {**self.rates.claim_limits(loop.rated), **loop.caps} if loop.rated \
            else loop.caps
        free_sync = min(max(loop.free_sync, 0), free) if loop.async_names else free
        plans = claim_plans(free_sync=free_sync, free_async=min(loop.free_async, free - free_sync),
                            caps=caps, keyed=loop.keyed, kept=kept,
                            async_names=loop.async_names, uncapped=uncapped,
                            async_due=loop.async_due(self.options.poll_interval))
        batches: list[tuple[ClaimPlan, Sequence[ClaimedJob]]] = []
        failure: Exception | None = None
        for plan in plans:
            try:
                batches.append((plan, self._claim_plan(plan)))
            except Exception as exc:
                failure = exc
        if failure is not None:
            delay = self._claim_failed(loop)
            log_event(logger, logging.ERROR, "jobs.worker.claim-failed",
                      worker_id=self.worker_id, error=repr(failure), retry_in=delay)
            if not any(batch for _, batch in batches):
                if kept:
                    # Nothing claimed: the kept slots the claims were offered go back (or lapse,
                    # if the database is down). With runs claimed by the round's other claim they
                    # stay for them; ``_claim_round`` gives back the unused after the dispatch.
                    self.slots.give_back_unused()
                self._wake.wait(delay)
                return None
        claimed = _joined(batches)
        loop.note_async_claims(batches)
        loop.sync_full = any(not plan.is_async and len(batch) >= plan.limit
                             for plan, batch in batches)
        # The scan of the other kinds counts as done only if a claim made it; a claim is full
        # against what it asked for, not against the places of both lanes.
        scanned = any(plan.uncapped and not plan.is_async for plan in plans) and failure is None
        loop.note_claim(claimed, free=sum(plan.limit for plan in plans) or free,
                        uncapped=scanned)
        return claimed

    def _claim_plan(self, plan: ClaimPlan) -> Sequence[ClaimedJob]:
        self.claim_statements += 1
        claimed = self.store.claim(worker_id=self.worker_id, queues=self.options.queues,
                                   limit=plan.limit,
                                   visibility_timeout=self.options.visibility_timeout,
                                   caps=plan.caps, uncapped=plan.uncapped, kept=plan.kept,
                                   keyed=plan.keyed)
        self.jobs_claimed += len(claimed)
        return claimed

    def _claim_failed(self, loop: _LoopState) -> float:
        """Count a failed claim; return the outage backoff."""
        loop.failures += 1
        return min(30.0, 0.2 * 2 ** min(loop.failures, 8))

    def _after_empty_claim(self, loop: _LoopState, *, idle: bool, uncapped: bool) -> bool:
        """Wait for work after a claim that found none; False when a ``burst`` worker is done."""
        if self.options.burst:
            if idle and uncapped:
                return False
            if idle:
                # Only a claim that looked at every kind can tell the queue is drained.
                loop.others_checked_at = None
            else:
                # Runs in flight: wait until a settle is written (it frees slots and makes
                # hand-backs visible, and wakes this loop), or briefly.
                self._wait_for_work(loop, 0.05)
            return True
        wait = loop.poll_wait(self.options.poll_interval, uncapped=uncapped)
        self._wait_for_work(loop, self.rates.until_due(wait))
        return True

    def _wait_for_work(self, loop: _LoopState, timeout: float) -> None:
        """Wait until this loop is woken (new work, a written settle, a slot passed on, a freed
        async place) or ``timeout``. With two lanes a round claims for the lane that has room;
        one that found every thread busy made no claim for the sync kinds, and one whose claim
        for the threads came back full took what they could hold of a backlog: then a thread
        that frees up ends the wait too (performance.md item 91). Before, nothing but the next
        written settle, or the poll, told the loop."""
        if loop.async_names and (loop.free_sync <= 0 or loop.sync_full):
            self.pool.call_on_free()
            if self.pool.free() > 0:
                return
        self._wake.wait(timeout)

    def _dispatch(self, claimed: Sequence[ClaimedJob]) -> int:
        """Start what was claimed; return how many runs started."""
        self._record_lost_attempts(claimed)
        runs: list[Run] = []
        claimed_runs = [Run(job=job, spec=get_job(job.name)) for job in claimed]
        episodes = self._park_episodes([run for run in claimed_runs if run.spec is None])
        for run, olders in zip(claimed_runs, self.runs.others_of_each(claimed_runs),
                               strict=True):
            job = run.job
            for older in olders:
                # This worker claimed its own job again: the older run's lease lapsed (a
                # database outage longer than the timeout). It is another claim now. Its slot is
                # given up too: the new run's slot has the same holder, so renewing or releasing
                # the old one could extend or free the new run's slot while its body runs.
                self.slots.give_up(older)
                older.scope.cancel(LeaseLostError(
                    f"job {job.name!r} (id {job.id}) lost its lease: it was claimed again "
                    "after the lease lapsed"))
            decided = settlement_before_run(run, episodes.get(run.id))
            if decided is not None:
                self.completer.submit(run, decided)
                continue
            runs.append(run)
        runs = self._fit_lanes(self._gate_rates(runs))
        starting = self._take_slots(runs)
        if starting:
            self._telemetry = telemetry_now()
            with self._executing_lock:
                self._executing.update(starting)
            lanes: tuple[list[Run], list[Run]] = ([], [])
            for run in starting:
                lanes[_is_async(run)].append(run)
            self.pool.submit_many(lanes[False])
            self.async_lane.submit_many(lanes[True])
        return len(starting)

    def _fit_lanes(self, runs: list[Run]) -> list[Run]:
        """The runs each lane has a place for (rule 87); the others go back to the queue at
        once, attempts not burned. The claim was split by lane, so only a kind that became
        known during it can be one too many here: a Django task resolved on its first claim,
        claimed among the sync kinds, that turns out ``async def``."""
        places = {False: self.pool.free(), True: self.async_lane.free()}
        fitting: list[Run] = []
        for run in runs:
            lane = _is_async(run)
            if places[lane] > 0:
                places[lane] -= 1
                fitting.append(run)
            else:
                self.completer.submit(run, slot_unavailable_settlement(run))
        return fitting

    def _gate_rates(self, runs: list[Run]) -> list[Run]:
        """The runs whose rate limits let them start now (rule 52); the others go back to the
        queue until their bucket has a start for them, attempts not burned (rule 53)."""
        starting, waiting = self.rates.gate(runs)
        for run, delay in waiting:
            self.completer.submit(run, over_limit_settlement(run, delay))
        if len(starting) == len(runs):
            return runs
        chosen = {id(run) for run in starting}
        return [run for run in runs if id(run) in chosen]

    def _take_slots(self, runs: list[Run]) -> list[Run]:
        """The runs that got the fleet slots their caps need: per capped job, one statement for
        each job's runs (not one per run); per key, one statement for all keys (rule 50). The
        others go back to the queue at once, attempts not burned; the next claim skips a kind
        or key while its slots are all held, so this cannot spin."""
        capped: dict[str, list[Run]] = {}
        keyed: list[Run] = []
        for run in runs:
            if run.spec is None or run.spec.concurrency is None:
                continue
            if run.job.slot_key is not None and run.spec.concurrency_key is not None:
                keyed.append(run)
            else:
                capped.setdefault(run.job.name, []).append(run)
        refused: set[int] = set()
        groups: list[tuple[list[Run], bool]] = [(g, False) for g in capped.values()]
        for group, per_key in [*groups, (keyed, True)]:
            for run in self._acquire_slots(group, per_key=per_key):
                refused.add(id(run))
                self.completer.submit(run, slot_unavailable_settlement(run))
        return [run for run in runs if id(run) not in refused]

    def _park_episodes(self, unknown: list[Run]) -> dict[int, ParkEpisode]:
        """The park episodes the claimed jobs no one here knows are in (rule 12), in one
        statement; none when it fails (each is then parked as a new episode, one row more)."""
        if not unknown:
            return {}
        try:
            return self.store.park_episodes([run.id for run in unknown], UNKNOWN_JOB_PREFIX,
                                            get_settings().UNKNOWN_JOB_TIMEOUT or 0.0)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.park-lookup-failed",
                      worker_id=self.worker_id, error=repr(exc))
            return {}

    def _record_known_jobs(self, generation: int) -> None:
        """Tell the admin which job names this worker knows, when that changed since it said
        so last (a task resolved on its first claim): it flags queued jobs nobody knows."""
        if generation == self._known_generation:
            return
        try:
            self.store.worker_jobs(self.worker_id, list(registered_jobs()))
            self._known_generation = generation
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))

    def _acquire_slots(self, group: list[Run], *, per_key: bool = False) -> list[Run]:
        """Take slots for claimed runs of one capped job (or of every kind capped per key);
        return the runs that got none."""
        if not group:
            return []
        try:
            if per_key:
                return self.slots.acquire_keyed(group)
            return self.slots.acquire_group(group)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.slot-acquire-failed",
                      worker_id=self.worker_id, job_ids=",".join(str(r.id) for r in group),
                      error=repr(exc))
            for run in group:
                run.slot = None
            return list(group)

    def _record_lost_attempts(self, claimed: Sequence[ClaimedJob]) -> None:
        lost = [
            LostAttempt(
                job_id=job.id, attempt=job.attempt - 1, worker_id=job.redelivered_from or "",
                started_at=job.previous_claimed_at, outcome=AttemptOutcome.LEASE_LOST,
                error=f"lease lapsed: worker {job.redelivered_from} stopped heartbeating "
                      f"(crashed, killed or partitioned); re-delivered to {self.worker_id}",
            )
            for job in claimed
            if job.redelivered_from is not None
        ]
        if not lost:
            return
        for attempt in lost:
            log_event(logger, logging.WARNING, "jobs.worker.redelivered", job_id=attempt.job_id,
                      attempt=attempt.attempt + 1, previous_worker=attempt.worker_id,
                      worker_id=self.worker_id)
        try:
            self.store.record_attempts(lost)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.record-attempts-failed",
                      worker_id=self.worker_id, error=repr(exc))

    # -- running --------------------------------------------------------------------------------

    def _execute(self, run: Run) -> None:
        """Run one job on an executor thread and hand its outcome to the completer."""
        try:
            try:
                settlement = run_job(run, store=self.store, worker_id=self.worker_id,
                                     on_started=lambda: self._started(run),
                                     telemetry=self._telemetry)
            except BaseException as exc:
                # run_job turns every outcome into a settlement; this is the guard for a bug in
                # that (or an exception no str() can print): the run must still be settled, or
                # its job stays running forever under this worker's heartbeat.
                settlement = failed_by_worker(run, exc)
            if settlement.outcome != AttemptOutcome.SUCCEEDED:
                # Django keeps a connection whose session setup raised (a connection_created
                # receiver before ours, the backend's init_connection_state) and never sends
                # the signal for it: a run that did not succeed may have left one, so this
                # thread's connections are reset from now on.
                _note_opened()
            self.completer.submit(run, settlement)
        finally:
            with self._executing_lock:
                self._executing.discard(run)
            _reset_connections()

    async def _execute_async(self, run: Run) -> None:
        """Run one ``async def`` job on the async lane's loop and hand its outcome to the
        completer: ``_execute`` for the loop (rule 85)."""
        try:
            try:
                settlement = await arun_job(run, store=self.store, worker_id=self.worker_id,
                                            on_started=lambda: self._started(run),
                                            telemetry=self._telemetry)
            except BaseException as exc:
                settlement = failed_by_worker(run, exc)
            self.completer.submit(run, settlement)
        finally:
            with self._executing_lock:
                self._executing.discard(run)

    def _busy(self) -> int:
        """Runs handed to either lane and not finished."""
        return self.pool.busy + self.async_lane.busy

    def _wait_idle(self, timeout: float) -> bool:
        """Block until neither lane has a run (or ``timeout``); return whether both are idle."""
        deadline = time.monotonic() + timeout
        return (self.pool.wait_idle(timeout)
                and self.async_lane.wait_idle(max(0.0, deadline - time.monotonic())))

    def _started(self, run: Run) -> None:
        """The body starts now: its timeout runs from here, and the ticker keeps it alive."""
        run.mark_started()
        self.runs.add(run)

    # -- stopping -------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Let runs finish within the grace period, cancel the rest, hand back what remains."""
        # No run will be claimed any more: the kept slots go back now, and every slot whose run
        # settles from here on goes straight back, not to be kept for the grace period.
        self.slots.give_back_all()
        if self.recycler.reason is not None:
            self._finish_runs_unless_stopped()
        grace = 0.0 if self._forced.is_set() else self.options.grace_period
        if self._busy():
            hint = {"hint": STOP_NOW} if self._signals_installed and grace > 0 else {}
            log_event(logger, logging.INFO, "jobs.worker.draining", worker_id=self.worker_id,
                      in_flight=self._busy(), grace_period=grace,
                      running=describe_runs(self._executing_snapshot()), **hint)
            self._wait_idle_unless_forced(grace)
        if self._busy():
            self._cancel_running()
        for run in self._executing_snapshot():
            # Handed back on a dead worker's schedule, its slot left to lapse: the body may run on
            # until the process exits, and nobody else may start the job (or take the slot) while
            # it does.
            if self.completer.submit(run, abandonment(run, self.options.visibility_timeout),
                                     abandoned=True):
                log_event(logger, logging.WARNING, "jobs.worker.run-abandoned",
                          worker_id=self.worker_id, job_id=run.id,
                          note="the body ignored its cancellation; handed back after the "
                               "visibility timeout, and the process exit stops it")
        self.completer.stop(timeout=max(10.0, self.options.heartbeat_interval))
        self.ticker.stop()
        if self.gauges is not None:
            self.gauges.stop()
        self.pool.stop(timeout=0.5)
        self.async_lane.stop(timeout=0.5)
        try:
            self.store.worker_stop(self.worker_id)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))

    def _cancel_running(self) -> None:
        """Cancel the runs the grace period (or a second signal) left, and wait ``cancel_wait``
        for them to unwind."""
        log_event(logger, logging.INFO, "jobs.worker.cancelling-runs", worker_id=self.worker_id,
                  in_flight=self._busy(),
                  why="stop forced" if self._forced.is_set() else "grace period over",
                  running=describe_runs(self._executing_snapshot()))
        for run in self._executing_snapshot():
            run.scope.cancel(WorkerShutdownError(
                f"worker {self.worker_id} is stopping; job {run.job.name!r} (id {run.id}) "
                "is handed back to the queue"))
        self._wait_idle(self.options.cancel_wait)

    def _finish_runs_unless_stopped(self) -> None:
        """A recycling worker lets every run finish, however long: nothing asked it to stop,
        and cancelling a run would hand its job back for nothing (rule 76). A SIGTERM meanwhile
        starts the usual grace period from then on."""
        if self._busy():
            log_event(logger, logging.INFO, "jobs.worker.draining", worker_id=self.worker_id,
                      in_flight=self._busy(), reason=self.recycler.reason,
                      running=describe_runs(self._executing_snapshot()))
        report_at = time.monotonic() + REPORT_INTERVAL
        while self._busy() and not self._stopping.is_set():
            report_at = self._report_still_running(report_at, grace_left=None)
            self._wait_idle(0.2)

    def _wait_idle_unless_forced(self, grace: float) -> None:
        """Let the runs finish within ``grace`` seconds. Not the ones that timed out: they were
        cancelled already and get ``cancel_wait`` like every cancelled run, not the grace period
        too (a body overrunning its timeout would hold ``--exit-on-overrun`` up for all of it,
        and finish meanwhile: rule 56)."""
        deadline = time.monotonic() + grace
        report_at = time.monotonic() + REPORT_INTERVAL
        while self._busy() > self._timed_out_executing() and not self._forced.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            report_at = self._report_still_running(report_at, grace_left=remaining)
            self._wait_idle(min(remaining, 0.2))

    def _report_still_running(self, report_at: float, *, grace_left: float | None) -> float:
        """Name the runs still executing once ``report_at`` has come, so a drain that takes
        the whole grace period never looks like a hang; return when to report next."""
        now = time.monotonic()
        if now < report_at:
            return report_at
        fields = {} if grace_left is None else {"grace_left": round(grace_left, 1)}
        log_event(logger, logging.INFO, "jobs.worker.still-running", worker_id=self.worker_id,
                  in_flight=self._busy(), running=describe_runs(self._executing_snapshot(), now),
                  **fields)
        return now + REPORT_INTERVAL

    def _timed_out_executing(self) -> int:
        """How many bodies still executing were cancelled by their timeout (rule 55)."""
        return sum(isinstance(run.scope.reason, JobTimeoutError)
                   for run in self._executing_snapshot())

    def _executing_snapshot(self) -> list[Run]:
        with self._executing_lock:
            return list(self._executing)

    # -- starting -------------------------------------------------------------------------------

    def _start(self) -> bool:
        """Prepare the database and register this worker, waiting for a database that is not
        there yet; return False if the worker was stopped while it waited.

        A database that is down, restarting, full or refusing connections is waited out with
        backoff, one log line per try, for at most ``connect_timeout`` seconds (then one line
        says why): a worker started with its database (a deploy, a reboot) must not crash-loop.
        Tables that do not exist are refused at once: no wait creates them.
        """
        deadline = time.monotonic() + self.options.connect_timeout
        tries = 0
        registered = False
        while True:
            tries += 1
            try:
                unfit = self.store.unfit_settings()
                if unfit is not None:
                    raise JobConfigurationError(unfit)
                # Registering first: a database nobody migrated is refused before the worker
                # changes anything in it (the WAL switch).
                generation = registry_generation()
                self.row.register()
                self._known_generation = generation
                registered = True
                self._prepare_database()
                return True
            except (DatabaseError, InterfaceError) as exc:
                if self.store.schema_missing(exc):
                    raise JobTablesMissingError(unmigrated_message(self.store.alias)) from exc
                delay = min(START_BACKOFF_MAX, START_BACKOFF_FIRST * 2 ** min(tries - 1, 8),
                            deadline - time.monotonic())
                if delay <= 0:
                    if registered:
                        self._mark_stopped()
                    raise DatabaseUnavailableError(self._unavailable_message(exc, tries)) \
                        from exc
                log_event(logger, logging.WARNING, "jobs.worker.database-unavailable",
                          worker_id=self.worker_id, database=self.store.alias, tries=tries,
                          error=_one_line(exc), retry_in=round(delay, 2))
            if self._stopping.wait(delay):
                if registered:
                    self._mark_stopped()
                self._log_stopped()
                return False

    def _start_threads(self) -> None:
        """Start the pool, ticker, completer and listener; if the system refuses a thread, stop
        what started and mark this worker's row stopped, which would otherwise show as a
        silent worker for ever (rule 17)."""
        # The pool stops even the part of it that started before a thread was refused.
        stops: list[Callable[[], None]] = [lambda: self.pool.stop(timeout=0.5)]
        parts: list[tuple[Callable[[], None], Callable[[], None]]] = [
            (self.ticker.start, self.ticker.stop),
            (self.completer.start, lambda: self.completer.stop(timeout=0.0)),
        ]
        if self.listener is not None:
            parts.append((self.listener.start, self.listener.stop))
        if self.scheduler is not None:
            parts.append((self.scheduler.start, self.scheduler.stop))
        self.gauges = self._gauge_sampler()
        if self.gauges is not None:
            parts.append((self.gauges.start, self.gauges.stop))
        try:
            self.pool.start()
            for start, stop in parts:
                start()
                stops.append(stop)
        except RuntimeError as exc:  # "can't start new thread": the process's thread limit
            for stop in reversed(stops):
                stop()
            self._mark_stopped()
            raise JobConfigurationError(
                f"could not start the worker's {self.options.threads} executor threads "
                f"({exc}): lower --threads, or raise the system's limit on threads "
                "(ulimit -u, a container's pids limit)"
            ) from exc

    def _gauge_sampler(self) -> GaugeSampler | None:
        """The gauge sampler of this worker, or None: with no SDK configured nothing samples
        (rule 70), a ``--burst`` worker leaves sampling to the long-lived ones, and a store
        without fleet slots could not keep it to one worker of the fleet (rule 71)."""
        slot_store = self.store.slot_store
        if self.options.burst or slot_store is None or not metrics.enabled():
            return None
        return GaugeSampler(store=self.store, slot_store=slot_store, worker_id=self.worker_id,
                            interval=get_settings().GAUGE_INTERVAL)

    def _mark_stopped(self) -> None:
        """Mark this worker's row stopped (a start that failed after registering), or log why
        not: the row must not read as a worker gone silent (rule 17)."""
        try:
            self.store.worker_stop(self.worker_id)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))

    def _unavailable_message(self, exc: BaseException, tries: int) -> str:
        alias = self.store.alias
        timeout = self.options.connect_timeout
        if not timeout:
            return (f"database {alias!r} is unavailable (not retried: --connect-timeout is 0): "
                    f"{_one_line(exc)}")
        return (f"database {alias!r} is still unavailable after {tries} tries in {timeout:g} s "
                f"(--connect-timeout): {_one_line(exc)}")

    def _prepare_database(self) -> None:
        if self.store.vendor != "sqlite":
            return
        # WAL lets the web process read while the worker writes; it persists in the file. The
        # switch fails with "database is locked" while another connection holds a read
        # transaction: a start-up wait like any other (_start retries it).
        with self.store.cursor() as cur:
            cur.execute("PRAGMA journal_mode")
            mode = cur.fetchone()[0]
            if str(mode).lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
                log_event(logger, logging.INFO, "jobs.worker.sqlite-wal-enabled",
                          worker_id=self.worker_id, previous_mode=mode)

    def _install_signals(self) -> Callable[[], None] | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        self._signals_installed = True
        previous: dict[int, Any] = {}

        def stop(signum: int, force: bool) -> None:
            log_event(logger, logging.INFO, "jobs.worker.signal", worker_id=self.worker_id,
                      signal=signal.Signals(signum).name, force=force)
            self.request_stop(force=force)

        signals = [0]

        def handle(signum: int, frame: FrameType | None) -> None:
            force = signals[0] > 0 or self._stopping.is_set()  # a second signal: stop now
            signals[0] += 1
            # Not here: the handler runs on the main thread between two of its bytecodes, maybe
            # while it holds a lock that request_stop (or logging) needs, and would wait for
            # itself. A thread of its own waits for the main thread to let go instead.
            threading.Thread(target=stop, args=(signum, force), name="ultjobs-signal",
                             daemon=True).start()

        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, handle)

        def restore() -> None:
            self._signals_installed = False
            for signum, handler in previous.items():
                signal.signal(signum, handler)

        return restore


@dataclass
class _LoopState:
    """What the claim loop carries from one round to the next."""

    #: How many free threads are worth waiting for, once there is a backlog (see ``_room``).
    batch: int
    #: The registry generation ``caps`` was read at.
    generation: int = -1
    #: The capped kinds' ``concurrency`` by name.
    caps: dict[str, int] = field(default_factory=dict)
    #: Those of ``caps`` capped per job (not per key): their slots pass from run to run.
    slot_caps: dict[str, int] = field(default_factory=dict)
    #: The kinds of ``slot_caps`` whose last claim took every slot free to them (``note_slots``).
    slot_bound: frozenset[str] = frozenset()
    #: The kinds of ``caps`` capped per key (``concurrency_key``, rule 50).
    keyed: frozenset[str] = frozenset()
    #: The rate-limited kinds (``rate_limit``, rule 52).
    rated: dict[str, JobSpec] = field(default_factory=dict)
    #: The ``async def`` kinds, run on the async lane and claimed apart (rules 85, 87).
    async_names: frozenset[str] = frozenset()
    #: The free threads and free async places ``_room`` found this round.
    free_sync: int = 0
    free_async: int = 0
    #: The round's claim for the threads came back full (two lanes; see ``_wait_for_work``).
    sync_full: bool = False
    #: When a claim of the async kinds alone last found none; None: make one next round.
    async_checked_at: float | None = None

    def async_due(self, poll_interval: float) -> bool:
        """Whether this round claims the async kinds alone (up to the free async places), or
        lets the claim of the free threads take them too (``claim_lanes._async_share``): the
        former after an enqueue notification, an async job claimed, or a poll interval."""
        return (self.async_checked_at is None
                or time.monotonic() - self.async_checked_at >= poll_interval)

    def note_async_claims(self, claims: list[tuple[ClaimPlan, Sequence[ClaimedJob]]]) -> None:
        """Record what the round's claims say of the async kinds' backlog."""
        if any(job.name in self.async_names for _, batch in claims for job in batch):
            self.async_checked_at = None
        elif any(plan.is_async for plan, _ in claims):
            self.async_checked_at = time.monotonic()
    #: Claims that failed in a row: the outage backoff grows with them.
    failures: int = 0
    #: The last claim came back full: there is a backlog.
    backlog: bool = False
    #: When a claim's scan for the uncapped kinds last found nothing; None: scan on the next.
    others_checked_at: float | None = None

    def others_due(self, poll_interval: float) -> bool:
        """Whether the next claim scans the uncapped kinds too.

        With capped kinds registered, that scan walks past every queued run of the capped ones
        on each claim (see performance.md items 6 and 11). After it found nothing it is left
        out until an enqueue notification or one poll interval later: a job of another kind
        that becomes due meanwhile waits at most that, as it would for an idle worker (on
        SQLite, or with --no-listen, an enqueue too waits up to a poll interval)."""
        return (not (self.caps or self.async_names) or self.others_checked_at is None
                or time.monotonic() - self.others_checked_at >= poll_interval)

    def note_claim(self, claimed: Sequence[ClaimedJob], *, free: int, uncapped: bool) -> None:
        """Record what a claim that succeeded says about the next one."""
        self.failures = 0
        self.backlog = len(claimed) >= free
        if (not (self.caps or self.async_names) or _others_left(claimed, full=self.backlog)
                or any(job.name not in self.caps and job.name not in self.async_names
                       for job in claimed)):
            self.others_checked_at = None
        elif uncapped:
            # The other kinds had nothing runnable: their scan found no row, not even one the
            # limit cut. Read from the claim itself, not from its being full: a drain of a
            # capped kind fills every claim (see performance.md item 11).
            self.others_checked_at = time.monotonic()

    def note_slots(self, claimed: Sequence[ClaimedJob], room: Mapping[str, int]) -> None:
        """Record which capped kinds the claim filled to their room (``FleetSlots.room``): each
        may have a backlog that waits for slots, so the next claim waits (2 ms at most) for
        their runs to pass their slots on (``WorkerProcess._room``). The wait for work after a
        claim that was not full stays as it is (item 74): the first slot passed on ends it, and
        with bodies longer than that wait a claim at once would find every slot still held.
        Per job only: a per-key cap's room is per key."""
        taken = Counter(job.name for job in claimed if job.name in room)
        self.slot_bound = frozenset(kind for kind, count in taken.items() if count >= room[kind])

    def poll_wait(self, poll_interval: float, *, uncapped: bool) -> float:
        """How long to wait for work after a claim that found none: a poll interval, but not
        past the moment the other kinds are due to be looked at again."""
        if uncapped or self.others_checked_at is None:
            return poll_interval
        return min(poll_interval,
                   max(0.0, self.others_checked_at + poll_interval - time.monotonic()))


def _others_left(claimed: Sequence[ClaimedJob], *, full: bool) -> bool:
    """Whether a claim left runnable jobs of uncapped kinds behind (``ClaimBatch.others_left``).

    A store that does not say (``None``), or a store of one's own whose ``claim`` returns a
    plain list, has a full claim read as "maybe crowded out": the worker goes on scanning rather
    than risk an outranked job waiting a poll interval."""
    others_left = claimed.others_left if isinstance(claimed, ClaimBatch) else None
    return full if others_left is None else others_left


def _joined(claims: list[tuple[ClaimPlan, Sequence[ClaimedJob]]]) -> Sequence[ClaimedJob]:
    """The jobs of a round's claims as one batch. It left runnable jobs of uncapped kinds
    behind if one of its claims did; a claim that does not say (a plain list, or None) counts
    as having done so when it came back full, as ``_others_left`` reads a lone claim."""
    if len(claims) == 1:
        return claims[0][1]
    left = False
    for plan, batch in claims:
        said = batch.others_left if isinstance(batch, ClaimBatch) else None
        left = left or (len(batch) >= plan.limit if said is None else said)
    return ClaimBatch([job for _, batch in claims for job in batch], others_left=left)


def _is_async(run: Run) -> bool:
    """Whether ``run`` goes to the async lane: its body is ``async def`` (rule 85)."""
    return run.spec is not None and run.spec.is_coroutine


def _one_line(exc: BaseException) -> str:
    """The driver's message on one line (psycopg adds a hint on a second)."""
    return " ".join(str(exc).split()) or type(exc).__name__


class _Opened(threading.local):
    """Whether this thread has opened a database connection: Django sends ``connection_created``
    on the thread that connects, and a thread that never did has nothing to reset."""

    any = False


_opened = _Opened()


def _note_opened(**kwargs: Any) -> None:
    _opened.any = True


connection_created.connect(_note_opened, weak=False, dispatch_uid="django_ultjobs.worker.opened")


def _reset_connections() -> None:
    """Leave an executor thread's connections as a new run expects them.

    A body that left a transaction open would otherwise leak it into the next job on this
    thread; a connection that broke is closed so the next run reconnects. Connections obey
    CONN_MAX_AGE exactly as Django's request handling does.
    """
    if not _opened.any:
        # Asking Django which connections the thread has costs 1.6 us when it has none (an
        # exception raised and caught for each alias), most runs' case: bodies that never touch
        # the database (performance.md, item 103).
        return
    for conn in connections.all(initialized_only=True):
        try:
            if conn.connection is not None and not conn.in_atomic_block \
                    and not conn.get_autocommit():
                conn.rollback()
                conn.set_autocommit(True)
            conn.close_if_unusable_or_obsolete()
        except Exception:
            conn.close()
