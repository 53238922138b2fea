"""Jobs the test suite enqueues; each leaves durable traces in RunLog or the filesystem."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from django.utils import timezone

from django_ultjobs import NonRetryable, job
from django_ultjobs.runtime.context import JobContext

from .models import RunLog


@job
def add(a: int, b: int) -> int:
    return a + b


@job(max_attempts=1)
def noop() -> None:
    return None


@job(max_attempts=1)
async def async_add(a: int, b: int) -> int:
    """An ``async def`` body: the worker runs it to completion in an event loop of its own."""
    await asyncio.sleep(0)
    return a + b


@job(takes_context=True, max_attempts=3, backoff=0.0)
def flaky(ctx: JobContext, fail_times: int) -> str:
    """Fails on its first ``fail_times`` attempts."""
    RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="flaky", pid=os.getpid())
    if ctx.attempt <= fail_times:
        raise RuntimeError(f"flaky failure on attempt {ctx.attempt}")
    return f"ok on attempt {ctx.attempt}"


@job(takes_context=True, max_attempts=5, backoff=0.0)
def record(ctx: JobContext, label: str = "", seconds: float = 0.0) -> int:
    """Log a run (start and end) and optionally take ``seconds``, stopping if cancelled."""
    log = RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label=label,
                                pid=os.getpid())
    if seconds:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            time.sleep(0.01)
    RunLog.objects.filter(pk=log.pk).update(ended_at=timezone.now())
    return ctx.attempt


@job(takes_context=True, max_attempts=5, backoff=0.0)
def block_until(ctx: JobContext, path: str, label: str = "", progress: int = -1) -> int:
    """Log the start (and ``progress`` of 100, labelled, when given), then wait (cooperatively)
    until ``path`` exists."""
    log = RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label=label,
                                pid=os.getpid())
    if progress >= 0:
        ctx.set_progress(progress, 100, label)
    while not Path(path).exists():
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    RunLog.objects.filter(pk=log.pk).update(ended_at=timezone.now())
    return ctx.attempt


@job(takes_context=True, max_attempts=1)
def ignore_cancel(ctx: JobContext, seconds: float) -> None:
    """A body that never looks at its cancellation."""
    time.sleep(seconds)


@job(takes_context=True, concurrency=2, max_attempts=20, backoff=0.0)
def capped(ctx: JobContext, seconds: float = 0.05) -> int:
    """A concurrency=2 job whose runs log start and end (for the fleet-slot proofs)."""
    log = RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="capped",
                                pid=os.getpid())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.005)
    RunLog.objects.filter(pk=log.pk).update(ended_at=timezone.now())
    return ctx.attempt


@job(concurrency=8, max_attempts=1)
def capped_noop() -> None:
    """A concurrency=8 job whose body returns at once: a drain of it is bound by its slots."""


@job(takes_context=True, concurrency=1, max_attempts=20, backoff=0.0)
def serial(ctx: JobContext, seconds: float = 0.01) -> int:
    """A concurrency=1 job."""
    log = RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="serial",
                                pid=os.getpid())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.002)
    RunLog.objects.filter(pk=log.pk).update(ended_at=timezone.now())
    return ctx.attempt


# -- jobs for tests/worker (the worker's rules) ---------------------------------------------------

#: Weak references to the contexts `worker_weakref_probe` ran with (rule 13 (nothing-leaks): none
#: outlives its run).
WORKER_CTX_REFS: list = []


@job(takes_context=True, max_attempts=3, backoff=0.0)
def worker_always_fails(ctx: JobContext) -> None:
    """Logs its run, then raises every time."""
    RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="always_fails",
                          pid=os.getpid())
    raise ValueError(f"worker_always_fails broke on attempt {ctx.attempt}")


@job(max_attempts=3, backoff=60.0, max_backoff=60.0)
def worker_fails_with_backoff() -> None:
    """Raises; its retry waits 30 to 60 seconds (backoff 60, equal jitter)."""
    raise RuntimeError("worker_fails_with_backoff failed")


@job(takes_context=True, concurrency=1, max_attempts=5, backoff=0.0)
def worker_serial_block_until(ctx: JobContext, path: str) -> int:
    """A concurrency=1 job that waits (cooperatively) until ``path`` exists."""
    log = RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="serial_block",
                                pid=os.getpid())
    while not Path(path).exists():
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    RunLog.objects.filter(pk=log.pk).update(ended_at=timezone.now())
    return ctx.attempt


@job(takes_context=True, max_attempts=1)
def worker_weakref_probe(ctx: JobContext) -> None:
    """Keeps only a weak reference to its context, for the rule 13 (nothing-leaks) leak check."""
    import weakref

    WORKER_CTX_REFS.append(weakref.ref(ctx))


# -- acceptance (tests/acceptance): runs logged in the JOBS database, timed on ITS clock ---------
#
# Runs in separate worker processes are compared with each other and with kill times the test
# reads from the database, so every timestamp here comes from the database's clock
# (clock_timestamp(): the real time of the statement, not of its transaction), never a process's.


def _db_now_sql(alias: str) -> str:
    from django.db import connections

    if connections[alias].vendor == "postgresql":
        return "clock_timestamp()"
    return "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def _clocked_run(ctx: JobContext, label: str, seconds: float, path: str,
                 every: float = 0.005) -> int:
    """Log the start, take ``seconds`` (and wait for ``path``), log the end; cooperative, looking
    at its cancellation every ``every`` seconds.

    A run that unwinds (cancelled: lost lease, lost slot, drain) still stamps its end, labelled
    ``<label>:unwound``, so a test can tell it from a run that finished its body.
    """
    from django.db import connections

    from django_ultjobs.conf import jobs_database

    alias = jobs_database()
    now = _db_now_sql(alias)
    with connections[alias].cursor() as cur:
        cur.execute(
            f"INSERT INTO testapp_runlog (job_id, attempt, label, pid, started_at) "
            f"VALUES (%s, %s, %s, %s, {now}) RETURNING id",
            [ctx.job_id, ctx.attempt, label, os.getpid()],
        )
        log_id = cur.fetchone()[0]
    ended_as = f"{label}:unwound"
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline or (path and not Path(path).exists()):
            ctx.raise_if_cancelled()
            time.sleep(every)
        ended_as = label
    finally:
        with connections[alias].cursor() as cur:
            cur.execute(f"UPDATE testapp_runlog SET ended_at = {now}, label = %s WHERE id = %s",
                        [ended_as, log_id])
    return ctx.attempt


@job(takes_context=True, max_attempts=5, backoff=0.0)
def clocked(ctx: JobContext, label: str = "clocked", seconds: float = 0.0,
            path: str = "", every: float = 0.005) -> int:
    """A run logged in the jobs database on its clock (see ``_clocked_run``)."""
    return _clocked_run(ctx, label, seconds, path, every)


@job(takes_context=True, concurrency=2, max_attempts=20, backoff=0.0)
def capped_clocked(ctx: JobContext, label: str = "capped", seconds: float = 0.05,
                   path: str = "") -> int:
    """``capped`` (concurrency=2) logged in the jobs database on its clock."""
    return _clocked_run(ctx, label, seconds, path)


@job(takes_context=True, concurrency=1, max_attempts=3)
def capped_ignoring(ctx: JobContext, seconds: float) -> None:
    """A capped job whose body never looks at its cancellation."""
    time.sleep(seconds)


@job(max_attempts=2, backoff=0.0)
def sized_result(size: int) -> str:
    """Return a string of ``size`` characters: a result the worker or the database may refuse
    to store (rules 30 (refused-outcome-no-wedge), 31 (bounded-outcomes))."""
    return "x" * size


@job(takes_context=True, concurrency=1, concurrency_key="customer", max_attempts=20,
     backoff=0.0)
def keyed_clocked(ctx: JobContext, customer: str, label: str = "keyed", seconds: float = 0.05,
                  path: str = "") -> int:
    """One run at a time per customer across the fleet (rule 50 (per-key-cap)), logged in the jobs
    database on its clock with the customer in the label."""
    return _clocked_run(ctx, f"{label}:{customer}", seconds, path)


@job(takes_context=True, rate_limit="50/s", max_attempts=3)
def rated_clocked(ctx: JobContext, label: str = "rated") -> int:
    """At most 50 starts a second across the fleet (rule 52 (fleet-rate-limit)), each logged on the
    database's clock."""
    return _clocked_run(ctx, label, 0.0, "")


