"""The rate gate: which claimed runs of rate-limited jobs may start now (rules 52 (fleet-rate-limit)
and 53 (rate-wait-unburned)).

Apart from the claim loop because its question is "may this start yet?" and its answer comes
from the database: one statement per claim takes the starts of every bucket the claim touched.
A run over its limit goes back to the queue without burning an attempt, due when its bucket
will have a start for it, so it neither spins the claim loop nor stands in front of other jobs.

The gate also remembers, per job limited as a whole, when its bucket has a start again, and
the claim asks for no more runs of it than its burst until then none at all: a backlog of a
limited job otherwise filled every claim, to hand all but one of the runs straight back.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ..core.rate_limits import RateLimit
from ..core.slot_keys import slot_key_for
from ..jobs.spec import JobSpec
from ..models import JobStatus
from ..observability.logs import log_event
from ..store import JobStore, RateTaken, Settlement
from .runs import Run
from .settlements import settlement_for

logger = logging.getLogger("django_ultjobs.worker")

#: Seconds a run waits before trying again when the take itself failed (the database is away).
RETRY_AFTER_FAILED_TAKE = 1.0


def over_limit_settlement(run: Run, delay: float) -> Settlement:
    """Hand ``run`` back, due in ``delay`` seconds, its attempt not burned and no attempt row
    written: it never started (rule 53 (rate-wait-unburned))."""
    return settlement_for(run, JobStatus.QUEUED, None, attempt_delta=-1, delay=delay)


class RateGate:
    """This worker's side of the rate limits: the takes, and what they taught it."""

    def __init__(self, store: JobStore, worker_id: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.worker_id = worker_id
        self._clock = clock
        self._lock = threading.Lock()
        # Per job limited as a whole: when (clock) its bucket has a start again.
        self._ready: dict[str, float] = {}
        # When the runs handed back over their limits come due, soonest first.
        self._due: list[float] = []

    def claim_limits(self, jobs: Mapping[str, JobSpec]) -> dict[str, int]:
        """How many runs the next claim may take of each job limited as a whole (no
        ``rate_limit_key``, no ``concurrency``): its burst once its bucket has a start again,
        none before. Jobs limited per key are claimed as any other: their keys are many."""
        now = self._clock()
        with self._lock:
            return {name: spec.rate.burst if self._ready.get(name, now) <= now else 0
                    for name, spec in jobs.items()
                    if spec.rate is not None and spec.rate_limit_key is None
                    and spec.concurrency is None}

    def gate(self, runs: Sequence[Run]) -> tuple[list[Run], list[tuple[Run, float]]]:
        """Split ``runs`` into those that may start and those over their rate limit, each with
        the seconds until its bucket has a start for it. Runs of jobs without a limit always
        start."""
        buckets: dict[str, tuple[RateLimit, list[Run]]] = {}
        free: list[Run] = []
        for run in runs:
            rate = run.spec.rate if run.spec is not None else None
            if rate is None:
                free.append(run)
                continue
            buckets.setdefault(self._bucket_of(run), (rate, []))[1].append(run)
        if not buckets:
            return free, []
        answer = self._take(buckets)
        waiting: list[tuple[Run, float]] = []
        now = self._clock()
        for key, (rate, group) in buckets.items():
            taken = answer.get(key)
            granted, wait = (taken.granted, taken.wait) if taken else (0, RETRY_AFTER_FAILED_TAKE)
            if taken and granted:
                log_event(logger, logging.INFO, "jobs.worker.rate-granted",
                          worker_id=self.worker_id, key=key, granted=granted, at_us=taken.at)
            self._learn(group[0], key, now + wait)
            free += group[:granted]
            # Spread out, one interval apart: due all at once, they would be claimed together
            # and all but one handed back again.
            waiting += [(run, wait + i * rate.interval / 1e6)
                        for i, run in enumerate(group[granted:])]
        with self._lock:
            for _, delay in waiting:
                heapq.heappush(self._due, now + delay)
        return free, waiting

    def until_due(self, wait: float) -> float:
        """``wait``, cut short to when the soonest run handed back over its limit, or the
        soonest bucket of a job limited as a whole, has a start again: a start nobody claims in
        time is lost (rule 52 (fleet-rate-limit))."""
        now = self._clock()
        with self._lock:
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)
            soonest = [self._due[0]] if self._due else []
            soonest += [t for t in self._ready.values() if t > now]
        return min(wait, min(soonest) - now) if soonest else wait

    def _take(self, buckets: Mapping[str, tuple[RateLimit, list[Run]]]) -> dict[str, RateTaken]:
        wanted = [(key, rate.interval, rate.tolerance, len(group))
                  for key, (rate, group) in sorted(buckets.items())]
        try:
            return self.store.take_starts(wanted)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.rate-take-failed",
                      worker_id=self.worker_id, buckets=len(wanted), error=repr(exc))
            return {}

    def _learn(self, run: Run, key: str, ready_at: float) -> None:
        """Remember when the bucket of a job limited as a whole has a start again."""
        spec = run.spec
        if spec is not None and key == slot_key_for(spec.name):
            with self._lock:
                self._ready[spec.name] = ready_at

    def _bucket_of(self, run: Run) -> str:
        """The bucket a start of ``run`` draws from: its job's, or its key's
        (``rate_limit_key``).

        A key function that fails here (it passed at enqueue) falls back to the job's own
        bucket: the limit then holds for the whole job, never for nothing."""
        spec = run.spec
        assert spec is not None
        try:
            return spec.rate_key_of(run.job.args, run.job.kwargs)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.rate-key-failed",
                      worker_id=self.worker_id, job_id=run.id, job=spec.name, error=repr(exc))
            return slot_key_for(spec.name)
