"""Dispatch: the claimed runs go to their lanes (threads, the event loop) with their slots.

What was claimed is sorted here: a run that must not start is settled at once (an unknown job
parked, an expired one cancelled, one over its rate limit or without a fleet slot handed back),
the rest are handed to the executor pool or the async lane, and each run's outcome goes to the
completer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..conf import get_settings
from ..core.clocks import lease_clock
from ..exceptions import LeaseLostError
from ..jobs.registry import get_job
from ..models import AttemptOutcome
from ..observability.logs import log_event
from ..observability.metrics import record_wait_on
from ..store import ClaimedJob, JobStore, LostAttempt, ParkEpisode, Settlement
from .async_executor import arun_job
from .async_lane import AsyncLane
from .completer import Completer
from .deadlines import Deadlines
from .executor import run_job
from .fleet_slots import FleetSlots
from .options import WorkerOptions
from .pool import ExecutorPool
from .process_pool import ProcessPool
from .rate_gate import RateGate, over_limit_settlement
from .runs import Run, RunsInFlight
from .settlements import (
    UNKNOWN_JOB_PREFIX,
    failed_by_worker,
    settlement_before_run,
    slot_unavailable_settlement,
)
from .telemetry import Telemetry, telemetry_now
from .thread_connections import note_opened, reset_connections

logger = logging.getLogger("django_ultjobs.worker")


class Dispatcher:
    """Start claimed runs on the lane each belongs to, and hand every outcome to the completer."""

    def __init__(self, *, store: JobStore, options: WorkerOptions, runs: RunsInFlight,
                 slots: FleetSlots, completer: Completer, rates: RateGate,
                 on_free: Callable[[], None], deadlines: Deadlines) -> None:
        self.store = store
        self.worker_id = options.worker_id
        self.runs = runs
        self.slots = slots
        self.completer = completer
        self.rates = rates
        #: The timer that cancels each run at its deadline (rule 130 (timeout-on-time)): told
        #: when a body starts and when its outcome goes to the completer.
        self.deadlines = deadlines
        self.pool: ExecutorPool | ProcessPool
        if options.pool == "process":
            # Sync bodies in child processes the worker can kill (rule 140 (hard-stop)).
            self.pool = ProcessPool(options, slots=slots, started=self._started_in_child,
                                    settled=self._settled, on_free=on_free)
        else:
            self.pool = ExecutorPool(options.threads, self._execute, on_free=on_free)
        #: ``async def`` bodies run on one event loop, apart from the threads
        #: (rule 85 (one-event-loop)).
        self.async_lane = AsyncLane(options.async_concurrency, self._execute_async,
                                    on_free=on_free)
        self._executing: set[Run] = set()
        self._executing_lock = threading.Lock()
        # The providers the runs report to, looked up again for each claim's runs (see
        # telemetry.py: looked up per run, they were a large share of a short run's Python).
        self._telemetry: Telemetry = telemetry_now()

    def dispatch(self, claimed: Sequence[ClaimedJob], *, leased_at: float | None = None) -> int:
        """Start what was claimed; return how many runs started. ``leased_at``: when the claim
        was sent (``lease_clock``; None: now)."""
        self._record_lost_attempts(claimed)
        runs: list[Run] = []
        sent = lease_clock() if leased_at is None else leased_at
        claimed_runs = [Run(job=job, spec=get_job(job.name), leased_at=sent) for job in claimed]
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
        """The runs each lane has a place for (rule 87 (no-claim-beyond-free-places)); the others go
        back to the queue at once, attempts not burned. The claim was split by lane, so only a kind
        that became known during it can be one too many here: a Django task resolved on its first
        claim, claimed among the sync kinds, that turns out ``async def``."""
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
        """The runs whose rate limits let them start now (rule 52 (fleet-rate-limit)); the others go
        back to the queue until their bucket has a start for them, attempts not burned
        (rule 53 (rate-wait-unburned))."""
        starting, waiting = self.rates.gate(runs)
        for run, delay in waiting:
            self.completer.submit(run, over_limit_settlement(run, delay))
        if len(starting) == len(runs):
            return runs
        chosen = {id(run) for run in starting}
        return [run for run in runs if id(run) in chosen]

    def _take_slots(self, runs: list[Run]) -> list[Run]:
        """The runs that got the fleet slots their caps need: per capped job, one statement for
        each job's runs (not one per run); per key, one statement for all keys
        (rule 50 (per-key-cap)). The others go back to the queue at once, attempts not burned; the
        next claim skips a kind or key while its slots are all held, so this cannot spin."""
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
        """The park episodes the claimed jobs no one here knows are in
        (rule 12 (unknown-job-parked)), in one statement; none when it fails (each is then parked as
        a new episode, one row more)."""
        if not unknown:
            return {}
        try:
            return self.store.park_episodes([run.id for run in unknown], UNKNOWN_JOB_PREFIX,
                                            get_settings().UNKNOWN_JOB_TIMEOUT or 0.0)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.park-lookup-failed",
                      worker_id=self.worker_id, error=repr(exc))
            return {}

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
                note_opened()
            self.completer.submit(run, settlement)
        finally:
            self._let_go(run)
            reset_connections()

    def _settled(self, run: Run, settlement: Settlement) -> None:
        """A run of the process pool is over (its child's outcome, or the one its child's end
        decided): to the completer, as ``_execute`` does for a thread's."""
        try:
            self.completer.submit(run, settlement)
        finally:
            self._let_go(run)

    def _let_go(self, run: Run) -> None:
        self.deadlines.forget(run)
        with self._executing_lock:
            self._executing.discard(run)

    def _started_in_child(self, run: Run, pid: int) -> None:
        """A child process starts ``run``'s body: as ``_started``, its runner named by the pid,
        and the wait from its due time recorded here (the child records no metrics)."""
        self._started(run)
        run.thread = f"child {pid}"
        job, instruments = run.job, self._telemetry.instruments
        if job.due_at is not None and instruments is not None:
            record_wait_on(instruments, job.name, job.queue,
                           (job.claimed_at - job.due_at).total_seconds())

    async def _execute_async(self, run: Run) -> None:
        """Run one ``async def`` job on the async lane's loop and hand its outcome to the
        completer: ``_execute`` for the loop (rule 85 (one-event-loop))."""
        try:
            try:
                settlement = await arun_job(run, store=self.store, worker_id=self.worker_id,
                                            on_started=lambda: self._started(run),
                                            telemetry=self._telemetry)
            except BaseException as exc:
                settlement = failed_by_worker(run, exc)
            self.completer.submit(run, settlement)
        finally:
            self.deadlines.forget(run)
            with self._executing_lock:
                self._executing.discard(run)

    def busy(self) -> int:
        """Runs handed to either lane and not finished."""
        return self.pool.busy + self.async_lane.busy

    def wait_idle(self, timeout: float) -> bool:
        """Block until neither lane has a run (or ``timeout``); return whether both are idle."""
        deadline = time.monotonic() + timeout
        return (self.pool.wait_idle(timeout)
                and self.async_lane.wait_idle(max(0.0, deadline - time.monotonic())))

    def _started(self, run: Run) -> None:
        """The body starts now: its timeout runs from here, and the heartbeat keeps it alive."""
        run.mark_started()
        self.runs.add(run)
        self.deadlines.watch(run)

    def executing(self) -> list[Run]:
        """The runs whose bodies are executing now (a snapshot)."""
        with self._executing_lock:
            return list(self._executing)


def _is_async(run: Run) -> bool:
    """Whether ``run`` goes to the async lane: its body is ``async def``
    (rule 85 (one-event-loop))."""
    return run.spec is not None and run.spec.is_coroutine
