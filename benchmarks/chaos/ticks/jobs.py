"""One periodic job per catch-up policy; each run is written down like every chaos run."""

from __future__ import annotations

from benchmarks.chaos.jobs import note_run
from django_ultjobs import job
from django_ultjobs.runtime.context import JobContext

#: Each job's name, its interval in seconds and its catch-up policy.
TICKS = {"chaos_tick_latest": (1, "latest"), "chaos_tick_none": (2, "none"),
         "chaos_tick_all": (1, "all")}


def _run(ctx: JobContext, name: str) -> None:
    note_run("start", ctx, name)
    note_run("end", ctx, name, how="completed")


@job(every=1, takes_context=True, max_attempts=5, backoff=0.0)
def chaos_tick_latest(ctx: JobContext) -> None:
    """Ticks every second; a missed tick is caught up by the newest (``catch_up="latest"``)."""
    _run(ctx, "chaos_tick_latest")


@job(every=2, catch_up="none", takes_context=True, max_attempts=5, backoff=0.0)
def chaos_tick_none(ctx: JobContext) -> None:
    """Ticks every 2 s; a tick more than 5 s late is not run (``catch_up="none"``)."""
    _run(ctx, "chaos_tick_none")


@job(every=1, catch_up="all", takes_context=True, max_attempts=5, backoff=0.0)
def chaos_tick_all(ctx: JobContext) -> None:
    """Ticks every second; every missed tick is caught up (``catch_up="all"``)."""
    _run(ctx, "chaos_tick_all")
