"""The executor: runs one job body and turns whatever happens into a ``Settlement``
(``settlements.py`` decides each outcome).

It runs user code and writes no SQL; the completer writes what it returns. Everything that can
raise before the body (looking up the job, checking the arguments, building the context) happens
before ``on_started`` puts the run under the heartbeat (rule 13 (nothing-leaks)).
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from ..conf import get_settings
from ..core import jsonargs
from ..exceptions import JobResultTooLargeError, JobSlotLostError, JobTimeoutError
from ..models import AttemptOutcome, JobStatus
from ..observability.logs import log_event
from ..observability.metrics import Instruments, record_wait_on
from ..observability.tracing import acting_as, job_span_of
from ..runtime.context import JobContext
from ..runtime.progress import JobProgress
from ..runtime.steps import StepLedger, Suspend
from ..signals import job_finished, job_started
from ..store import JobStore, Settlement
from .deadlines import body_over
from .runs import Run
from .settlements import (
    cancel_settlement,
    describe,
    failed_settlement,
    retry_or_fail,
    settlement_for,
    span_attributes,
    trim_error,
)
from .telemetry import Telemetry, telemetry_now

logger = logging.getLogger("django_ultjobs.worker")


def run_job(run: Run, *, store: JobStore, worker_id: str, on_started: Callable[[], None],
            telemetry: Telemetry | None = None) -> Settlement:
    """Run ``run``'s body and return how it ended. Never raises. ``telemetry``: the providers
    as the worker looked them up for the run's claim (None: looked up now)."""
    job, spec = run.job, run.spec
    assert spec is not None
    seen = telemetry if telemetry is not None else telemetry_now()
    with job_span_of(job.name, lambda: span_attributes(job), job.traceparent,
                     job.tracestate, traced=seen.traced) as span:
        started = start_run(run, span, store=store, worker_id=worker_id, on_started=on_started,
                            instruments=seen.instruments)
        if isinstance(started, Settlement):
            return started
        return _run_body(run, span, *started)


def start_run(run: Run, span: Span, *, store: JobStore, worker_id: str,
              on_started: Callable[[], None], instruments: Instruments | None
              ) -> tuple[JobContext, list[Any], dict[str, Any]] | Settlement:
    """What every run does before its body, sync or async (``async_executor.arun_job``): its
    context and arguments (or the settlement of a run that cannot start), the start reported,
    and the wait from its due time recorded."""
    prepared = prepare_run(run, span, store=store, worker_id=worker_id)
    if isinstance(prepared, Settlement):
        return prepared
    on_started()
    job = run.job
    if job.due_at is not None and instruments is not None:
        record_wait_on(instruments, job.name, job.queue,
                       (job.claimed_at - job.due_at).total_seconds())
    return prepared


def prepare_run(run: Run, span: Span, *, store: JobStore, worker_id: str
                ) -> tuple[JobContext, list[Any], dict[str, Any]] | Settlement:
    """The run's context and arguments; or the failed settlement of a run that cannot start
    (its stored arguments are not a JSON array and object). Writes nothing."""
    job = run.job
    try:
        args = list(job.args) if isinstance(job.args, list) else _bad("args", job.args)
        kwargs = (dict(job.kwargs) if isinstance(job.kwargs, dict)
                  else _bad("kwargs", job.kwargs))
        run.ledger = StepLedger(store=store, job=job, scope=run.scope)
        ctx = JobContext(job_id=job.id, name=job.name, attempt=job.attempt,
                         max_attempts=job.max_attempts, queue=job.queue, worker_id=worker_id,
                         enqueued_by=job.enqueued_by, scope=run.scope, ledger=run.ledger,
                         progress=JobProgress(job.id, job.token, store.save_progress))
    except Exception as exc:
        _record_exception(span, exc)
        span.set_status(Status(StatusCode.ERROR, describe(exc)))
        span.set_attribute("job.outcome", AttemptOutcome.FAILED)
        return failed_settlement(run, traceback.format_exc())
    return ctx, args, kwargs


def _run_body(run: Run, span: Span, ctx: JobContext, args: list[Any],
              kwargs: dict[str, Any]) -> Settlement:
    """Run the body between the run hooks (rule 72 (paired-run-hooks)) and return how it ended."""
    job, spec = run.job, run.spec
    assert spec is not None
    call_args = [ctx, *args] if spec.takes_context else args
    exception: BaseException | None = None
    started = time.monotonic()
    try:
        # Inside the try: a receiver that could not set the run's context up fails the attempt
        # as the body would, rather than let the body run in the wrong one
        # (rule 72 (paired-run-hooks)).
        if job_started.receivers:  # send() with no receivers still costs every run
            job_started.send(sender=spec, context=ctx, args=args, kwargs=kwargs)
        with acting_as(f"job:{job.id}"):
            if spec.is_coroutine:
                result = asyncio.run(spec.func(*call_args, **kwargs))
            else:
                result = spec.func(*call_args, **kwargs)
        result_json = result_as_json(job.name, result)
    except Suspend as suspend:
        settlement = suspended_settlement(run, span, suspend)
    except BaseException as exc:  # a job's sys.exit() must not kill the worker thread
        exception = exc
        settlement = exception_settlement(run, span, exc)
    else:
        settlement = success_settlement(run, span, result_json)
    run.duration = time.monotonic() - started
    flush_progress(run, ctx)
    send_finished(run, ctx, args, kwargs, settlement, exception)
    return settlement


