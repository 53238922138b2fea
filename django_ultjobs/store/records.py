"""The values the store takes and returns: rows to write, claims, settlements, slot holds,
graph_rows in a workflow or a batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..core.slot_keys import SLOT_KEY_PREFIX


# Made once per job on the enqueue path, so slotted but not frozen, as ClaimedJob below: a
# frozen dataclass sets each of its 19 fields through object.__setattr__, which was most of
# what building one cost a bulk enqueue. Nothing mutates it.
# JobCall.new_job builds it positionally (by keyword cost twice as much): a field added or
# moved is added or moved there too.
@dataclass(slots=True)
class NewJob:
    """A job to insert: everything enqueue knows before the database assigns an id."""

    name: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    max_attempts: int
    delay: float = 0.0
    run_at: datetime | None = None
    traceparent: str = ""
    tracestate: str = ""
    enqueued_by: str = ""
    #: The key of the fleet slots its runs take when the job's cap is per key
    #: (rule 50 (per-key-cap)); "" for the job's own.
    concurrency_key: str = ""
    #: The key this job holds while it is live (and ``unique_for`` seconds after it finished),
    #: or None: ``enqueue_unique`` inserts it only where no row holds the key
    #: (rules 65 (one-key-holder) to 67 (unique-for-window)).
    unique_key: str | None = None
    unique_for: float = 0.0
    #: Seconds a run may execute (rule 55 (timeout-cancels)), and after how long an unstarted job
    #: expires
    #: (rule 58 (expired-never-runs)); None: no limit.
    timeout: float | None = None
    expires_in: float | None = None
    #: Labels stored on the row (rule 78 (tags-stored-whole)).
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EnqueuedJob:
    """What the database assigned to a new job row."""

    id: int
    visible_at: datetime
    created_at: datetime
    #: The enqueue's clock plus ``expires_in``, or None.
    expires_at: datetime | None = None


# The two records made once per job on the worker's hot path are slotted but not frozen: a frozen
# dataclass sets each field through object.__setattr__, a cost the claim loop pays per job.
# Nothing mutates them after construction.
@dataclass(slots=True)
class ClaimedJob:
    """One job this worker now holds under ``token`` until its lease lapses."""

    id: int
    name: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    token: str
    traceparent: str
    tracestate: str
    enqueued_by: str
    cancel_requested: bool
    claimed_at: datetime
    #: The worker whose lease lapsed when this claim is a re-delivery of a running row.
    redelivered_from: str | None = None
    previous_claimed_at: datetime | None = None
    #: True when the row was waiting (a durable sleep or event wait) and woke: not a new attempt.
    woke: bool = False
    #: Why the stored arguments cannot be decoded (then args and kwargs are empty), or None:
    #: the worker fails such a job at once instead of running it
    #: (rule 15 (undecodable-row-fails-alone)).
    undecodable: str | None = None
    #: When the row was due, just before this claim (enqueued, scheduled, retried or woken):
    #: the start of the job's wait (``ultjobs.job.wait``). None from a store that does not say.
    due_at: datetime | None = None
    #: The key of the slot its run takes when its kind is capped per key (rule 50 (per-key-cap)),
    #: else None.
    slot_key: str | None = None
    #: The run's timeout in seconds (rule 55 (timeout-cancels)), None for none; the row's, set at
    #: enqueue.
    timeout: float | None = None
    #: When the job expires unless started (rule 58 (expired-never-runs)), on the database's clock;
    #: or None.
    expires_at: datetime | None = None
    #: The reason a cancel request gave (rule 59 (cancel-reason-kept)), "" for none.
    cancel_reason: str = ""


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """What one claim asks for; ``JobStore.claim`` describes each field."""

    worker_id: str
    queues: Sequence[str]
    limit: int
    visibility_timeout: float
    caps: Mapping[str, int]
    uncapped: bool = True
    kept: Mapping[str, int] = field(default_factory=dict)
    keyed: frozenset[str] = frozenset()

    def kept_of(self, name: str) -> int:
        """The fleet slots this worker kept for capped kind ``name``."""
        return self.kept.get(name, 0)


#: What a claimed row was just before the claim: its status, its worker, its claim time and
#: when it was due (its ``visible_at``).
Previous = tuple[str, str | None, Any, Any]


@dataclass(slots=True)
class Settlement:
    """How one run ends: the row's next state, fenced on ``token``, and the attempt to record."""

    job_id: int
    token: str
    status: str
    attempt_no: int
    started_at: datetime | None
    outcome: str | None
    #: Added to the row's attempt count: -1 hands the attempt back (nothing was burned).
    attempt_delta: int = 0
    #: Seconds from now until a queued/waiting row is visible again.
    delay: float = 0.0
    error: str | None = None
    result_json: str | None = None
    slot_key: str | None = None
    slot: int | None = None
    #: For status "waiting" on an event: what wakes it (see ``send_event``).
    wait_event: str | None = None
    wait_match: dict[str, Any] | None = None
    wait_after: int = 0
    steps_run: tuple[str, ...] = ()
    steps_replayed: tuple[str, ...] = ()
    #: The id of an attempt row this settle adds a claim to instead of recording a new one:
    #: the park of a job no worker knows, continuing its episode (rule 12 (unknown-job-parked)).
    #: Recorded anew if that row is gone.
    extends: int | None = None

    @property
    def carries_wait(self) -> bool:
        """Whether the settle writes this run's wait columns (a batch leaves them out else)."""
        return self.wait_event is not None or self.wait_match is not None or bool(self.wait_after)

    @property
    def carries_steps(self) -> bool:
        """Whether the settle writes this run's step lists (a batch leaves them out else)."""
        return bool(self.steps_run or self.steps_replayed)

    @property
    def on_row(self) -> bool:
        """Whether the job's own row holds this attempt, so it needs no attempt row
        (rule 97 (attempt-on-row)).

        A first attempt that succeeded, with nothing the row cannot say: the row keeps its
        worker, its attempt number (1), its claim time (this attempt's start), its finish time,
        its outcome (succeeded) and the number of its per-job fleet slot (``Job.attempt_slot``;
        the key is the job's name's). An attempt with an error, steps or a per-key cap's slot
        (rule 50 (per-key-cap)) is written as a row, as is every other outcome and every later
        attempt. The settle checks the per-job key against the job's name, and writes the row when
        they differ."""
        return (self.status == "succeeded" and self.outcome == "succeeded"
                and self.attempt_no == 1 and self.attempt_delta == 0
                and self.started_at is not None and self.error is None
                and self._slot_on_row() and self.extends is None
                and not self.steps_run and not self.steps_replayed)

    def _slot_on_row(self) -> bool:
        """No slot, or a per-job one (its key ``job:<name>``), which the row can say."""
        if self.slot_key is None and self.slot is None:
            return True
        return (self.slot is not None and self.slot_key is not None
                and self.slot_key.startswith(SLOT_KEY_PREFIX))


