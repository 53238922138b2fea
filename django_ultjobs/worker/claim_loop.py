"""The claim loop: each round decides how many runs to claim, claims them, and waits.

A round claims no more runs than the worker can start now (free threads and async places, never
a prefetch), in one statement per lane with room (``claim_lanes``), hands what it got to the
dispatcher, then waits for a free place, a written settle or new work. Between rounds it keeps
what the last claim said (``LoopState``): whether it came back full (a backlog), and the failed
claims in a row (the outage backoff).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from ..core.clocks import lease_clock
from ..jobs.registry import registered_jobs, registry_generation
from ..observability.logs import log_event
from ..store import ClaimedJob, JobStore
from .claim_lanes import ClaimPlan, claim_plans
from .completer import Completer
from .dispatch import Dispatcher
from .fleet_slots import FleetSlots
from .loop_state import LoopState
from .options import WorkerOptions
from .rate_gate import RateGate
from .recycle import Recycler
from .vitals import Vitals, outage_backoff
from .worker_row import WorkerRow

logger = logging.getLogger("django_ultjobs.worker")

#: Finished runs whose settles are not written yet, beyond which the claim loop stops claiming:
#: a completer that falls behind must slow claiming down, not let unsettled runs pile up.
MAX_UNSETTLED = 1000
#: ...and beyond this many bytes of their outcomes (results, errors) held in memory
#: (rule 31 (bounded-outcomes)).
MAX_UNSETTLED_BYTES = 128 * 1024 * 1024


class ClaimLoop:
    """Claim runs as places free up, until stopped (or, with ``burst``, until none is left)."""

    def __init__(self, *, store: JobStore, options: WorkerOptions, dispatcher: Dispatcher,
                 slots: FleetSlots, completer: Completer, rates: RateGate, recycler: Recycler,
                 row: WorkerRow, stopping: threading.Event, vitals: Vitals | None = None,
                 notifies: bool = False) -> None:
        self.store = store
        self.options = options
        self.worker_id = options.worker_id
        self.dispatcher = dispatcher
        self.pool = dispatcher.pool
        self.async_lane = dispatcher.async_lane
        self.slots = slots
        self.completer = completer
        self.rates = rates
        self.recycler = recycler
        self.row = row
        self._stopping = stopping
        #: Told of each round, for the liveness probe (rule 121 (probe-alive)).
        self.vitals = vitals
        self._wake = threading.Event()
        #: Whether an enqueue, and the release of a dependent, notify this loop (PostgreSQL,
        #: listening): only then may a round leave out the threads' claim after it found nothing
        #: (``_sync_due``).
        self.notifies = notifies
        #: Notifications received, counted so a round can tell whether one came since it looked.
        self._notifications = 0
        #: Claim statements sent, reported when the worker stops: a count far above the runs
        #: settled is a loop that spins (an outage, a completer behind, capped kinds held).
        self.claim_statements = 0
        #: Jobs those statements claimed (each run of a job once, a retry again).
        self.jobs_claimed = 0

    def wake(self) -> None:
        """Claim now instead of at the next poll (a settle was written, the worker stops)."""
        self._wake.set()

    def notified(self) -> None:
        """A job was enqueued or released (LISTEN/NOTIFY): claim now, for both lanes."""
        self._notifications += 1
        self._wake.set()

    def _unsettled_full(self) -> bool:
        """Whether the outcomes waiting for the completer are too many, or too big, to claim
        more runs: memory stays bounded however large the results (rule 31 (bounded-outcomes))."""
        return (self.completer.pending >= MAX_UNSETTLED
                or self.completer.pending_bytes >= MAX_UNSETTLED_BYTES)

    def run(self) -> None:
        """Claim and start jobs until stopped (or, with ``burst``, until none is runnable).

        Each round: release the kept slots that waited too long, decide how many to claim
        (``room``), claim them in one statement per lane (``claim``), start them
        (``Dispatcher.dispatch``), then wait for a free place, a written settle or new work
        (``_after_empty_claim``)."""
        loop = LoopState()
        try:
            self._rounds(loop)
        finally:
            if self.vitals is not None:
                self.vitals.claims_done()

    def _rounds(self, loop: LoopState) -> None:
        while not self._stopping.is_set():
            if self.vitals is not None:
                # The longest this round may wait: a poll interval, or the outage backoff
                # should its claim fail.
                self.vitals.claim_round(max(self.options.poll_interval,
                                            outage_backoff(loop.failures + 1)))
            self._refresh_caps(loop)
            # Slots kept from settled runs that no claim has used for a poll interval: this loop
            # may be waiting for a free thread or for the completer, and other workers for them.
            self.slots.release_idle(self.options.poll_interval)
            if self.recycler.reached():
                self._log_recycling()
                return
            free = self.recycler.room(self.room(loop))
            if free and not self.round(loop, free):
                return

    def _log_recycling(self) -> None:
        log_event(logger, logging.INFO, "jobs.worker.recycling", worker_id=self.worker_id,
                  reason=self.recycler.reason, runs=self.recycler.started,
                  max_jobs=self.options.max_jobs, memory_mb=self.recycler.memory_mb,
                  max_memory=self.options.max_memory, in_flight=self.dispatcher.busy())

    def _refresh_caps(self, loop: LoopState) -> None:
        """Bring a job registered after start (a task imported on its first claim) into the
        caps, and into this worker's row, from this round on."""
        generation = registry_generation()
        if loop.generation != generation:
            loop.generation = generation
            jobs = registered_jobs()
            loop.caps = {n: s.concurrency for n, s in jobs.items() if s.concurrency}
            loop.keyed = frozenset(n for n in loop.caps if jobs[n].concurrency_key is not None)
            loop.rated = {n: s for n, s in jobs.items() if s.rate is not None}
            loop.async_names = frozenset(n for n, s in jobs.items() if s.is_coroutine)
        # Outside the branch above: a write that failed is tried again next round.
        self.row.record_jobs(loop.generation)

    def room(self, loop: LoopState) -> int:
        """How many runs to claim now: the free threads (and free async places,
        rule 87 (no-claim-beyond-free-places)); 0, after a wait, when no place is free or the
        outcomes waiting for the completer are too many or too big (rule 31 (bounded-outcomes))."""
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
        return free

    def _free_places(self, loop: LoopState) -> int:
        """The free places of the lanes this worker runs, noted in ``loop`` for the claim."""
        loop.free_sync = self.pool.free()
        if not loop.async_names:
            return loop.free_sync
        loop.free_async = self.async_lane.free()
        return max(0, loop.free_sync) + max(0, loop.free_async)

    def _lanes_room(self, loop: LoopState) -> int:
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

    def round(self, loop: LoopState, free: int) -> bool:
        """Claim up to ``free`` runs, start them and wait as the answer says; False when a
        ``burst`` worker has drained its queues."""
        # Read before the claim: only if nothing was in flight while the claim looked can an
        # empty answer mean "nothing is runnable now" (a hand-back written meanwhile would
        # otherwise be missed by --burst).
        idle = self.dispatcher.busy() == 0 and self.completer.pending == 0
        self._wake.clear()
        if loop.async_names:
            # Read again after the clear: an async place freed since ``room`` read the lanes
            # set the wake-up this clear dropped, and a round that saw no room in that lane
            # would wait for the next place to free, a whole body's time when the lane's runs
            # end together. Places only free up meanwhile.
            free = self.recycler.room(self._free_places(loop))
        # The slots this worker kept from its last runs of each capped kind: the claim may take
        # that many more runs of the kind than the fleet has free slots.
        kept = self.slots.offer(loop.caps) if loop.caps else {}
        # The leases the claim sets hold from no sooner than its sending.
        sent = lease_clock()
        claimed = self.claim(loop, free, kept=kept)
        if claimed is None:
            return True
        started = self.dispatcher.dispatch(claimed, leased_at=sent) if claimed else 0
        self.recycler.note_started(started)
        if kept:
            # A kept slot that no run of this claim took goes back to the fleet: its kind has
            # nothing runnable for this worker now, and another worker may have.
            self.slots.release_unused()
        if claimed:
            if not started:
                # Everything claimed went straight back (slots taken by a racing worker, or
                # over a rate limit): pause rather than claim the same rows again at once, but
                # no longer than until a run handed back over its rate limit is due.
                self._wake.wait(self.rates.until_due(min(self.options.poll_interval, 0.05)))
            elif not loop.backlog and not self.options.burst:
                # It took every runnable row it saw: a claim at once would find none, and would
                # take the core (and the GIL) the runs just handed over need to start. New work
                # notifies or is polled for; a written settle wakes this loop.
                self._wait_for_work(loop, self.rates.until_due(self.options.poll_interval))
            return True
        if self.options.burst and loop.sync_left_out:
            # A burst worker ends only on a round that looked at every kind: the next one does.
            loop.sync_quiet = None
            return True
        return self._after_empty_claim(loop, idle=idle)

    def claim(self, loop: LoopState, free: int, *, kept: dict[str, int]
              ) -> Sequence[ClaimedJob] | None:
        """The round's claim statements (one per lane with room, ``claim_lanes``); None when
        none claimed anything and one failed (after the outage backoff has been waited).

        A dead database is an outage to wait out, with backoff, not a crash; the kept slots the
        claim was offered go back (or lapse, if the database is down)."""
        # Jobs limited as a whole are claimed no faster than their buckets give starts.
        caps = {**self.rates.claim_limits(loop.rated), **loop.caps} if loop.rated \
            else loop.caps
        free_sync = min(max(loop.free_sync, 0), free) if loop.async_names else free
        free_async = min(loop.free_async, free - free_sync)
        loop.sync_left_out = bool(loop.async_names) and not self._sync_due(loop)
        if loop.sync_left_out:
            free_sync = 0
        # Counted before the claims go out: a notification that comes while they run may be of
        # a job they did not see.
        seen = (self.completer.sync_moves, self._notifications)
        plans = claim_plans(free_sync=free_sync, free_async=free_async, caps=caps,
                            keyed=loop.keyed, kept=kept, async_names=loop.async_names)
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
                    # stay for them; ``round`` releases the unused after the dispatch.
                    self.slots.release_unused()
                self._wake.wait(delay)
                return None
        claimed = [job for _, batch in batches for job in batch]
        loop.sync_full = any(not plan.is_async and len(batch) >= plan.limit
                             for plan, batch in batches)
        if loop.async_names:
            self._note_sync_claim(loop, batches, seen)
        # A claim is full against what it asked for, not against the places of both lanes.
        loop.failures = 0
        loop.backlog = len(claimed) >= (sum(plan.limit for plan in plans) or free)
        return claimed

    def _sync_due(self, loop: LoopState) -> bool:
        """Whether this round sends the threads' claim beside the async kinds' one.

        That claim scans every kind but the async ones, walking past each queued async row, so
        beside a backlog of async jobs it costs more than the run it may find. After it found
        nothing while the async lane had a backlog, it is left out until an enqueue or a
        released dependent is notified, a run not on the async lane passes its slot on or has
        its settle written (a hand-back), or a poll interval passes (capped at the rate gate's
        next due run): what an idle worker waits too."""
        if loop.sync_quiet is None:
            return True
        until, moves, notifications = loop.sync_quiet
        if (time.monotonic() >= until or moves != self.completer.sync_moves
                or notifications != self._notifications):
            loop.sync_quiet = None
            return True
        return False

    def _note_sync_claim(self, loop: LoopState,
                         batches: list[tuple[ClaimPlan, Sequence[ClaimedJob]]],
                         seen: tuple[int, int]) -> None:
        """Rest the threads' claim (``_sync_due``) when it found nothing while the async lane
        has a backlog (its claim came back full, or it had no room to claim), where a
        notification would end the rest."""
        found = any(batch for plan, batch in batches if not plan.is_async)
        sent = any(not plan.is_async for plan, _ in batches)
        async_short = any(plan.is_async and len(batch) < plan.limit for plan, batch in batches)
        if found or not self.notifies or async_short:
            loop.sync_quiet = None
        elif sent:
            loop.sync_quiet = (
                time.monotonic() + self.rates.until_due(self.options.poll_interval), *seen)

    def _claim_plan(self, plan: ClaimPlan) -> Sequence[ClaimedJob]:
        self.claim_statements += 1
        claimed = self.store.claim(worker_id=self.worker_id, queues=self.options.queues,
                                   limit=plan.limit,
                                   visibility_timeout=self.options.visibility_timeout,
                                   caps=plan.caps, uncapped=plan.uncapped, kept=plan.kept,
                                   keyed=plan.keyed)
        self.jobs_claimed += len(claimed)
        return claimed

    def _claim_failed(self, loop: LoopState) -> float:
        """Count a failed claim; return the outage backoff."""
        loop.failures += 1
        return outage_backoff(loop.failures)

    def _after_empty_claim(self, loop: LoopState, *, idle: bool) -> bool:
        """Wait for work after a claim that found none; False when a ``burst`` worker is done."""
        if self.options.burst:
            if idle:
                return False
            # Runs in flight: wait until a settle is written (it frees slots and makes
            # hand-backs visible, and wakes this loop), or briefly.
            self._wait_for_work(loop, 0.05)
            return True
        self._wait_for_work(loop, self.rates.until_due(self.options.poll_interval))
        return True

    def _wait_for_work(self, loop: LoopState, timeout: float) -> None:
        """Wait until this loop is woken (new work, a written settle, a slot passed on, a freed
        async place) or ``timeout``. With two lanes a round claims for the lane that has room;
        one that found every thread busy made no claim for the sync kinds, and one whose claim
        for the threads came back full took what they could hold of a backlog: then a thread
        that frees up ends the wait too; otherwise nothing but the next written settle, or the
        poll, would tell the loop."""
        if loop.async_names and (loop.free_sync <= 0 or loop.sync_full):
            self.pool.call_on_free()
            if self.pool.free() > 0:
                return
        if loop.sync_quiet is not None:
            # Not past the rest's end: a sync job due by then waits no longer than for an idle
            # worker's poll.
            timeout = min(timeout, max(0.0, loop.sync_quiet[0] - time.monotonic()))
        self._wake.wait(timeout)