def result_as_json(job_name: str, result: Any) -> str:
    """The body's return value as stored JSON; raises as the body would for one that is not
    JSON or too large (rule 31 (bounded-outcomes)). ``None`` (most bodies return nothing) is "null"
    without the checker and the encoder, which most runs would otherwise pay for nothing."""
    if result is None:
        result_json = "null"
    else:
        jsonargs.check_result(job_name, result)
        result_json = jsonargs.dumps(result)
    check_result_size(job_name, result_json)
    return result_json


def check_result_size(job_name: str, result_json: str) -> None:
    """Refuse a result over ``ULTJOBS["MAX_RESULT_BYTES"]`` before any SQL
    (rule 31 (bounded-outcomes)): raised in the body's place, so the attempt fails and is retried
    like any error of the job's."""
    limit = get_settings().MAX_RESULT_BYTES
    # The encoder escapes everything outside ASCII, so characters are bytes.
    if len(result_json) > limit:
        raise JobResultTooLargeError(
            f"the return value of {job_name}() is {len(result_json):,} bytes as JSON, over "
            f'ULTJOBS["MAX_RESULT_BYTES"] ({limit:,}); store large data elsewhere (a file, a '
            "row of your own) and return a reference to it")


def flush_progress(run: Run, ctx: JobContext) -> None:
    """Write the progress the throttle held back (rule 79 (progress-throttled-fenced)), before the
    settle ends the run's claim; a failed write is logged and changes nothing: the outcome is
    decided."""
    if ctx.progress is None:
        return
    try:
        ctx.progress.flush()
    except Exception as exc:
        log_event(logger, logging.WARNING, "jobs.worker.progress-failed", job_id=run.id,
                  error=describe(exc))


def send_finished(run: Run, ctx: JobContext, args: list[Any], kwargs: dict[str, Any],
                   settlement: Settlement, exception: BaseException | None) -> None:
    """Send ``job_finished``; a receiver's error is logged and changes nothing
    (rule 72 (paired-run-hooks)): the outcome is decided, and a teardown that failed must not turn a
    success into a retry."""
    if not job_finished.receivers:
        return
    replies = job_finished.send_robust(
        sender=run.spec, context=ctx, args=args, kwargs=kwargs,
        outcome=settlement.outcome, exception=exception, duration=run.duration)
    for receiver, reply in replies:
        if isinstance(reply, BaseException):
            log_event(logger, logging.ERROR, "jobs.worker.hook-failed", job_id=run.id,
                      job=run.job.name, signal="job_finished",
                      receiver=getattr(receiver, "__qualname__", repr(receiver)),
                      error=describe(reply))


def suspended_settlement(run: Run, span: Span, suspend: Suspend) -> Settlement:
    """Not an error: the job waits without holding this thread, and its next run replays up to
    here. Waking does not burn an attempt."""
    run.over = True
    job = run.job
    span.add_event("job.suspended", {"reason": suspend.reason})
    span.set_attribute("job.outcome", AttemptOutcome.SUSPENDED)
    log_event(logger, logging.INFO, "jobs.worker.suspended", job_id=job.id,
              job=job.name, reason=suspend.reason, wake_in=round(suspend.delay, 3))
    return settlement_for(run, JobStatus.WAITING, AttemptOutcome.SUSPENDED,
                          delay=suspend.delay, wait_event=suspend.wait_event,
                          wait_match=suspend.wait_match, wait_after=suspend.wait_after)


def success_settlement(run: Run, span: Span, result_json: str) -> Settlement:
    """The settlement of a body that returned ``result_json``."""
    reason = body_over(run)
    if reason is not None and isinstance(reason, JobSlotLostError | JobTimeoutError):
        # The body ignored the cancellation and finished: its result stands (the job
        # succeeded), but the attempt is recorded as slot_lost or timed_out so the admin shows
        # the cap, or the timeout, was not held. Running it again would repeat what it did.
        span.set_attribute("job.outcome", reason.cause)
        return settlement_for(run, JobStatus.SUCCEEDED, reason.cause,
                              result_json=result_json,
                              error=f"{reason}; the body finished anyway and its result was kept")
    span.set_attribute("job.outcome", AttemptOutcome.SUCCEEDED)
    return settlement_for(run, JobStatus.SUCCEEDED, AttemptOutcome.SUCCEEDED,
                          result_json=result_json)


def exception_settlement(run: Run, span: Span, exc: BaseException) -> Settlement:
    reason = body_over(run)
    if reason is not None:
        # The body unwound because the run was cancelled: the cause decides what happens next,
        # not the exception the unwinding happened to raise.
        span.add_event("job.cancelled", {"job.cancel_cause": reason.cause, "message": str(reason)})
        span.set_status(Status(StatusCode.ERROR, str(reason)))
        settlement = cancel_settlement(run, reason)
        span.set_attribute("job.outcome", settlement.outcome or reason.cause)
        return settlement
    _record_exception(span, exc)
    span.set_status(Status(StatusCode.ERROR, describe(exc)))
    error = trim_error("".join(traceback.format_exception(exc)))
    settlement = retry_or_fail(run, error, cause=exc, shown=describe(exc))
    span.set_attribute("job.outcome", settlement.outcome or AttemptOutcome.FAILED)
    return settlement


def _record_exception(span: Span, exc: BaseException) -> None:
    # The SDK formats str(exc); an exception that cannot print itself must not take the run's
    # settle down with it.
    try:
        span.record_exception(exc)
    except Exception:
        span.add_event("exception", {"exception.type": type(exc).__qualname__,
                                     "exception.message": describe(exc)})


def _bad(what: str, value: Any) -> Any:
    raise TypeError(f"the stored {what} of this job are a {type(value).__name__}, not JSON "
                    f"{'array' if what == 'args' else 'object'}; the row was written by hand?")
