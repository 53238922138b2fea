"""The runs in flight in this worker, shared by the executor, the heartbeat and the completer."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..jobs.spec import JobSpec
from ..runtime.cancel import CancelScope
from ..runtime.steps import StepLedger
from ..store import ClaimedJob, SlotHold

#: Guards every run's ``settling`` flag: held for a test and a set, so one lock for all runs
#: costs no waiting, where a lock of each run's own was an allocation per claimed job.
_SETTLING = threading.Lock()


# Slotted (a weak reference slot kept: rule 13 (nothing-leaks)'s tests watch runs go), and its
# settle lock shared: one is built per claimed job, so it allocates no lock and no __dict__ of its
# own.
@dataclass(eq=False, slots=True, weakref_slot=True)
class Run:
    """One claimed job in this worker, from claim until its settle has been written."""

    job: ClaimedJob
    spec: JobSpec | None
    scope: CancelScope = field(default_factory=CancelScope)
    slot: SlotHold | None = None
    #: Set once the run's outcome is handed to the completer: the body is over, so a heartbeat
    #: "no" can no longer cancel anything (and may just be the settle landing first).
    settling: bool = False
    #: Set when a renewal answered "no": renewal stops (rule 8 (lost-slot-cancels)).
    slot_lost: bool = False
    #: The run's durable step history (steps it ran and replayed), once the body starts.
    ledger: StepLedger | None = None
    #: Set when a draining worker gave up on a body that ignored its cancellation: the job is
    #: handed back on the schedule of a dead worker and the slot is left to lapse, because the
    #: body may still be running (rule 5 (fleet-cap) holds only if nobody else can start it
    #: meanwhile).
    abandoned: bool = False
    #: When the body started (``time.monotonic()``) and on which thread: its timeout runs from
    #: then (rule 55 (timeout-cancels)), and an overrunning body is reported by its thread
    #: (rule 56 (overrun-reported)).
    started_at: float | None = None
    thread: str = ""
    #: ``started_at`` + the run's timeout, or None: the moment the worker's timer cancels the
    #: run (``deadlines.py``), worked out once.
    deadline: float | None = None
    #: Set as the body returns or raises (``deadlines.body_over``): a body no longer executing
    #: is neither timed out by the timer nor reported as overrunning
    #: (rules 132 (timeout-recorded), 131 (overrun-from-delivery)).
    over: bool = False
    #: Seconds the body ran, once it has (None for a run settled without running its body).
    duration: float | None = None
    #: When (``lease_clock``) the statement that last set the run's lease was SENT: the claim,
    #: then each heartbeat that found it alive. The lease holds until at least then + the
    #: visibility timeout; a child process ends its body before that (``process_pool.py``).
    leased_at: float = 0.0

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def timeout(self) -> float | None:
        """Seconds the body may run (rule 55 (timeout-cancels)): the row's, else the job's declared
        one (a row enqueued before the job declared it), else None."""
        if self.job.timeout is not None:
            return self.job.timeout
        return self.spec.timeout if self.spec is not None else None

    def mark_started(self) -> None:
        """Note that the body starts now, on the calling thread."""
        self.thread = threading.current_thread().name
        self.started_at = time.monotonic()
        timeout = self.timeout
        self.deadline = None if timeout is None else self.started_at + timeout

    @property
    def key(self) -> tuple[int, str]:
        """The run's identity: the job AND the claim. The same worker can claim its own job
        again after the lease lapsed (a long database blip); that is another run."""
        return (self.job.id, self.job.token)

    def start_settling(self) -> bool:
        """Mark the run's outcome as decided; True for exactly one caller (the body finishing
        and a drain giving up on it can race)."""
        with _SETTLING:
            if self.settling:
                return False
            self.settling = True
            return True


class RunsInFlight:
    """Thread-safe set of runs the heartbeat keeps alive until the completer lets them go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[int, str], Run] = {}
        # Runs by job id, so the claim loop's question "is an older run of this job still
        # here?" costs a lookup, not a scan of every run in flight for every job it claims.
        self._by_job: dict[int, list[Run]] = {}

    def add(self, run: Run) -> None:
        with self._lock:
            self._add(run)

    def _add(self, run: Run) -> None:
        key = run.key
        old = self._runs.get(key)
        if old is run:
            return
        if old is not None:
            self._by_job[run.id].remove(old)
        self._runs[key] = run
        self._by_job.setdefault(run.id, []).append(run)

    def remove_many(self, runs: list[Run]) -> None:
        with self._lock:
            for run in runs:
                self._remove(run)

    def _remove(self, run: Run) -> None:
        if self._runs.get(run.key) is not run:
            return
        del self._runs[run.key]
        same_job = self._by_job[run.id]
        same_job.remove(run)
        if not same_job:
            del self._by_job[run.id]

    def contains(self, run: Run) -> bool:
        with self._lock:
            return self._runs.get(run.key) is run

    def others_of_each(self, runs: list[Run]) -> list[list[Run]]:
        """The older runs of the same job in this worker (their claims have lapsed) of each of
        ``runs``, under one hold of the lock (a claim's batch)."""
        with self._lock:
            by_job = self._by_job
            return [[r for r in by_job[run.id] if r is not run] if run.id in by_job else []
                    for run in runs]

    def snapshot(self) -> list[Run]:
        with self._lock:
            return list(self._runs.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)