# -- unique jobs (rules 65 (one-key-holder) to 69 (unique-in-transaction))
# --------------------------------------------------------------------


@job(unique=True, max_attempts=1)
def unique_touch(label: str, pause: float = 0.0) -> str:
    """A unique job: one per label while it is queued, running or waiting."""
    time.sleep(pause)
    return label


@job(unique_for=60.0, max_attempts=1)
def throttled_touch(label: str) -> str:
    """A throttled job: one per label per minute after it finished."""
    return label


# -- flow control: timeouts, retry_on, NonRetryable, expiry, cancel reasons
# (rules 55 (timeout-cancels) to 59 (cancel-reason-kept)) -------


@job(takes_context=True, timeout=0.5, max_attempts=2, backoff=0.0)
def timed_clocked(ctx: JobContext, label: str = "timed", seconds: float = 30.0,
                  path: str = "") -> int:
    """``clocked`` with a declared timeout of 0.5 s (rule 55 (timeout-cancels)); cooperative."""
    return _clocked_run(ctx, label, seconds, path)


@job(takes_context=True, max_attempts=2, backoff=0.0)
def overrunning(ctx: JobContext, seconds: float, label: str = "overrun") -> int:
    """Logs its start on the database's clock, then sleeps ``seconds`` in one call, never
    looking at its cancellation (rule 56 (overrun-reported)), and stamps its end."""
    from django.db import connections

    from django_ultjobs.conf import jobs_database

    alias = jobs_database()
    now = _db_now_sql(alias)
    with connections[alias].cursor() as cur:
        cur.execute(f"INSERT INTO testapp_runlog (job_id, attempt, label, pid, started_at) "
                    f"VALUES (%s, %s, %s, %s, {now}) RETURNING id",
                    [ctx.job_id, ctx.attempt, label, os.getpid()])
        log_id = cur.fetchone()[0]
    time.sleep(seconds)
    with connections[alias].cursor() as cur:
        cur.execute(f"UPDATE testapp_runlog SET ended_at = {now} WHERE id = %s", [log_id])
    return ctx.attempt


