"""Jobs the test suite enqueues; each leaves durable traces in RunLog or the filesystem."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.utils import timezone

from django_ultjobs import job
from django_ultjobs.context import JobContext

from .models import RunLog


@job
def add(a: int, b: int) -> int:
    return a + b


@job(max_attempts=1)
def noop() -> None:
    return None


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
def block_until(ctx: JobContext, path: str, label: str = "") -> int:
    """Log the start, then wait (cooperatively) until ``path`` exists."""
    log = RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label=label,
                                pid=os.getpid())
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
