"""What the claim loop carries from one round to the next, and what each claim's answer says."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..jobs.spec import JobSpec
from ..store import ClaimBatch, ClaimedJob
from .claim_lanes import ClaimPlan


@dataclass
class LoopState:
    """What the claim loop carries from one round to the next."""

    #: How many free threads are worth waiting for, once there is a backlog (see
    #: ``ClaimLoop.room``).
    batch: int
    #: The registry generation ``caps`` was read at.
    generation: int = -1
    #: The capped kinds' ``concurrency`` by name.
    caps: dict[str, int] = field(default_factory=dict)
    #: Those of ``caps`` capped per job (not per key): their slots pass from run to run.
    slot_caps: dict[str, int] = field(default_factory=dict)
    #: The kinds of ``slot_caps`` whose last claim took every slot free to them (``note_slots``).
    slot_bound: frozenset[str] = frozenset()
    #: The kinds of ``caps`` capped per key (``concurrency_key``, rule 50 (per-key-cap)).
    keyed: frozenset[str] = frozenset()
    #: The rate-limited kinds (``rate_limit``, rule 52 (fleet-rate-limit)).
    rated: dict[str, JobSpec] = field(default_factory=dict)
    #: The ``async def`` kinds, run on the async lane and claimed apart (rules 85 (one-event-loop),
    #: 87 (no-claim-beyond-free-places)).
    async_names: frozenset[str] = frozenset()
    #: The free threads and free async places ``ClaimLoop.room`` found this round.
    free_sync: int = 0
    free_async: int = 0
    #: The round's claim for the threads came back full (two lanes; see ``wait_for_work``).
    sync_full: bool = False
    #: When a claim of the async kinds alone last found none; None: make one next round.
    async_checked_at: float | None = None
    #: Claims that failed in a row: the outage backoff grows with them.
    failures: int = 0
    #: The last claim came back full: there is a backlog.
    backlog: bool = False
    #: When a claim's scan for the uncapped kinds last found nothing; None: scan on the next.
    others_checked_at: float | None = None

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

    def others_due(self, poll_interval: float) -> bool:
        """Whether the next claim scans the uncapped kinds too.

        With capped kinds registered, that scan walks past every queued run of the capped ones
        on each claim, so a drain of a capped kind paid for it on every claim. After it found
        nothing it is left out until an enqueue notification or one poll interval later: a job
        of another kind that becomes due meanwhile waits at most that, as it would for an idle
        worker (on SQLite, or with --no-listen, an enqueue too waits up to a poll interval)."""
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
            # capped kind fills every claim.
            self.others_checked_at = time.monotonic()

    def note_slots(self, claimed: Sequence[ClaimedJob], room: Mapping[str, int]) -> None:
        """Record which capped kinds the claim filled to their room (``FleetSlots.room``): each
        may have a backlog that waits for slots, so the next claim waits (2 ms at most) for
        their runs to pass their slots on (``ClaimLoop.room``). The wait for work after a claim
        that was not full stays as it is: the first slot passed on ends it, and with bodies
        longer than that wait a claim at once would find every slot still held. Per job only: a
        per-key cap's room is per key."""
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


def joined(claims: list[tuple[ClaimPlan, Sequence[ClaimedJob]]]) -> Sequence[ClaimedJob]:
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
