"""Fleet slots: ``@job(concurrency=N)`` held fleet-wide as lease rows (rules 5-9).

Apart from the claim loop because its question is "may I start this one?"; which run holds which
slot, and who gives it back, is bookkeeping of its own. A slot is taken at claim time and renewed
on the heartbeat's tick (one clock for "I own the job" and "I own the slot").

A worker KEEPS the slot of a run whose settle is written, for the next run of the same kind it
claims, and gives it back to the fleet only when its next claim brought no run to use it. Taking
a slot for every run and handing it back with every settle wrote two lease rows per job and cost
a capped drain 25-37 % of its throughput; a kept slot costs nothing until its kind runs dry.
The cap still holds: a slot is held by one run at a time, from its claim until its settle is
written, and between runs by the worker alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..exceptions import JobSlotLostError
from ..logs import log_event
from ..registry import JobSpec
from ..store import HeldLease, LeaseStore
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")


def lease_key(job_name: str) -> str:
    """The lease key of a job's fleet slots."""
    return f"job:{job_name}"


@dataclass(eq=False)
class _Kept:
    """A slot this worker holds between runs of its kind."""

    kind: str
    lease: HeldLease
    #: The claim round that offered it (0: not offered yet); see ``offer``.
    offered: int = 0


class FleetSlots:
    """Acquire, keep, renew and give back the fleet slots of this worker's runs."""

    def __init__(self, leases: LeaseStore | None, worker_id: str, ttl: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.leases = leases
        self.worker_id = worker_id
        # The worker's visibility timeout: a SIGKILLed worker gives its slot back on exactly the
        # schedule the queue gives its job back. A longer TTL would leave concurrency=1
        # unfillable while the job it guarded is already re-delivered.
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._kept: list[_Kept] = []
        self._round = 0
        # When the statement that last set each held slot's expiry was SENT (monotonic): the
        # slot is held until at least then + ttl, whatever the two clocks say. A kept slot is
        # handed to a new run only well inside that, so a run never starts on a slot that may
        # already have lapsed while renewals failed.
        self._confirmed: dict[tuple[str, int], float] = {}

    # -- taking ---------------------------------------------------------------------------------

    def acquire(self, run: Run) -> bool:
        """Take a slot for one run if its job declares ``concurrency``; False when all are held."""
        return not self.acquire_group([run])

    def acquire_group(self, runs: Sequence[Run]) -> list[Run]:
        """Give claimed runs of ONE capped job a slot each: a kept one first, else a new one, all
        new ones in one statement; return the runs that got none (the caller hands them back).

        A job without ``concurrency`` never touches the lease table (rule 5). One statement per
        kind per claim, not per run: taking 64 slots one round trip at a time cost a capped drain
        64 % of its throughput.
        """
        if not runs:
            return []
        spec: JobSpec | None = runs[0].spec
        if spec is None or spec.concurrency is None:
            return []
        if self.leases is None:
            # Unreachable through the worker, which refuses to start without a lease store
            # (rule 10); kept as a guard so a cap can never silently hold per process.
            raise RuntimeError(f"job {spec.name!r} declares concurrency but has no lease store")
        waiting = list(runs)
        reused: list[_Kept] = []
        with self._lock:
            fresh_after = self._clock() - self.ttl / 2
            for kept in [k for k in self._kept if k.kind == spec.name]:
                if not waiting:
                    break
                if self._confirmed.get(_slot(kept.lease), float("-inf")) < fresh_after:
                    continue  # left for offer() to give back: it may have lapsed
                self._kept.remove(kept)
                reused.append(kept)
                waiting.pop(0).lease = kept.lease
        if not waiting:
            return []
        holders = {f"{self.worker_id}:{run.id}": run for run in waiting}
        sent = self._clock()
        try:
            held = self.leases.acquire_many(lease_key(spec.name), spec.concurrency, self.ttl,
                                            list(holders))
        except Exception:
            # The caller hands every run of the group back; the kept slots stay kept.
            with self._lock:
                self._kept.extend(reused)
            for run in runs:
                run.lease = None
            raise
        missing = []
        with self._lock:
            for holder, run in holders.items():
                run.lease = held.get(holder)
                if run.lease is None:
                    missing.append(run)
                else:
                    self._confirmed[_slot(run.lease)] = sent
        return missing

    # -- keeping and giving back ----------------------------------------------------------------

    def keep(self, runs: Sequence[Run]) -> None:
        """Keep the slots of runs whose settles are written (or given up) for the next runs of
        their kinds. Called only then: a slot is held for as long as its run's job is (rule 6).
        """
        with self._lock:
            for run in runs:
                lease = run.lease
                if lease is None:
                    continue
                if run.slot_lost or run.abandoned:
                    # A lost slot is somebody else's now; an abandoned run's body may still be
                    # running, so its slot is left to lapse on its TTL (never renewed again).
                    self._confirmed.pop(_slot(lease), None)
                    continue
                self._kept.append(_Kept(kind=run.job.name, lease=lease))

    def offer(self) -> dict[str, int]:
        """The kept slots per kind a claim about to be sent may fill besides the fleet's free
        ones; ``give_back_unused`` after the claim returns those no run took."""
        stale: list[HeldLease] = []
        offered: dict[str, int] = {}
        with self._lock:
            self._round += 1
            fresh_after = self._clock() - self.ttl / 2
            for kept in list(self._kept):
                if self._confirmed.get(_slot(kept.lease), float("-inf")) < fresh_after:
                    self._kept.remove(kept)
                    stale.append(kept.lease)
                    continue
                kept.offered = self._round
                offered[kept.kind] = offered.get(kept.kind, 0) + 1
        self._release(stale)
        return offered

    def give_back_unused(self) -> None:
        """Give back to the fleet the kept slots the last ``offer`` made and no claimed run
        took: their kind has nothing runnable for this worker now, and another worker may.
        Slots kept since that offer stay for the next claim."""
        with self._lock:
            unused = [k for k in self._kept if k.offered == self._round]
            for kept in unused:
                self._kept.remove(kept)
        self._release([k.lease for k in unused])

    def give_back_all(self) -> None:
        """Give back every kept slot (the worker is stopping)."""
        with self._lock:
            kept, self._kept = self._kept, []
        self._release([k.lease for k in kept])

    @property
    def kept(self) -> int:
        """How many slots this worker holds between runs."""
        with self._lock:
            return len(self._kept)

    def _release(self, held: Sequence[HeldLease]) -> None:
        """Hand slots back; never fails (rule 9).

        An error is logged and swallowed: the slot expires on its own TTL (it is no longer
        renewed), and bookkeeping must never stop the worker claiming.
        """
        if not held or self.leases is None:
            return
        with self._lock:
            for lease in held:
                self._confirmed.pop(_slot(lease), None)
        try:
            self.leases.release_many(held)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.lease-release-failed",
                      worker_id=self.worker_id, slots=",".join(
                          f"{lease.key}[{lease.slot}]" for lease in held),
                      error=repr(exc))

    # -- renewing -------------------------------------------------------------------------------

    def renew(self, runs: Sequence[Run]) -> None:
        """Renew every held slot, the runs' and the kept ones, in one statement; a slot missing
        from the answer is lost.

        A renewal that RAISES is not a lost slot (rule 2's reasoning: there is a TTL behind it and
        the tick gets several tries inside it), so the error is logged and the next tick retries.
        """
        busy = [r for r in runs if r.lease is not None and not r.slot_lost]
        with self._lock:
            kept = list(self._kept)
        held = [r.lease for r in busy if r.lease is not None] + [k.lease for k in kept]
        if not held or self.leases is None:
            return
        sent = self._clock()
        try:
            renewed = self.leases.renew_many(held, self.ttl)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.slot-renew-failed",
                      worker_id=self.worker_id, slots=len(held), error=repr(exc))
            return
        lost = {_ident(lease) for lease in held if _slot(lease) not in renewed}
        with self._lock:
            for lease in held:
                if _slot(lease) in renewed:
                    self._confirmed[_slot(lease)] = sent
            # Lost between runs (or kept by a settle written while this renewal ran): never
            # handed to a run, never renewed again.
            self._kept = [k for k in self._kept if _ident(k.lease) not in lost]
        for run in busy:
            lease = run.lease
            assert lease is not None
            if (lease.key, lease.slot) in renewed:
                continue
            # An explicit "no": another holder took the slot, or it lapsed (rule 7). Stop
            # renewing it — extending a slot this worker no longer holds would push out
            # somebody else's expiry — and cancel the run (rule 8).
            run.slot_lost = True
            if run.settling:
                # The body is over: there is nothing to cancel, and the slot is not kept.
                continue
            log_event(logger, logging.ERROR, "jobs.worker.slot-lost",
                      worker_id=self.worker_id, job_id=run.id, lease_key=lease.key,
                      slot=lease.slot)
            run.scope.cancel(JobSlotLostError(
                job=run.job.name, job_id=run.id, key=lease.key, slot=lease.slot))


def _slot(lease: HeldLease) -> tuple[str, int]:
    return (lease.key, lease.slot)


def _ident(lease: HeldLease) -> tuple[str, int, str]:
    return (lease.key, lease.slot, lease.holder)
