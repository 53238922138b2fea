"""Fleet slots: ``@job(concurrency=N)`` held fleet-wide as slot rows (rules 5 (fleet-cap) to
9 (slot-held-while-body-runs)).

Apart from the claim loop because its question is "may I start this one?"; which run holds which
slot, and who releases it, is bookkeeping of its own. A slot is taken at claim time and renewed
on the heartbeat's beat (one clock for "I own the job" and "I own the slot").

A worker KEEPS the slot of a run whose body has returned (its outcome queued for the completer,
its settle not necessarily written: rule 90 (slot-passes-on-return)), for the next run of the same
kind it claims, and releases it only when its next claim brought no run to use it.
Taking a slot for every run and releasing it with every settle wrote two slot rows per job, a
large share of a capped drain's cost; a kept slot costs nothing until
its kind runs dry.
The cap still holds: a slot is held by one run at a time, from its claim until its body has
returned, and between runs by the worker alone; a run that is settling holds its job, not a slot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..core.slot_keys import slot_key_for
from ..exceptions import JobSlotLostError
from ..jobs.spec import JobSpec
from ..observability.logs import log_event
from ..store import SlotHold, SlotStore
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")


def _boot_clock() -> float:
    # Seconds that go on counting while the host is suspended, unlike time.monotonic() on Linux:
    # a worker that resumes after its slots lapsed must see them as old.
    return time.clock_gettime(time.CLOCK_BOOTTIME)


_CLOCK: Callable[[], float] = _boot_clock if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic

#: A hold's identity: two holds of one slot (one lapsed, then taken again) are never confused.
_Ident = tuple[str, int, str]


@dataclass(eq=False)
class _Kept:
    """A slot this worker holds between runs of its kind."""

    kind: str
    hold: SlotHold
    #: When the worker took it back from its run (the clock of ``FleetSlots``).
    kept_at: float
    #: The claim round that offered it (0: not offered yet); see ``offer``.
    offered: int = 0


class FleetSlots:
    """Acquire, keep, renew and release the fleet slots of this worker's runs.

    It knows every slot the worker holds: the runs' (from the moment a run gets one until its
    body has returned) and the kept ones, so the heartbeat renews them all, including a run's that
    is not under the heartbeat yet, in one statement.
    """

    def __init__(self, store: SlotStore | None, worker_id: str, ttl: float, *,
                 clock: Callable[[], float] = _CLOCK) -> None:
        self.store = store
        self.worker_id = worker_id
        # The worker's visibility timeout: a SIGKILLed worker's slot lapses on exactly the
        # schedule its job is re-delivered on. A longer TTL would leave concurrency=1
        # unfillable while the job it guarded is already re-delivered.
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._busy: dict[_Ident, Run] = {}
        self._kept: list[_Kept] = []
        # Slots passed back to the fleet by ``keep`` and not yet released: the completer's
        # thread releases them (``release_returned``), never the thread that ran the body.
        self._returned: list[SlotHold] = []
        self._round = 0
        self._stopping = False
        # When the statement that last set each held slot's expiry was SENT: the slot is held
        # until at least then + ttl, whatever the two clocks say. A kept slot is handed to a new
        # run only well inside that, so a run never starts on a slot that may already have
        # lapsed while renewals failed.
        self._confirmed: dict[_Ident, float] = {}

    # -- taking ---------------------------------------------------------------------------------

    def acquire_group(self, runs: Sequence[Run]) -> list[Run]:
        """Give claimed runs of ONE capped job a slot each: a kept one first, else a new one, all
        new ones in one statement; return the runs that got none (the caller hands them back).

        A job without ``concurrency`` never touches the slot table (rule 5 (fleet-cap)). One
        statement per kind per claim, not per run: a round trip per run was most of a capped drain's
        cost.
        """
        if not runs:
            return []
        spec: JobSpec | None = runs[0].spec
        if spec is None or spec.concurrency is None:
            return []
        if self.store is None:
            # Unreachable through the worker, which refuses to start without a slot store
            # (rule 10 (cap-kept-or-refused)); kept as a guard so a cap can never silently hold per
            # process.
            raise RuntimeError(f"job {spec.name!r} declares concurrency but has no slot store")
        reused, waiting = self._reuse_kept(spec.name, spec.concurrency, runs)
        if not waiting:
            return []
        holders = {f"{self.worker_id}:{run.id}": run for run in waiting}
        sent = self._clock()
        try:
            held = self.store.acquire_many(slot_key_for(spec.name), spec.concurrency, self.ttl,
                                            list(holders))
        except Exception:
            self._unreuse(reused, runs)
            raise
        missing, displaced = self._take_new(holders, held, sent)
        self._cancel_lost(displaced)
        return missing

    def acquire_keyed(self, runs: Sequence[Run]) -> list[Run]:
        """Give claimed runs of kinds capped per key (rule 50 (per-key-cap)) a slot of their key
        each, every key in ONE statement; return the runs that got none (the caller hands them
        back).

        No kept slot is reused: per-key slots are never kept (see ``keep``)."""
        if not runs:
            return []
        if self.store is None:
            raise RuntimeError("a job declares concurrency_key but the worker has no slot store")
        holders = {f"{self.worker_id}:{run.id}": run for run in runs}
        wanted = []
        for holder, run in holders.items():
            assert run.spec is not None and run.spec.concurrency is not None
            assert run.job.slot_key is not None
            wanted.append((run.job.slot_key, run.spec.concurrency, holder))
        sent = self._clock()
        held = self.store.acquire_keys(wanted, self.ttl)
        missing, displaced = self._take_new(holders, held, sent)
        self._cancel_lost(displaced)
        return missing

    def _reuse_kept(self, kind: str, limit: int, runs: Sequence[Run]
                    ) -> tuple[list[_Kept], list[Run]]:
        """Hand this worker's kept slots of ``kind`` to the first of ``runs``, no statement
        needed; return the kept slots used and the runs still without a slot."""
        waiting = list(runs)
        reused: list[_Kept] = []
        with self._lock:
            for kept in self._kept:
                if len(reused) == len(waiting):
                    break
                # An unusable one is left for offer() or release_idle() to release.
                if kept.kind == kind and self._usable(kept, limit):
                    reused.append(kept)
            if not reused:
                return [], waiting
            # One pass, not a remove() per slot: a claim hands on up to its cap's slots.
            taken = {id(kept) for kept in reused}
            self._kept = [kept for kept in self._kept if id(kept) not in taken]
            for kept, run in zip(reused, waiting, strict=False):
                run.slot = kept.hold
                self._busy[_ident(kept.hold)] = run
        return reused, waiting[len(reused):]

    def _unreuse(self, reused: Sequence[_Kept], runs: Sequence[Run]) -> None:
        """Undo ``_reuse_kept`` after the statement for new slots failed: the caller hands every
        run of the group back, and the kept slots stay kept, for the next claim to offer again."""
        with self._lock:
            for kept in reused:
                self._busy.pop(_ident(kept.hold), None)
                kept.offered = 0
                self._kept.append(kept)
        for run in runs:
            run.slot = None

    def _take_new(self, holders: Mapping[str, Run], held: Mapping[str, SlotHold],
                  sent: float) -> tuple[list[Run], list[Run]]:
        """Give each run the slot the database granted its holder; return the runs that got
        none, and the runs of this worker that lost their slot to those grants."""
        missing: list[Run] = []
        displaced: list[Run] = []
        with self._lock:
            for holder, run in holders.items():
                hold = held.get(holder)
                run.slot = hold
                if hold is None:
                    missing.append(run)
                    continue
                displaced += self._forget_other_holds(hold)
                self._confirmed[_ident(hold)] = sent
                self._busy[_ident(hold)] = run
        return missing, displaced

    def _forget_other_holds(self, hold: SlotHold) -> list[Run]:
        """Forget every other hold this worker knew of the slot the database just granted as
        ``hold`` (they have lapsed); return the runs that were using one. Called under the lock.

        A kept hold is forgotten, or it could be handed to a second run; a run using one has
        lost its slot. The holder alone cannot tell them apart: a kept slot keeps the holder of
        the run that took it, and that job may be claimed again (a retry) and take the same slot
        afresh."""
        for stale in [k for k in self._kept if _slot(k.hold) == _slot(hold)]:
            self._kept.remove(stale)
        displaced: list[Run] = []
        for ident, other in list(self._busy.items()):
            if ident[:2] == _slot(hold):
                del self._busy[ident]
                other.slot_lost = True
                displaced.append(other)
        return displaced

    def _usable(self, kept: _Kept, limit: int | None) -> bool:
        """Whether a kept slot may serve a new run: still under the kind's cap (a lowered cap
        leaves the slots above it to lapse out of use), and renewed lately."""
        if limit is None or kept.hold.slot >= limit:
            return False
        confirmed = self._confirmed.get(_ident(kept.hold))
        return confirmed is not None and confirmed >= self._clock() - self.ttl / 2

    # -- keeping and releasing -----------------------------------------------------------------

    def keep(self, runs: Sequence[Run]) -> None:
        """Pass on the slots of runs whose bodies have returned (their outcomes queued for the
        completer): kept for the next runs of their kinds, or, per key, released
        (rule 90 (slot-passes-on-return)).

        Called at submit, not after the settle: the cap bounds bodies executing, and a settle
        batch must not hold slots. The run keeps its job lease until its settle is written; a
        stale settle then finds nothing here to keep or release, so a slot is never counted
        twice nor revived.

        Sends no statement: a slot that goes back to the fleet waits in ``_returned`` for the
        completer's thread (``release_returned``), which is woken by the same submit. The body's
        own thread may be an event loop's, where Django refuses a query, or hold a transaction
        the body left open, which the reset after the run would roll back."""
        with self._lock:
            now = self._clock()
            for run in runs:
                hold = run.slot
                if hold is None:
                    continue
                ident = _ident(hold)
                if self._busy.get(ident) is not run:
                    # Not this run's any more (lost, or taken afresh for another run): nothing
                    # to keep, nothing to release.
                    continue
                del self._busy[ident]
                if run.slot_lost or run.abandoned:
                    # A lost slot is somebody else's now; an abandoned run's body may still be
                    # running, so its slot is left to lapse on its TTL (never renewed again).
                    continue
                if self._stopping or run.job.slot_key is not None:
                    # A slot of a per-key cap goes straight back (rule 51 (per-key-slot)): kept, it
                    # would make its key look free to this worker alone, whose claims would then
                    # fill with that key's backlog (one run each) while other keys wait.
                    self._returned.append(hold)
                    continue
                self._kept.append(_Kept(kind=run.job.name, hold=hold, kept_at=now))

    def release_returned(self) -> None:
        """Release, in one statement, the slots ``keep`` passed back since the last call.

        Called by the completer's thread as soon as it takes the outcomes that passed them back,
        before it writes their settles (rule 90 (slot-passes-on-return): a settle batch holds no
        slot)."""
        with self._lock:
            back, self._returned = self._returned, []
        self._release(back)

    def offer(self, caps: Mapping[str, int]) -> dict[str, int]:
        """The kept slots per capped kind (``caps``: name -> concurrency) a claim about to be
        sent may fill besides the fleet's free ones; ``release_unused`` after the claim returns
        those no run took. Kept slots that may no longer serve (see ``_usable``) go back now."""
        stale: list[SlotHold] = []
        offered: dict[str, int] = {}
        with self._lock:
            self._round += 1
            for kept in list(self._kept):
                if not self._usable(kept, caps.get(kept.kind)):
                    self._kept.remove(kept)
                    stale.append(kept.hold)
                    continue
                kept.offered = self._round
                offered[kept.kind] = offered.get(kept.kind, 0) + 1
        self._release(stale)
        return offered

    def release_unused(self) -> None:
        """Release the kept slots the last ``offer`` made and no claimed run
        took: their kind has nothing runnable for this worker now, and another worker may.
        Slots kept since that offer stay for the next claim."""
        with self._lock:
            unused = [k for k in self._kept if k.offered == self._round]
            for kept in unused:
                self._kept.remove(kept)
        self._release([k.hold for k in unused])

    def release_idle(self, longer_than: float) -> None:
        """Release the slots kept for longer than ``longer_than`` seconds: the claim loop may not
        claim for a while (every thread busy with long jobs, the completer behind, the database
        down), and a slot no run of this worker uses must not keep other workers waiting."""
        with self._lock:
            before = self._clock() - longer_than
            idle = [k for k in self._kept if k.kept_at < before]
            for kept in idle:
                self._kept.remove(kept)
        self._release([k.hold for k in idle])

    def release_all(self) -> None:
        """Release every kept slot and keep none from now on (the worker is stopping: while it
        drains, a run that settles releases its slot at once)."""
        with self._lock:
            self._stopping = True
            kept, self._kept = self._kept, []
        self._release([k.hold for k in kept])

    def give_up(self, run: Run) -> None:
        """Stop renewing ``run``'s slot and never keep it: the worker claimed the run's job
        again after its lease lapsed, and the new run's slot may be the same hold."""
        with self._lock:
            run.slot_lost = True
            if run.slot is not None and self._busy.get(_ident(run.slot)) is run:
                del self._busy[_ident(run.slot)]

    def confirmed_at(self, hold: SlotHold) -> float | None:
        """When (this object's clock, ``runs.lease_clock`` unless a test set another) the
        statement that last set ``hold``'s expiry was sent; None once it is no longer held. It
        holds until at least then + ``ttl``."""
        with self._lock:
            return self._confirmed.get(_ident(hold))

    @property
    def kept(self) -> int:
        """How many slots this worker holds between runs."""
        with self._lock:
            return len(self._kept)

    def _release(self, held: Sequence[SlotHold]) -> None:
        """Release slots; never fails (rule 9 (slot-held-while-body-runs)).

        An error is logged and swallowed: the slot expires on its own TTL (it is no longer
        renewed), and bookkeeping must never stop the worker claiming.
        """
        if not held or self.store is None:
            return
        try:
            self.store.release_many(held)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.lease-release-failed",
                      worker_id=self.worker_id, slots=",".join(
                          f"{hold.key}[{hold.slot}]" for hold in held),
                      error=repr(exc))

    # -- renewing -------------------------------------------------------------------------------

    def renew(self) -> None:
        """Renew every slot this worker holds, its runs' and the kept ones, in one statement; a
        slot missing from the answer is lost.

        A renewal that RAISES is not a lost slot (rule 2 (heartbeat-retried)'s reasoning: there is a
        TTL behind it and the heartbeat gets several tries inside it), so the error is logged and
        the next beat retries.
        """
        with self._lock:
            busy = [(ident, run) for ident, run in self._busy.items() if not run.slot_lost]
            held = [run.slot for _, run in busy if run.slot is not None]
            held += [k.hold for k in self._kept]
        if not held or self.store is None:
            return
        sent = self._clock()
        try:
            renewed = self.store.renew_many(held, self.ttl)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.slot-renew-failed",
                      worker_id=self.worker_id, slots=len(held), error=repr(exc))
            return
        lost = {_ident(hold) for hold in held} - renewed
        lost_runs: list[Run] = []
        with self._lock:
            for ident in renewed:
                self._confirmed[ident] = sent
            # Lost between runs (or kept by a settle written while this renewal ran): never
            # handed to a run, never renewed again.
            self._kept = [k for k in self._kept if _ident(k.hold) not in lost]
            for ident, run in busy:
                if ident not in lost:
                    continue
                # An explicit "no": another holder took the slot, or it lapsed
                # (rule 7 (fenced-slot-renewal)). Stop renewing it — extending a slot this worker no
                # longer holds would push out somebody else's expiry — and cancel the run
                # (rule 8 (lost-slot-cancels)).
                run.slot_lost = True
                if self._busy.get(ident) is run:
                    del self._busy[ident]
                lost_runs.append(run)
            # The one place confirmations of holds no longer held are dropped: only kept holds
            # are ever judged by theirs, and a hold taken again is confirmed afresh.
            held_now = set(self._busy) | {_ident(k.hold) for k in self._kept}
            self._confirmed = {i: t for i, t in self._confirmed.items() if i in held_now}
        self._cancel_lost(lost_runs)

    def _cancel_lost(self, runs: Sequence[Run]) -> None:
        """Cancel runs whose slot is lost (rule 8 (lost-slot-cancels)); a run whose body is over has
        nothing to cancel, and its slot is not kept."""
        for run in runs:
            if run.settling:
                continue
            hold = run.slot
            assert hold is not None
            log_event(logger, logging.ERROR, "jobs.worker.slot-lost",
                      worker_id=self.worker_id, job_id=run.id, lease_key=hold.key,
                      slot=hold.slot)
            run.scope.cancel(JobSlotLostError(
                job=run.job.name, job_id=run.id, key=hold.key, slot=hold.slot))


def _slot(hold: SlotHold) -> tuple[str, int]:
    return (hold.key, hold.slot)


def _ident(hold: SlotHold) -> _Ident:
    return (hold.key, hold.slot, hold.holder)
