"""The executor of an ``async def`` body: ``run_job`` for the worker's event loop
(rule 85 (one-event-loop)).

It turns what happens into a ``Settlement`` exactly as ``run_job`` does, with the executor's own
helpers (same outcomes, retry policy and spans), and writes no SQL. What differs:

* the body runs as a task of its own on the worker's one event loop, never ``asyncio.run``;
* its cancellation cancels that task (``Task.cancel``, scheduled with
  ``loop.call_soon_threadsafe``), so a body stuck in ``await asyncio.sleep(3600)`` unwinds at
  once, and the run's cancel reason decides the outcome as for a sync run (rule 86 (async-cancel));
* what must not run on the loop runs on a thread: the run hooks (their receivers may use the
  ORM, which refuses to run inside an event loop; the context variables they set still reach
  the body, as ``sync_to_async`` carries them back) and the progress the throttle held back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections
from opentelemetry.trace import Span

from ..observability.tracing import acting_as, job_span_of
from ..runtime.context import JobContext
from ..runtime.steps import Suspend
from ..signals import job_finished, job_started
from ..store import JobStore, Settlement
from .executor import (
    exception_settlement,
    flush_progress,
    result_as_json,
    send_finished,
    start_run,
    success_settlement,
    suspended_settlement,
)
from .runs import Run
from .settlements import span_attributes
from .telemetry import Telemetry, telemetry_now

T = TypeVar("T")


async def arun_job(run: Run, *, store: JobStore, worker_id: str,
                   on_started: Callable[[], None], telemetry: Telemetry | None = None
                   ) -> Settlement:
    """Run ``run``'s ``async def`` body on the running loop and return how it ended
    (``telemetry`` as for ``run_job``)."""
    job, spec = run.job, run.spec
    assert spec is not None
    seen = telemetry if telemetry is not None else telemetry_now()
    with job_span_of(job.name, lambda: span_attributes(job), job.traceparent,
                     job.tracestate, traced=seen.traced) as span:
        started = start_run(run, span, store=store, worker_id=worker_id, on_started=on_started,
                            instruments=seen.instruments)
        if isinstance(started, Settlement):
            return started
        return await _run_body(run, span, *started)


async def _run_body(run: Run, span: Span, ctx: JobContext, args: list[Any],
                    kwargs: dict[str, Any]) -> Settlement:
    """Run the body between the run hooks (rule 72 (paired-run-hooks)) and return how it ended."""
    job, spec = run.job, run.spec
    assert spec is not None
    call_args = [ctx, *args] if spec.takes_context else args
    exception: BaseException | None = None
    started = time.monotonic()
    try:
        if job_started.receivers:
            await off_loop(job_started.send, sender=spec, context=ctx, args=args,
                            kwargs=kwargs)
        with acting_as(f"job:{job.id}"):
            result = await _cancellable(run, spec.func(*call_args, **kwargs))
        result_json = result_as_json(job.name, result)
    except Suspend as suspend:
        settlement = suspended_settlement(run, span, suspend)
    except BaseException as exc:  # CancelledError too: the cancel reason decides the outcome
        exception = exc
        settlement = exception_settlement(run, span, exc)
    else:
        settlement = success_settlement(run, span, result_json)
    run.duration = time.monotonic() - started
    if ctx.progress is not None and ctx.progress.has_pending:
        await off_loop(flush_progress, run, ctx)
    if job_finished.receivers:
        await off_loop(send_finished, run, ctx, args, kwargs, settlement, exception)
    return settlement


async def _cancellable(run: Run, body: Awaitable[T]) -> T:
    """Await ``body`` as a task that the run's cancellation cancels, from whatever thread
    fires it (the heartbeat's, the claim loop's, the drain's).

    A task of its own, not this coroutine's: only the body is cancelled, never the settle
    around it. The task copies this context (the span, ``acting_as``, what a hook set)."""
    task = asyncio.ensure_future(body)
    loop = asyncio.get_running_loop()

    def cancel() -> None:
        reason = run.scope.reason
        # A loop already closed (RuntimeError) means the process is exiting.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(task.cancel, str(reason) if reason else None)

    run.scope.set_canceller(cancel)
    try:
        return await task
    finally:
        # The scope outlives the run in nothing it holds (rule 13 (nothing-leaks)).
        run.scope.set_canceller(None)


async def off_loop(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``func`` on a thread, its context variables carried back, the connections it opened
    closed after (every thread closes its own, rule 13 (nothing-leaks))."""
    def call() -> Any:
        try:
            return func(*args, **kwargs)
        finally:
            connections.close_all()

    return await sync_to_async(call, thread_sensitive=False)()
