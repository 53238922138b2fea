"""The chaos run's jobs. Each run of a body appends its start and its end to a file of its
worker process's own, outside the database: the record of what ran must survive the very
faults (a restart, a terminated backend) that are being tried, and must not depend on the
queue's own tables, which are what is being judged."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from django_ultjobs import job
from django_ultjobs.exceptions import JobConfigurationError
from django_ultjobs.runtime.context import JobContext

#: How a run ended, in the file: the body returned, or it stopped on its cancel signal.
COMPLETED, CANCELLED = "completed", "cancelled"


def runs_dir() -> Path:
    return Path(os.environ["CHAOS_RUNS_DIR"])


def note_run(event: str, ctx: JobContext, name: str, **fields: Any) -> None:
    """Append one line about this run to the process's file (appends of one short line are
    atomic, and one file per process keeps threads' lines whole)."""
    line = json.dumps({"event": event, "job": ctx.job_id, "attempt": ctx.attempt,
                       "pid": os.getpid(), "t": time.time(), "name": name, **fields})
    with open(runs_dir() / f"runs-{os.getpid()}.jsonl", "a") as out:
        out.write(line + "\n")


def _run(ctx: JobContext, name: str, seconds: float) -> int:
    note_run("start", ctx, name)
    how = CANCELLED
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()  # cooperative: a lost lease or slot stops the run
            time.sleep(min(0.01, seconds))
        how = COMPLETED
    finally:
        note_run("end", ctx, name, how=how)
    return ctx.attempt


@job(takes_context=True, max_attempts=50, backoff=0.0)
def work(ctx: JobContext, seconds: float = 0.1) -> int:
    """Take ``seconds``; many attempts, so churn never uses them all up."""
    return _run(ctx, "work", seconds)


#: The fleet-wide cap of ``capped_work`` (rule 5 (fleet-cap)).
CAP = 2


@job(takes_context=True, max_attempts=50, backoff=0.0, concurrency=CAP)
def capped_work(ctx: JobContext, seconds: float = 0.1) -> int:
    """As ``work``, at most ``CAP`` runs at once across the fleet."""
    return _run(ctx, "capped_work", seconds)


@job(takes_context=True, max_attempts=2, backoff=0.0)
def refused_outcome(ctx: JobContext) -> str:
    """Return a value PostgreSQL refuses to store as jsonb (a NUL escape)."""
    _run(ctx, "refused_outcome", 0.0)
    return "refused \u0000 outcome"


def _infinite_backoff(ctx: JobContext) -> None:
    """Fail, so the retry policy computes an infinite delay."""
    _run(ctx, "infinite_backoff", 0.0)
    raise RuntimeError("failing on purpose, to be retried after an infinite backoff")


try:
    infinite_backoff = job(takes_context=True, max_attempts=2, backoff=float("inf"),
                           max_backoff=float("inf"))(_infinite_backoff)
except (JobConfigurationError, ValueError, TypeError):
    # Refused when declared: no infinite delay can reach SQL, and the scenario has one bad row
    # fewer to try.
    infinite_backoff = None


@job(max_attempts=1)
def sink(*args: Any, **kwargs: Any) -> None:
    """Take any arguments (the enqueue checks try them); never meant to run."""