@job(takes_context=True, retry_on=(ConnectionError,), max_attempts=3, backoff=0.0)
def picky(ctx: JobContext, kind: str) -> str:
    """Retried only on ConnectionError (rule 57 (retry-on-only)): ``kind`` picks what the body
    raises."""
    RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label=kind, pid=os.getpid())
    if kind == "connection":
        raise ConnectionError(f"the service did not answer (attempt {ctx.attempt})")
    if kind == "value":
        raise ValueError("a bug: no retry mends it")
    if kind == "non_retryable":
        raise NonRetryable("the customer was deleted")
    return "ok"


@job(takes_context=True, max_attempts=3, backoff=0.0)
def gives_up(ctx: JobContext) -> None:
    """Raises NonRetryable on its first attempt, with attempts left (rule 57 (retry-on-only))."""
    RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="gives_up",
                          pid=os.getpid())
    raise NonRetryable("the order no longer exists")


@job(takes_context=True, max_attempts=1)
def reads_cancel_reason(ctx: JobContext) -> None:
    """Waits (cooperatively) to be cancelled, then logs ``ctx.cancel_reason``
    (rule 59 (cancel-reason-kept))."""
    log = RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="waiting",
                                pid=os.getpid())
    while not ctx.wait(0.01):
        pass
    RunLog.objects.filter(pk=log.pk).update(label=(ctx.cancel_reason or "")[:100],
                                            ended_at=timezone.now())
    ctx.raise_if_cancelled()


@job(takes_context=True, max_attempts=1, tags=["testapp", "progress"])
def counted(ctx: JobContext, total: int, held_back: int = 0) -> int:
    """Report progress on each of ``total`` items, then ``held_back`` more short of the end
    (the last value a throttle holds back, written when the body returns)."""
    for done in range(total + 1):
        ctx.set_progress(done, total, f"item {done}")
    for extra in range(held_back):
        ctx.set_progress(extra, total + 1, "again")
    return total


