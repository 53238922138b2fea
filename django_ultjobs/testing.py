"""Test helpers: run the queued jobs in the test's own thread, assert what was enqueued.

``run_jobs()`` is a burst worker in the calling thread: it claims, runs and settles every
runnable job through the worker's own executor and the store's own fenced statements, one at a
time, including the jobs those jobs enqueue, and returns how each run ended
(rule 74 (run-jobs-real-path)). It uses the caller's connection, so it sees (and writes inside) the
transaction of a ``TestCase``.

For pytest, ``pytest_plugins = ["django_ultjobs.testing"]`` in the root ``conftest.py`` adds the
``ultjobs`` fixture (docs/testing.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from .conf import get_settings
from .jobs import registry
from .jobs.registry import get_job
from .jobs.spec import JobSpec
from .models import Job, JobStatus
from .store import ClaimedJob, JobStore, Settlement, get_store
from .worker.executor import run_job
from .worker.runs import Run
from .worker.settlements import settlement_before_run

#: The most runs one ``run_jobs()`` makes unless told otherwise: past it, a job that enqueues
#: itself would loop for ever, and the test should say so rather than hang.
DEFAULT_LIMIT = 1000
#: The visibility timeout of a run_jobs() claim: nothing heartbeats it, and the run happens
#: before the call returns, so it only has to outlast the longest body a test runs.
_VISIBILITY_TIMEOUT = 3600.0
#: Not given (None is a value an argument can have).
_ANY: Any = object()


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How one run of ``run_jobs()`` ended."""

    job_id: int
    name: str
    queue: str
    attempt: int
    #: The attempt's outcome: ``succeeded``, ``failed``, ``retrying``, ``cancelled``, ...
    outcome: str | None
    #: The job's status after the run (``queued`` again for a retry).
    status: str
    #: The body's return value (JSON, as stored) for a success, else None.
    result: Any
    #: The error recorded for the attempt (a traceback), or None.
    error: str | None


def run_jobs(*, queues: Sequence[str] | None = None, database: str | None = None,
             limit: int = DEFAULT_LIMIT, retries: bool = False) -> list[RunOutcome]:
    """Run every runnable job (of ``queues``, default all), one at a time in this thread, until
    none is runnable; return how each run ended, in order.

    A retry whose backoff has not passed, a delayed job and a job no worker knows (parked)
    are not runnable, so they are not run again. With ``retries=True`` every retry runs at
    once, whatever its backoff, so one call drives a job through all its attempts to its last
    outcome: inside a ``TestCase`` on PostgreSQL the database's clock is the transaction's
    start, and no backoff ever passes. Raises ``AssertionError`` when ``limit`` runs were made
    and jobs are still runnable (a job that enqueues itself?)."""
    store = get_store(database)
    worker_id = f"run_jobs:{os.getpid()}"
    outcomes: list[RunOutcome] = []
    while True:
        if retries:
            _make_retries_due(store, queues)
        claimed = _claim_one(store, worker_id, queues)
        if claimed is None:
            return outcomes
        if len(outcomes) >= limit:
            raise AssertionError(
                f"run_jobs() ran {limit} jobs and more are runnable (job {claimed.name!r} next): "
                "does a job enqueue itself? Pass a larger limit= if the test needs more runs")
        outcomes.append(_run_one(store, worker_id, claimed))


def _claim_one(store: JobStore, worker_id: str, queues: Sequence[str] | None
               ) -> ClaimedJob | None:
    """Claim the next runnable job, or None. Every kind is claimed as if uncapped: one run at a
    time keeps any cap, and no fleet slot is taken (a worker running meanwhile does not see
    them)."""
    names = list(queues) if queues is not None else _runnable_queues(store.alias)
    if not names:
        return None
    batch = store.claim(worker_id=worker_id, queues=names, limit=1,
                        visibility_timeout=_VISIBILITY_TIMEOUT, caps={})
    return batch[0] if batch else None


def _make_retries_due(store: JobStore, queues: Sequence[str] | None) -> None:
    """Make the retries of ``queues`` (default all) runnable now, whatever their backoff."""
    names = list(queues) if queues is not None else _runnable_queues(store.alias)
    if names:
        store.make_retries_due(names)


def _runnable_queues(alias: str) -> list[str]:
    """The queues with a job a claim may take, whatever the worker would serve."""
    return list(Job.objects.using(alias)
                .filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.WAITING])
                .values_list("queue", flat=True).distinct())


def _run_one(store: JobStore, worker_id: str, claimed: ClaimedJob) -> RunOutcome:
    """Run one claimed job as a worker would and write its settle under its token."""
    run = Run(job=claimed, spec=get_job(claimed.name))
    settlement = settlement_before_run(run)
    if settlement is None:
        settlement = _run_body(store, worker_id, run)
    applied = store.settle([settlement], worker_id)
    if claimed.id not in applied:
        raise AssertionError(f"the settle of job {claimed.id} ({claimed.name}) was refused as "
                             "stale: did the test change the row while it ran?")
    return _outcome(run, settlement)


def _run_body(store: JobStore, worker_id: str, run: Run) -> Settlement:
    """The body's run. Inside the test's transaction, in a savepoint: a database error in the
    body rolls back to it (as the worker's own transaction would end), not the whole test."""
    connection = connections[store.alias]
    if not connection.in_atomic_block:
        return run_job(run, store=store, worker_id=worker_id, on_started=_nothing)
    with transaction.atomic(using=store.alias):
        return run_job(run, store=store, worker_id=worker_id, on_started=_nothing)


def _nothing() -> None:
    """No heartbeat to hand the run to: nothing heartbeats a run that ends before the call does."""


