"""What the claim loop carries from one round to the next."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..jobs.spec import JobSpec


@dataclass
class LoopState:
    """What the claim loop carries from one round to the next."""

    #: The registry generation ``caps`` was read at.
    generation: int = -1
    #: The capped kinds' ``concurrency`` by name.
    caps: dict[str, int] = field(default_factory=dict)
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
    #: After the threads' claim found nothing while the async lane had a backlog: until when
    #: (monotonic) rounds leave it out, and the completer's ``sync_moves`` and the notifications
    #: counted then, either of which moving on makes it due again (``ClaimLoop._sync_due``).
    #: None: it goes out with every round that has a free thread.
    sync_quiet: tuple[float, int, int] | None = None
    #: This round left the threads' claim out.
    sync_left_out: bool = False
    #: Claims that failed in a row: the outage backoff grows with them.
    failures: int = 0
    #: The last claim came back full: there is a backlog.
    backlog: bool = False