@job(takes_context=True, max_attempts=1)
async def async_counted(ctx: JobContext, total: int) -> int:
    """``counted`` with an ``async def`` body."""
    for done in range(total + 1):
        await ctx.aset_progress(done, total, "async")
        await asyncio.sleep(0)
    return total


@job(max_attempts=1)
async def async_sleep(seconds: float) -> float:
    """An ``async def`` body that only waits: the async lane runs many at once
    (rule 85 (one-event-loop))."""
    await asyncio.sleep(seconds)
    return seconds


@job(takes_context=True, max_attempts=3, backoff=0.0)
async def async_stuck(ctx: JobContext, first_seconds: float = 3600.0) -> int:
    """Stuck in ``await asyncio.sleep`` on its first attempt (an hour by default), done at once
    on a later one; never looks at its cancellation: only ``Task.cancel`` stops it
    (rule 86 (async-cancel))."""
    await asyncio.sleep(first_seconds if ctx.attempt == 1 else 0)
    return ctx.attempt


@job(takes_context=True, timeout=0.5, max_attempts=1)
async def async_stuck_timeout(ctx: JobContext) -> None:
    """Past its 0.5 s timeout in ``await asyncio.sleep(3600)``: cancelled by it
    (rule 86 (async-cancel))."""
    await asyncio.sleep(3600)


@job(max_attempts=1)
def sync_sleep(seconds: float) -> float:
    """A sync body that holds its thread for ``seconds``."""
    time.sleep(seconds)
    return seconds


#: The runs of ``async_capped_stuck`` in this process, by worker and job id.
CAPPED_STUCK_RUNS: list[tuple[str, int]] = []


@job(takes_context=True, concurrency=1, max_attempts=3, backoff=0.0)
async def async_capped_stuck(ctx: JobContext) -> int:
    """Capped at one run fleet-wide, stuck for an hour in its first run in this process (which
    can lose its slot), done at once in the next; returns which run of the job it was."""
    CAPPED_STUCK_RUNS.append((ctx.worker_id, ctx.job_id))
    runs = CAPPED_STUCK_RUNS.count((ctx.worker_id, ctx.job_id))
    await asyncio.sleep(3600 if runs == 1 else 0)
    return runs


@job(max_attempts=1)
def leaves_a_transaction_open(alias: str) -> None:
    """Turns autocommit off on its thread's connection and returns inside the transaction."""
    from django.db import connections

    conn = connections[alias]
    conn.set_autocommit(False)
    with conn.cursor() as cur:
        cur.execute("SELECT 1")


@job(max_attempts=1)
def reports_its_connection(alias: str) -> dict[str, bool]:
    """How its thread's connection was left by the run before it."""
    from django.db import connections

    conn = connections[alias]
    return {"autocommit": conn.get_autocommit(), "in_atomic_block": conn.in_atomic_block}


@job(max_attempts=1)
def connects(alias: str) -> None:
    """Opens its thread's connection (if it is not open yet)."""
    from django.db import connections

    connections[alias].ensure_connection()


@job(max_attempts=1)
def wf_step(label: str, fail: bool = False, path: str = "") -> str:
    """A workflow's node (tests/conformance/test_dependencies.py): appends its label to ``path``
    (when given), fails when told to, else returns its label."""
    if path:
        with open(path, "a") as f:
            f.write(label + "\n")
    if fail:
        raise NonRetryable(f"{label} was told to fail")
    return label


@job(takes_context=True, max_attempts=1)
def wf_gather(ctx: JobContext, label: str = "gather", path: str = "") -> dict[str, object]:
    """What its dependencies returned and its batch (ctx.dependency_results(), ctx.batch)."""
    if path:
        with open(path, "a") as f:
            f.write(label + "\n")
    batch = ctx.batch
    return {"results": list(ctx.dependency_results()),
            "batch": batch.pk if batch is not None else None}


# The process pool's jobs, registered with the others so every worker knows them at its start.
from . import pool_jobs  # noqa: E402, F401
