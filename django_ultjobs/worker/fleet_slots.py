"""Fleet slots: ``@job(concurrency=N)`` held fleet-wide as lease rows (rules 5-9).

Apart from the claim loop because its question is "may I start this one?"; which run holds which
slot, and who gives it back, is bookkeeping of its own. A slot is taken at claim time, renewed on
the heartbeat's tick (one clock for "I own the job" and "I own the slot"), and released with the
run's settle (in its statement; apart from it, after it, only when that statement failed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..exceptions import JobSlotLostError
from ..logs import log_event
from ..registry import JobSpec
from ..store import HeldLease, LeaseStore
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")


def lease_key(job_name: str) -> str:
    """The lease key of a job's fleet slots."""
    return f"job:{job_name}"


class FleetSlots:
    """Acquire, renew and release the fleet slots of this worker's runs."""

    def __init__(self, leases: LeaseStore | None, worker_id: str, ttl: float) -> None:
        self.leases = leases
        self.worker_id = worker_id
        # The worker's visibility timeout: a SIGKILLed worker gives its slot back on exactly the
        # schedule the queue gives its job back. A longer TTL would leave concurrency=1
        # unfillable while the job it guarded is already re-delivered.
        self.ttl = ttl

    def acquire(self, run: Run) -> bool:
        """Take a slot for one run if its job declares ``concurrency``; False when all are held."""
        spec: JobSpec | None = run.spec
        if spec is None or spec.concurrency is None:
            return True
        if self.leases is None:
            raise RuntimeError(f"job {spec.name!r} declares concurrency but has no lease store")
        run.lease = self.leases.acquire(lease_key(spec.name), spec.concurrency, self.ttl,
                                        f"{self.worker_id}:{run.id}")
        return run.lease is not None

    def acquire_group(self, runs: Sequence[Run]) -> list[Run]:
        """Take slots for claimed runs of ONE capped job, in one statement; return the runs that
        got none (the caller hands them back).

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
        holders = {f"{self.worker_id}:{run.id}": run for run in runs}
        held = self.leases.acquire_many(lease_key(spec.name), spec.concurrency, self.ttl,
                                        list(holders))
        missing = []
        for holder, run in holders.items():
            run.lease = held.get(holder)
            if run.lease is None:
                missing.append(run)
        return missing

    def renew(self, runs: Sequence[Run]) -> None:
        """Renew every held slot in one statement; a slot missing from the answer is lost.

        A renewal that RAISES is not a lost slot (rule 2's reasoning: there is a TTL behind it and
        the tick gets several tries inside it), so the error is logged and the next tick retries.
        """
        held = [r for r in runs if r.lease is not None and not r.slot_lost]
        if not held or self.leases is None:
            return
        try:
            renewed = self.leases.renew_many([r.lease for r in held if r.lease], self.ttl)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.slot-renew-failed",
                      worker_id=self.worker_id, slots=len(held), error=repr(exc))
            return
        for run in held:
            lease = run.lease
            assert lease is not None
            if (lease.key, lease.slot) in renewed:
                continue
            # An explicit "no": another holder took the slot, or it lapsed (rule 7). Stop
            # renewing it — extending a slot this worker no longer holds would push out
            # somebody else's expiry — and cancel the run (rule 8).
            run.slot_lost = True
            if run.settling:
                # The body is over: the release may simply have landed first. Nothing to cancel.
                continue
            log_event(logger, logging.ERROR, "jobs.worker.slot-lost",
                      worker_id=self.worker_id, job_id=run.id, lease_key=lease.key,
                      slot=lease.slot)
            run.scope.cancel(JobSlotLostError(
                job=run.job.name, job_id=run.id, key=lease.key, slot=lease.slot))

    @staticmethod
    def releasable(runs: Sequence[Run]) -> list[HeldLease]:
        """The slots of ``runs`` to hand back with (or after) their settles."""
        # A lost slot is somebody else's now; an abandoned run's body may still be running, so
        # its slot is left to lapse on its TTL.
        return [r.lease for r in runs if r.lease is not None and not r.slot_lost
                and not r.abandoned]

    def release(self, runs: Sequence[Run]) -> None:
        """Hand back the slots of settled runs; never fails (rule 9).

        An error is logged and swallowed: the slot expires on its own TTL, and bookkeeping must
        never turn a settled job into a failed settle.
        """
        held = self.releasable(runs)
        if not held or self.leases is None:
            return
        try:
            self.leases.release_many(held)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.lease-release-failed",
                      worker_id=self.worker_id, job_ids=",".join(str(r.id) for r in runs),
                      error=repr(exc))