def _outcome(run: Run, settlement: Settlement) -> RunOutcome:
    job = run.job
    result = json.loads(settlement.result_json) if settlement.result_json is not None else None
    return RunOutcome(job_id=job.id, name=job.name, queue=job.queue, attempt=job.attempt,
                      outcome=settlement.outcome, status=settlement.status, result=result,
                      error=settlement.error)


# -- assertions -----------------------------------------------------------------------------------


def job_name(job: JobSpec | str | Any) -> str:
    """The stored name of ``job``: a ``@job``, a ``django.tasks`` task (its module path) or a
    name."""
    if isinstance(job, JobSpec):
        return job.name
    if isinstance(job, str):
        return job
    module_path = getattr(job, "module_path", None)
    if isinstance(module_path, str):
        return module_path
    raise TypeError(f"{job!r} is not a job: pass a @job, a django.tasks task or a job name")


def enqueued(job: JobSpec | str | Any, *, args: Sequence[Any] = _ANY,
             kwargs: dict[str, Any] = _ANY, queue: str | None = None,
             database: str | None = None) -> list[Job]:
    """The queued (not yet run, or queued again for a retry) rows of ``job`` whose arguments are
    ``args`` and ``kwargs`` (compared as stored: JSON), oldest first."""
    alias = database or get_settings().DATABASE
    rows = Job.objects.using(alias).filter(name=job_name(job), status=JobStatus.QUEUED)
    if queue is not None:
        rows = rows.filter(queue=queue)
    want_args = _as_stored(list(args)) if args is not _ANY else _ANY
    want_kwargs = _as_stored(dict(kwargs)) if kwargs is not _ANY else _ANY
    return [row for row in rows.order_by("id")
            if (want_args is _ANY or row.args == want_args)
            and (want_kwargs is _ANY or row.kwargs == want_kwargs)]


def assert_enqueued(job: JobSpec | str | Any, *, args: Sequence[Any] = _ANY,
                    kwargs: dict[str, Any] = _ANY, count: int | None = None,
                    queue: str | None = None, database: str | None = None) -> list[Job]:
    """Assert that ``job`` is queued with these arguments: ``count`` times exactly, or at least
    once; return the matching rows."""
    found = enqueued(job, args=args, kwargs=kwargs, queue=queue, database=database)
    if (len(found) == count) if count is not None else found:
        return found
    wanted = "once or more" if count is None else f"{count} time(s)"
    raise AssertionError(
        f"expected {job_name(job)}{_call(args, kwargs)} queued {wanted}, found {len(found)}. "
        f"{_queued_summary(job, queue, database)}")


def assert_not_enqueued(job: JobSpec | str | Any, *, args: Sequence[Any] = _ANY,
                        kwargs: dict[str, Any] = _ANY, queue: str | None = None,
                        database: str | None = None) -> None:
    """Assert that ``job`` is not queued with these arguments (with any, when none are given)."""
    found = enqueued(job, args=args, kwargs=kwargs, queue=queue, database=database)
    if found:
        raise AssertionError(
            f"expected no {job_name(job)}{_call(args, kwargs)} queued, found {len(found)} "
            f"(ids {', '.join(str(row.id) for row in found[:10])})")


def _as_stored(value: Any) -> Any:
    """``value`` as the job's JSON column gives it back (tuples become lists, and so on)."""
    return json.loads(json.dumps(value))


def _call(args: Any, kwargs: Any) -> str:
    parts = [] if args is _ANY else [repr(a) for a in args]
    parts += [] if kwargs is _ANY else [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})" if args is not _ANY or kwargs is not _ANY else ""


def _queued_summary(job: Any, queue: str | None, database: str | None) -> str:
    rows = enqueued(job, queue=queue, database=database)
    if not rows:
        return f"No {job_name(job)} job is queued."
    shown = "; ".join(f"id {r.id}: args={r.args!r} kwargs={r.kwargs!r}" for r in rows[:10])
    more = f" (and {len(rows) - 10} more)" if len(rows) > 10 else ""
    return f"Queued {job_name(job)} jobs: {shown}{more}."


# -- pytest ---------------------------------------------------------------------------------------


def unregister(name: str) -> None:
    """Forget the job registered as ``name``: a test that registers throwaway jobs cleans up
    with this. A running site never forgets a job, so the registry has no call for it."""
    registry._registry.pop(name, None)
    registry._generation += 1  # the worker recomputes its fleet caps


class JobsHelper:
    """What the ``ultjobs`` fixture gives a test: the helpers above, on one database."""

    def __init__(self, database: str | None = None) -> None:
        self.database = database

    def run(self, *, queues: Sequence[str] | None = None, limit: int = DEFAULT_LIMIT,
            retries: bool = False) -> list[RunOutcome]:
        return run_jobs(queues=queues, database=self.database, limit=limit, retries=retries)

    def enqueued(self, job: Any, **match: Any) -> list[Job]:
        return enqueued(job, database=self.database, **match)

    def assert_enqueued(self, job: Any, **match: Any) -> list[Job]:
        return assert_enqueued(job, database=self.database, **match)

    def assert_not_enqueued(self, job: Any, **match: Any) -> None:
        assert_not_enqueued(job, database=self.database, **match)


try:
    import pytest
except ImportError:  # the helpers above work without pytest; the fixture needs it
    pass
else:

    @pytest.fixture
    def ultjobs() -> Iterator[JobsHelper]:
        """The test helpers on ``ULTJOBS["DATABASE"]``; mark the test ``django_db`` as usual."""
        yield JobsHelper()


__all__ = [
    "RunOutcome",
    "assert_enqueued",
    "assert_not_enqueued",
    "enqueued",
    "job_name",
    "run_jobs",
]
