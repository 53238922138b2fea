"""What a chaos scenario counts, as pure functions of what it recorded.

Nothing here reads the queue's internals: a run is what the job bodies wrote to their files
(``jobs.note_run``), a job's fate is its row's final status, and a fault is what the scenario
did (which process it SIGKILLed and when, when the database was down or its backends cut).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

#: Statuses a job leaves only by being run (or parked) again.
LIVE = frozenset({"queued", "running", "waiting"})
#: Seconds either side of a database fault within which an outcome may have been in flight.
SLACK = 1.0


@dataclass(frozen=True)
class RunRecord:
    """One run of a job body: ``end`` None when its process died first; ``how`` says whether
    the body returned (``completed``) or stopped on its cancel signal."""

    job: int
    attempt: int
    pid: int
    name: str
    start: float
    end: float | None = None
    how: str | None = None

    @property
    def completed(self) -> bool:
        return self.how == "completed"


def read_runs(directory: Path) -> list[RunRecord]:
    """Pair the start and end lines of every run in the bodies' files."""
    starts: dict[tuple[int, int, int], dict] = {}
    ends: dict[tuple[int, int, int], dict] = {}
    for path in sorted(directory.glob("runs-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            key = (rec["job"], rec["attempt"], rec["pid"])
            (starts if rec["event"] == "start" else ends)[key] = rec
    runs = []
    for key, rec in starts.items():
        end = ends.get(key)
        runs.append(RunRecord(job=key[0], attempt=key[1], pid=key[2], name=rec["name"],
                              start=rec["t"], end=end["t"] if end else None,
                              how=end["how"] if end else None))
    return sorted(runs, key=lambda r: r.start)


@dataclass
class Faults:
    """What a scenario did: processes it SIGKILLed (pid -> when) and spans of time the
    database was down or its connections cut (start, end), all on this host's clock."""

    killed: dict[int, float] = field(default_factory=dict)
    windows: list[tuple[float, float]] = field(default_factory=list)
    #: The visibility timeout the workers ran with: a lease may lapse that long after a fault.
    visibility_timeout: float = 2.0

    def ends(self) -> list[float]:
        """When each fault was over (a kill is over at once)."""
        return sorted([*self.killed.values(), *(end for _, end in self.windows)])

    def excuses(self, run: RunRecord) -> bool:
        """Whether the documented window covers running ``run``'s job again: its worker was
        SIGKILLed (a body that returned but whose result was not written runs again,
        rule 1 (leased-claim)), or it ended while the database was unreachable, so its outcome may
        never have been written and its lease may have lapsed (the outage section of the
        guarantees)."""
        if run.pid in self.killed:
            return True
        if run.end is None:
            return False
        return any(start - SLACK <= run.end <= end + self.visibility_timeout + SLACK
                   for start, end in self.windows)


def ran_twice(runs: Iterable[RunRecord], faults: Faults,
              only: Collection[int] | None = None) -> int:
    """Jobs whose body returned more than once where the documented window does not cover it:
    every completed run but the last must be excused by a fault. ``only`` limits the count to
    jobs meant to succeed (a job whose outcome is refused is retried by its policy, which is
    no double run)."""
    completed: dict[int, list[RunRecord]] = defaultdict(list)
    for run in runs:
        if run.completed and (only is None or run.job in only):
            completed[run.job].append(run)
    twice = 0
    for job_runs in completed.values():
        job_runs.sort(key=lambda r: r.end or 0.0)
        if any(not faults.excuses(r) for r in job_runs[:-1]):
            twice += 1
    return twice


def lost(expected: Mapping[int, frozenset[str]], final: Mapping[int, str | None],
         runs: Iterable[RunRecord]) -> int:
    """Jobs that vanished, finished otherwise than expected, or succeeded with no body that
    returned (a success nobody performed)."""
    returned = {r.job for r in runs if r.completed}
    count = 0
    for job_id, allowed in expected.items():
        status = final.get(job_id)
        if status is None:
            count += 1
        elif status in LIVE:
            continue  # stuck, not lost
        elif status not in allowed or (status == "succeeded" and job_id not in returned
                                       and "unrun" not in allowed):
            count += 1
    return count


def stuck(expected: Mapping[int, frozenset[str]], final: Mapping[int, str | None]) -> int:
    """Jobs still queued, running or waiting when the scenario's deadline passed."""
    return sum(1 for job_id in expected if final.get(job_id) in LIVE)


def cap_violations(runs: Iterable[RunRecord], name: str, cap: int, faults: Faults,
                   now: float) -> int:
    """Runs of ``name`` that started while ``cap`` others were still running (rule 5 (fleet-cap)).

    A run whose process was SIGKILLed ended at the kill; one with no end otherwise (its
    process was abandoned) is taken to run until ``now``. One run ending exactly when another
    starts does not overlap it.
    """
    points: list[tuple[float, int]] = []
    for run in runs:
        if run.name != name:
            continue
        end = run.end if run.end is not None else faults.killed.get(run.pid, now)
        points += [(run.start, 1), (max(end, run.start), -1)]
    points.sort()
    open_now = violations = 0
    for _, delta in points:
        if delta > 0 and open_now >= cap:
            violations += 1
        open_now += delta
    return violations


def recovery_seconds(fault_ends: Iterable[float], runs: Iterable[RunRecord]) -> float | None:
    """The longest wait, over the faults, from a fault's end to the end of the first run that
    started after it and returned: how long the queue stood still. A fault after which no run
    started at all had nothing left to run (jobs left behind show as stuck); None if, after
    some fault, runs started but none returned."""
    runs = list(runs)
    completed = sorted((r.start, r.end) for r in runs if r.completed and r.end is not None)
    last_start = max((r.start for r in runs), default=float("-inf"))
    worst = 0.0
    for fault_end in fault_ends:
        if fault_end > last_start:
            continue
        after = [end for start, end in completed if start >= fault_end]
        if not after:
            return None
        worst = max(worst, min(after) - fault_end)
    return worst


def instants(begun: datetime, end: datetime, every: int) -> list[datetime]:
    """The instants of an ``every``-second schedule in (``begun``, ``end``]: the multiples of
    ``every`` since the Unix epoch, as every worker computes them."""
    first = (math.floor(begun.timestamp()) // every + 1) * every
    return [datetime.fromtimestamp(t, UTC)
            for t in range(first, math.floor(end.timestamp()) + 1, every)]


def per_instant(scheduled: Iterable[datetime], begun: datetime, end: datetime, every: int
                ) -> tuple[list[datetime], dict[datetime, int]]:
    """Of the ``instants`` in (``begun``, ``end``], those no job was enqueued for, and those
    more than one was (instant: jobs); ``scheduled`` is each tick job's ``scheduled_for``."""
    counts = Counter(scheduled)
    return ([t for t in instants(begun, end, every) if t not in counts],
            {t: n for t, n in counts.items() if n > 1 and begun < t <= end})


_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def events(log: str, event: str) -> list[dict[str, str]]:
    """The ``event`` lines of a worker log, as their ``key=value`` fields."""
    found = []
    for line in log.splitlines():
        at = line.find(event + " ")
        if at < 0:
            continue
        found.append({k: v.strip('"') for k, v in _FIELD.findall(line[at + len(event):])})
    return found


def false_settle_stale(stale: Iterable[Mapping[str, str]],
                       attempts: Iterable[tuple[int, int, str, str]]) -> int:
    """``settle-stale`` lines for a settle that did land: the attempt it names is recorded
    with the very outcome, by the very worker, that called its settle stale.
    ``attempts`` are (job id, attempt, worker id, outcome) rows."""
    landed = {(job_id, attempt, worker, outcome) for job_id, attempt, worker, outcome in attempts}
    return sum(1 for s in stale
               if (int(s["job_id"]), int(s["attempt"]), s["worker_id"], s["outcome"]) in landed)


@dataclass
class ScenarioResult:
    """One row of the table; ``failures`` says which bar it missed (empty: it passed)."""

    scenario: str
    jobs: int = 0
    lost: int = 0
    ran_twice: int = 0
    stuck: int = 0
    cap_violations: int = 0
    recover_seconds: float | None = None
    #: False for a scenario with nothing to recover from (a bad input answered at once): its
    #: recovery prints "n/a", where None otherwise means the queue never recovered.
    timed: bool = True
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: More than the table shows (for ``--json``): say, the answer to each bad input.
    details: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failures

    def judge(self) -> ScenarioResult:
        """Add the bars every scenario shares: nothing lost, run twice, stuck or over a cap."""
        for name in ("lost", "ran_twice", "stuck", "cap_violations"):
            if getattr(self, name):
                self.failures.append(f"{name}={getattr(self, name)}")
        return self

    def fail_if(self, condition: bool, why: str) -> None:
        if condition:
            self.failures.append(why)

    def recovery_text(self) -> str:
        if not self.timed:
            return "n/a"
        return "never" if self.recover_seconds is None else f"{self.recover_seconds:.1f}"

    def as_dict(self) -> dict:
        return {"scenario": self.scenario, "jobs": self.jobs, "lost": self.lost,
                "ran_twice": self.ran_twice, "stuck": self.stuck,
                "cap_violations": self.cap_violations,
                "recover_seconds": (None if self.recover_seconds is None
                                    else round(self.recover_seconds, 2)),
                "passed": self.passed, "notes": self.notes, "failures": self.failures,
                "details": self.details}
