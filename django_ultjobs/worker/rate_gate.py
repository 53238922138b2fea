"""The rate gate: which claimed runs of rate-limited jobs may start now (rules 52 and 53).

Apart from the claim loop because its question is "may this start yet?" and its answer comes
from the database: one statement per claim takes the starts of every bucket the claim touched.
A run over its limit goes back to the queue without burning an attempt, due when its bucket
will have a start for it, so it neither spins the claim loop nor stands in front of other jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..logs import log_event
from ..models import JobStatus
from ..rate_limits import RateLimit
from ..slot_keys import slot_key_for
from ..store import JobStore, Settlement
from .executor import settlement_for
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")

#: Seconds a run waits before trying again when the take itself failed (the database is away).
RETRY_AFTER_FAILED_TAKE = 1.0


def over_limit_settlement(run: Run, delay: float) -> Settlement:
    """Hand ``run`` back, due in ``delay`` seconds, its attempt not burned and no attempt row
    written: it never started (rule 53)."""
    return settlement_for(run, JobStatus.QUEUED, None, attempt_delta=-1, delay=delay)


def gate(store: JobStore, runs: Sequence[Run], worker_id: str
         ) -> tuple[list[Run], list[tuple[Run, float]]]:
    """Split ``runs`` into those that may start and those over their rate limit, each with the
    seconds until its bucket has a start for it. Runs of jobs without a limit always start."""
    buckets: dict[str, tuple[RateLimit, list[Run]]] = {}
    free: list[Run] = []
    for run in runs:
        rate = run.spec.rate if run.spec is not None else None
        if rate is None:
            free.append(run)
            continue
        buckets.setdefault(_bucket_of(run, worker_id), (rate, []))[1].append(run)
    if not buckets:
        return free, []
    wanted = [(key, rate.interval, rate.tolerance, len(group))
              for key, (rate, group) in sorted(buckets.items())]
    try:
        answer = store.take_starts(wanted)
    except Exception as exc:
        log_event(logger, logging.WARNING, "jobs.worker.rate-take-failed", worker_id=worker_id,
                  buckets=len(wanted), error=repr(exc))
        answer = {}
    waiting: list[tuple[Run, float]] = []
    for key, (rate, group) in buckets.items():
        granted, wait = answer.get(key, (0, RETRY_AFTER_FAILED_TAKE))
        free += group[:granted]
        # Spread out, one interval apart: due all at once, they would be claimed together and
        # all but one handed back again.
        waiting += [(run, wait + i * rate.interval / 1e6)
                    for i, run in enumerate(group[granted:])]
    return free, waiting


def _bucket_of(run: Run, worker_id: str) -> str:
    """The bucket a start of ``run`` draws from: its job's, or its key's (``rate_limit_key``).

    A key function that fails here (it passed at enqueue) falls back to the job's own bucket:
    the limit then holds for the whole job, never for nothing."""
    spec = run.spec
    assert spec is not None
    try:
        return spec.rate_key_of(run.job.args, run.job.kwargs)
    except Exception as exc:
        log_event(logger, logging.WARNING, "jobs.worker.rate-key-failed", worker_id=worker_id,
                  job_id=run.id, job=spec.name, error=repr(exc))
        return slot_key_for(spec.name)
