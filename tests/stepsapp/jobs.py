"""Jobs for the durable steps / events / sleep tests; every function call leaves a RunLog row."""

from __future__ import annotations

import os
from pathlib import Path

from django_ultjobs import EventTimeoutError, job
from django_ultjobs.runtime.context import JobContext
from tests.testapp.models import RunLog


def _mark(ctx: JobContext, label: str) -> str:
    RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label=label, pid=os.getpid())
    return label


@job(takes_context=True, max_attempts=3, backoff=0.0)
def three_steps(ctx: JobContext, fail_after_two: bool) -> list[str]:
    """Fails after step 2 on its first attempt; steps 1 and 2 must never run again."""
    a = ctx.step("one", lambda: _mark(ctx, "fn:one"))
    b = ctx.step("two", lambda: _mark(ctx, "fn:two"))
    if fail_after_two and ctx.attempt == 1:
        raise RuntimeError("boom after step two")
    c = ctx.step("three", lambda: _mark(ctx, "fn:three"))
    return [a, b, c]


@job(takes_context=True, max_attempts=1)
def duplicate_step(ctx: JobContext) -> None:
    ctx.step("same", lambda: 1)
    ctx.step("same", lambda: 2)


@job(takes_context=True, max_attempts=1)
def non_json_step(ctx: JobContext) -> None:
    ctx.step("bad", lambda: object())


@job(takes_context=True, max_attempts=2, backoff=0.0)
def wait_for_order(ctx: JobContext, order_id: int, timeout: float | None = None) -> dict:
    _mark(ctx, "started")
    payload = ctx.wait_for_event("order.shipped", match={"order_id": order_id}, timeout=timeout)
    ctx.step("after", lambda: _mark(ctx, "fn:after"))
    return payload


@job(takes_context=True, max_attempts=1)
def wait_or_timeout(ctx: JobContext, timeout: float) -> str:
    try:
        ctx.wait_for_event("never.sent", timeout=timeout)
    except EventTimeoutError:
        return "timed out"
    return "got it"


@job(takes_context=True, max_attempts=1)
def nap(ctx: JobContext, seconds: float) -> str:
    ctx.step("before", lambda: _mark(ctx, "fn:before"))
    ctx.sleep("nap", seconds)
    ctx.step("after", lambda: _mark(ctx, "fn:after"))
    return "rested"


@job(takes_context=True, max_attempts=5, backoff=0.0)
def step_then_block(ctx: JobContext, path: str) -> str:
    """Step one, then block until ``path`` exists (the test SIGKILLs the worker meanwhile)."""
    ctx.step("one", lambda: _mark(ctx, "fn:one"))
    _mark(ctx, "blocking")
    while not Path(path).exists():
        ctx.raise_if_cancelled()
        ctx.wait(0.01)
    ctx.step("two", lambda: _mark(ctx, "fn:two"))
    return "done"


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot print itself")


@job(max_attempts=1)
def raises_unprintable() -> None:
    raise Unprintable()


@job(takes_context=True, max_attempts=3, backoff=0.0)
def cancel_myself_then_fail(ctx: JobContext) -> None:
    """Asks for its own cancellation, then fails before any heartbeat can deliver it."""
    from django_ultjobs.conf import get_settings
    from django_ultjobs.models import Job

    _mark(ctx, "ran")
    Job.objects.using(get_settings().DATABASE).filter(pk=ctx.job_id).update(
        cancel_requested=True)
    raise RuntimeError("fails right after the cancel request")


@job(takes_context=True, max_attempts=1)
def wait_paid(ctx: JobContext) -> dict:
    return ctx.wait_for_event("paid", match={"paid": True}, timeout=30)


@job(takes_context=True, max_attempts=1)
def nested_match(ctx: JobContext) -> None:
    ctx.wait_for_event("x", match={"addr": {"city": "X"}})


@job(takes_context=True, max_attempts=1)
def atomic_read_then_write(ctx: JobContext) -> int:
    """An atomic step whose function reads, then writes (one attempt: any error fails the job)."""

    def count_then_log() -> int:
        seen = RunLog.objects.filter(job_id=ctx.job_id).count()
        RunLog.objects.create(job_id=ctx.job_id, attempt=ctx.attempt, label="fn:atomic",
                              pid=os.getpid())
        return seen

    return ctx.step("read-then-write", count_then_log, atomic=True)
