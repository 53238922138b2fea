"""Jobs the process pool's tests enqueue (``runjobworker --pool process``): bodies that never
look at their cancellation, and bodies that report the process they ran in."""

from __future__ import annotations

import os
import signal
import time

from opentelemetry import trace

from django_ultjobs import job
from django_ultjobs.runtime.context import JobContext


@job(timeout=1, max_attempts=1, takes_context=True)
def spin(ctx: JobContext) -> None:
    """A body no cancellation can reach: a busy loop that never checks its context."""
    while True:
        pass


@job(max_attempts=3, backoff=0.0)
def whose_pid(seconds: float = 0.0) -> int:
    """The pid of the process that ran the body, after ``seconds`` of sleep."""
    time.sleep(seconds)
    return os.getpid()


@job(max_attempts=1)
async def async_whose_pid() -> int:
    return os.getpid()


@job(max_attempts=1)
def sleep_deaf(seconds: float) -> None:
    """Sleeps through its cancellation."""
    time.sleep(seconds)


@job(takes_context=True, max_attempts=1)
def checks_then_stops(ctx: JobContext, seconds: float) -> int:
    """Cooperative: stops at its cancellation, looking every 10 ms."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    return os.getpid()


@job(concurrency=1, max_attempts=5, backoff=0.0)
def stamping(path: str, label: str, seconds: float, takes_alarm: bool = False) -> None:
    """A capped body that never checks its cancellation: appends ``label pid <wall time>`` to
    ``path`` every 20 ms for ``seconds``, so overlapping runs show in the file. ``takes_alarm``:
    first ignore ``SIGALRM`` and cancel any interval timer, as a body with alarms of its own
    would."""
    if takes_alarm:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.setitimer(signal.ITIMER_REAL, 0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with open(path, "a") as f:
            f.write(f"{label} {os.getpid()} {time.time():.6f}\n")
        time.sleep(0.02)


@job(takes_context=True, max_attempts=1)
def context_in_child(ctx: JobContext) -> dict[str, object]:
    """What a body sees in a child: its steps, progress, cancel state and trace."""
    first = ctx.step("first", lambda: os.getpid())
    ctx.set_progress(1, 2, "half")
    ctx.set_progress(2, 2, "done")
    span = trace.get_current_span().get_span_context()
    return {"pid": os.getpid(), "step": first, "cancelled": ctx.cancelled,
            "trace_id": f"{span.trace_id:032x}"}
