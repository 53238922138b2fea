"""The runs in flight in this worker, shared by the executor, the ticker and the completer."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..cancel import CancelScope
from ..registry import JobSpec
from ..steps import StepLedger
from ..store import ClaimedJob, HeldLease


@dataclass(eq=False)
class Run:
    """One claimed job in this worker, from claim until its settle has been written."""

    job: ClaimedJob
    spec: JobSpec | None
    scope: CancelScope = field(default_factory=CancelScope)
    lease: HeldLease | None = None
    #: Set once the run's outcome is handed to the completer: the body is over, so a heartbeat
    #: "no" can no longer cancel anything (and may just be the settle landing first).
    settling: bool = False
    #: Set when a renewal answered "no": renewal stops (rule 8).
    slot_lost: bool = False
    #: Set when the completer wrote (or gave up on) this run's settle.
    done: threading.Event = field(default_factory=threading.Event)
    #: The run's durable step history (steps it ran and replayed), once the body starts.
    ledger: StepLedger | None = None

    @property
    def id(self) -> int:
        return self.job.id


class RunRegistry:
    """Thread-safe set of runs the ticker keeps alive until the completer lets them go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[int, Run] = {}

    def add(self, run: Run) -> None:
        with self._lock:
            self._runs[run.id] = run

    def remove(self, run: Run) -> None:
        with self._lock:
            if self._runs.get(run.id) is run:
                del self._runs[run.id]

    def contains(self, run: Run) -> bool:
        with self._lock:
            return self._runs.get(run.id) is run

    def snapshot(self) -> list[Run]:
        with self._lock:
            return list(self._runs.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)