@dataclass(frozen=True, slots=True)
class ParkEpisode:
    """The latest attempt row of a claimed job, when it is an unknown-job park
    (rule 12 (unknown-job-parked))."""

    job_id: int
    #: The attempt row, and the attempt number it recorded.
    attempt_id: int
    attempt: int
    #: Whether the episode began (its row's ``started_at``) at least the timeout ago.
    expired: bool


@dataclass(frozen=True, slots=True)
class SavedStep:
    """A step row written under the run's token; ``wait_until`` for a pending wait."""

    wait_until: datetime | None


@dataclass(frozen=True, slots=True)
class LostAttempt:
    """An attempt whose worker never reported back; recorded by whoever finds it lapsed."""

    job_id: int
    attempt: int
    worker_id: str
    started_at: datetime | None
    outcome: str
    error: str


@dataclass(frozen=True, slots=True)
class RateTaken:
    """What one rate-limit bucket granted a take (rule 52 (fleet-rate-limit))."""

    #: How many of the starts wanted it granted (the first ones).
    granted: int
    #: Seconds until its next start conforms.
    wait: float
    #: The database's clock it judged by, in microseconds since 1970.
    at: int


@dataclass(frozen=True, slots=True)
class SlotHold:
    """A fleet slot held by ``holder`` until ``expires_at`` (database clock)."""

    key: str
    slot: int
    holder: str
    expires_at: datetime


# Made once per node of a graph, so slotted but not frozen, as NewJob above: nothing mutates it.
@dataclass(slots=True)
class GraphRow:
    """What a just-enqueued job becomes: a workflow's node, a batch's member or a batch's
    callback (``dependencies.write_graph_rows``)."""

    job_id: int
    #: Waits for ``total`` dependencies (status pending); False: runnable as enqueued.
    pending: bool = False
    total: int = 0
    when: str = ""
    has_dependents: bool = False
    workflow_id: int | None = None
    batch_id: int | None = None
    callback_of: int | None = None
    #: The ids it waits for, in ``after=`` order; and the ids that wait for it.
    depends_on: Sequence[int] | None = None
    dependents: Sequence[int] | None = None


#: What each job of a graph becomes, given the ids of them all (an edge names other jobs' ids).
GraphRowsOf = Callable[[list[int]], Sequence[GraphRow]]


def ids_text(ids: Sequence[int] | None) -> str | None:
    """``ids`` as the JSON text of an edge column (``depends_on``, ``dependents``), or None."""
    return None if ids is None else "[" + ",".join(map(str, ids)) + "]"


def settlement_size(s: Settlement) -> int:
    """Roughly the bytes ``s`` adds to a settle batch: its result and error, plus the rest of
    its row. The completer bounds batches, and the worker its backlog, by this."""
    return 400 + len(s.result_json or "") + len(s.error or "")
