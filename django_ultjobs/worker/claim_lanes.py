"""How one claim round is split between the two lanes, so no claimed job waits for a place.

A worker runs sync bodies on its threads (``--threads``) and ``async def`` bodies on its event
loop (``--async-concurrency``; rule 85 (one-event-loop)). A claim statement takes the runnable jobs
in order whatever their kind, so one claim sized by the sum of the free places could bring back more
sync jobs than free threads (or more async jobs than free places): those would wait, claimed and not
started, with no heartbeat yet and their wait unbounded (rule 87 (no-claim-beyond-free-places)
forbids it). Handing them back would spin: the same rows come first again at the next claim.

So the lanes are claimed apart, with what the claim statement already offers (``caps``, a
per-kind "take at most N", as the rate gate uses it):

* async places free: one claim of the async kinds only (``uncapped=False``), each kind at most
  the free places (its fleet cap if it has one), the whole claim at most the free places: the
  kinds' own ordered index scans, which walk past no other kind's rows;
* threads free: one claim of every other kind (unknown names included: they are parked without a
  place, rule 12 (unknown-job-parked)), the async kinds given a cap of 0, at most the free threads.

With no ``async def`` job registered this is the one claim of before, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClaimPlan:
    """One claim statement of a round: the arguments ``JobStore.claim`` takes beside its
    worker, queues and visibility timeout."""

    limit: int
    caps: dict[str, int]
    keyed: frozenset[str]
    kept: dict[str, int] = field(default_factory=dict)
    #: Whether this claim scans the kinds that are neither capped nor async.
    uncapped: bool = True
    #: Which lane its runs go to: True for the async lane.
    is_async: bool = False


def claim_plans(*, free_sync: int, free_async: int, caps: Mapping[str, int],
                keyed: frozenset[str], kept: Mapping[str, int], async_names: frozenset[str]
                ) -> list[ClaimPlan]:
    """The claims of one round: for each lane with room, one.

    ``caps``: the kinds the claim must hold to a number (fleet caps, rate limits); ``keyed``
    those capped per key; ``kept`` the fleet slots this worker kept per kind."""
    if not async_names:
        if free_sync <= 0:
            return []
        return [ClaimPlan(free_sync, dict(caps), keyed, dict(kept))]
    plans: list[ClaimPlan] = []
    if free_async > 0:
        # A cap of the kind's own wins (a fleet cap is a slot count, not a claim size); the
        # claim's limit holds the whole claim to the free places anyway.
        async_caps = {name: caps.get(name, free_async) for name in async_names}
        plans.append(ClaimPlan(free_async, async_caps, keyed & async_names,
                               {n: k for n, k in kept.items() if n in async_names},
                               uncapped=False, is_async=True))
    if free_sync > 0:
        sync_caps = {name: limit for name, limit in caps.items() if name not in async_names}
        plans.append(ClaimPlan(free_sync, {**sync_caps, **dict.fromkeys(async_names, 0)},
                               keyed - async_names,
                               {n: k for n, k in kept.items() if n not in async_names}))
    return plans
