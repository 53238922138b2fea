"""Jobs for the tracing tests (registered on import; the tests run them on an in-process worker)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from django_ultjobs import job
from django_ultjobs.observability.tracing import current_actor
from django_ultjobs.runtime.context import JobContext


@job(name="tracing_noop", max_attempts=1)
def noop() -> dict[str, Any]:
    """Returns the executor thread it ran on and who it would enqueue as."""
    return {"thread": threading.get_ident(), "actor": current_actor()}


@job(name="tracing_child", max_attempts=1)
def child() -> str:
    return "child"


@job(name="tracing_parent", max_attempts=1)
def parent() -> int:
    """Enqueues ``tracing_child`` from its body (not from a step)."""
    return child.enqueue().id


@job(name="tracing_fails", max_attempts=2, backoff=0.0)
def fails() -> None:
    raise ValueError("card declined")


@job(name="tracing_until_cancelled", takes_context=True, max_attempts=1)
def until_cancelled(ctx: JobContext) -> None:
    """Waits (cooperatively) for its cancellation, at most 20 s."""
    ctx.wait(20)
    ctx.raise_if_cancelled()


@job(name="tracing_capped", takes_context=True, concurrency=1, max_attempts=3)
def capped(ctx: JobContext, marker: str) -> str:
    """First run: waits for its cancellation (a lost slot). Later runs: done at once."""
    path = Path(marker)
    if path.exists():
        return "second run"
    path.touch()
    ctx.wait(20)
    ctx.raise_if_cancelled()
    return "never"


@job(name="tracing_steps", takes_context=True, max_attempts=2, backoff=0.0)
def steps(ctx: JobContext) -> list[str]:
    """Two steps, then fails on its first attempt; the retry replays them and runs a third."""
    done = [ctx.step("one", lambda: "1"), ctx.step("two", lambda: "2")]
    if ctx.attempt == 1:
        raise RuntimeError("fails after step two")
    return [*done, ctx.step("three", lambda: "3")]
