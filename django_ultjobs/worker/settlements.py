"""What becomes of a run: the one place a run's outcome is decided (``retry_or_fail``, the
job's retry policy), the settlements of a cancelled, handed-back or abandoned run, and of a claim
that must not run at all (unknown, expired, undecodable, cancelled or past its attempts).

Each returns a ``Settlement`` and writes nothing: the completer writes it. Running the body is
``executor.py``'s.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from opentelemetry.trace import Status, StatusCode

from ..conf import get_settings
from ..core.retry import backoff_delay
from ..exceptions import (
    CancelRequestedError,
    JobCancelledError,
    JobSlotLostError,
    JobTimeoutError,
    LeaseLostError,
    NonRetryable,
    WorkerShutdownError,
)
from ..models import AttemptOutcome, JobStatus
from ..observability.logs import log_event
from ..observability.tracing import job_span_of
from ..store import ClaimedJob, ParkEpisode, Settlement
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")

#: How the error of an unknown job's park begins: the park episodes are found by it
#: (rule 12 (unknown-job-parked)).
UNKNOWN_JOB_PREFIX = "no job registered as "
#: What the first park of an episode logs beside the name: where a worker looks for jobs.
UNKNOWN_JOB_HINT = ("this worker has no such job: declare it in an installed app's jobs.py (or "
                    "import it from there, or list its module in ULTJOBS['JOB_MODULES']) and "
                    "restart the worker")
#: Tracebacks are kept whole up to this many characters (the head and the tail beyond it).
MAX_ERROR = 32_000


def settlement_for(run: Run, status: str, outcome: str | None, **fields: Any) -> Settlement:
    """A settlement of ``run`` under its own token, with its attempt, slot and steps filled in.

    It writes nothing: the completer writes it (``JobStore.settle``)."""
    if run.ledger is not None:
        fields.setdefault("steps_run", tuple(run.ledger.ran))
        fields.setdefault("steps_replayed", tuple(run.ledger.replayed))
    return Settlement(
        job_id=run.id,
        token=run.job.token,
        status=status,
        attempt_no=run.job.attempt,
        started_at=run.job.claimed_at,
        outcome=outcome,
        slot_key=run.slot.key if run.slot else None,
        slot=run.slot.slot if run.slot else None,
        **fields,
    )


def retry_or_fail(run: Run, error: str, *, cause: BaseException | None = None,
                  retried_as: str = AttemptOutcome.RETRYING, failed_as: str | None = None,
                  at_least: float = 0.0, shown: str | None = None, **fields: Any) -> Settlement:
    """A failed attempt under the job's own retry policy, the one place that decides it: queued
    again as ``retried_as`` after its backoff (``at_least`` seconds at the soonest) while
    attempts remain and the policy retries ``cause`` (rule 57 (retry-on-only)); else failed for good
    as ``failed_as`` (None: as the policy's refusal says, or ``failed``), as is a job not
    registered here. ``shown``: the error as the log line shows it; None: the caller logs."""
    job, spec = run.job, run.spec
    refused = (None if spec is None or cause is None
               else not_retried_outcome(spec.retry_on, cause))
    if spec is not None and refused is None and job.attempt < job.max_attempts:
        delay = max(backoff_delay(job.attempt, base=spec.backoff, cap=spec.max_backoff),
                    at_least)
        if shown is not None:
            also = {} if retried_as == AttemptOutcome.RETRYING else {"outcome": retried_as}
            log_event(logger, logging.WARNING, "jobs.worker.retrying", job_id=job.id,
                      job=job.name, attempt=job.attempt, max_attempts=job.max_attempts,
                      delay=round(delay, 3), **also, error=shown)
        return settlement_for(run, JobStatus.QUEUED, retried_as, delay=delay, error=error,
                              **fields)
    outcome = failed_as or refused or AttemptOutcome.FAILED
    if shown is None:
        return settlement_for(run, JobStatus.FAILED, outcome, error=error, **fields)
    return failed_settlement(run, error, outcome)


def not_retried_outcome(retry_on: tuple[type[BaseException], ...], exc: BaseException
                        ) -> str | None:
    """The outcome of an exception the job's policy never retries, or None
    (rule 57 (retry-on-only)).

    ``NonRetryable`` fails the job at once whatever ``retry_on`` says: the body said so. Any
    other exception outside ``retry_on`` (default ``(Exception,)``) is not retried either."""
    if isinstance(exc, NonRetryable):
        return AttemptOutcome.NON_RETRYABLE
    if not isinstance(exc, retry_on):
        return AttemptOutcome.NOT_RETRIED
    return None


def failed_settlement(run: Run, error: str, outcome: str = AttemptOutcome.FAILED) -> Settlement:
    log_event(logger, logging.ERROR, "jobs.worker.failed", job_id=run.id, job=run.job.name,
              attempt=run.job.attempt, outcome=outcome,
              error=error.strip().splitlines()[-1] if error else "")
    return settlement_for(run, JobStatus.FAILED, outcome, error=trim_error(error))


def timed_out_settlement(run: Run, reason: JobTimeoutError, *, at_least: float = 0.0
                         ) -> Settlement:
    """The settlement of a run cancelled by its timeout: outcome ``timed_out``, and the job's
    retry policy (attempts, backoff, ``retry_on``) decides between a retry and ``failed``
    (rule 55 (timeout-cancels)). ``at_least``: the soonest the retry may start (an abandoned body
    may still run)."""
    return retry_or_fail(run, str(reason), cause=reason, retried_as=AttemptOutcome.TIMED_OUT,
                         failed_as=AttemptOutcome.TIMED_OUT, at_least=at_least, shown=str(reason))


def cancel_settlement(run: Run, reason: JobCancelledError) -> Settlement:
    if isinstance(reason, JobSlotLostError):
        # Not the job's fault: back to the queue at once, the attempt not burned (it is still
        # recorded, as slot_lost, so the admin can show it).
        return settlement_for(run, JobStatus.QUEUED, AttemptOutcome.SLOT_LOST, attempt_delta=-1,
                              delay=0.0, error=str(reason))
    if isinstance(reason, JobTimeoutError):
        return timed_out_settlement(run, reason)
    if isinstance(reason, CancelRequestedError):
        return settlement_for(run, JobStatus.CANCELLED, AttemptOutcome.CANCELLED,
                              error=str(reason))
    if isinstance(reason, WorkerShutdownError):
        return hand_back_settlement(run)
    if isinstance(reason, LeaseLostError):
        # Fenced like every settle: the token no longer owns the row, so this changes nothing
        # and the completer logs it as stale (rule 4 (fenced-settle)). The re-claimer records this
        # attempt.
        return settlement_for(run, JobStatus.QUEUED, AttemptOutcome.LEASE_LOST, error=str(reason))
    return settlement_for(run, JobStatus.CANCELLED, AttemptOutcome.CANCELLED, error=str(reason))


def hand_back_settlement(run: Run) -> Settlement:
    """The settlement that hands a job back in a drain without burning an attempt."""
    return settlement_for(run, JobStatus.QUEUED, AttemptOutcome.INTERRUPTED, attempt_delta=-1,
                          delay=0.0,
                          error="the worker stopped before the run finished; handed back")


def abandonment(run: Run, visibility_timeout: float) -> Settlement:
    """The settlement that hands back a job whose body ignored its cancellation in a drain,
    after a visibility timeout, as if this worker had died: the body may still run until the
    process exits.

    A run that had timed out is settled as a timeout instead (rule 56 (overrun-reported)), its
    attempt burned and its retry after the visibility timeout at the earliest: handed back unburned,
    a body that always overruns would come back for ever, and take a worker down each time under
    ``--exit-on-overrun``."""
    reason = run.scope.reason
    if isinstance(reason, JobTimeoutError):
        return timed_out_settlement(run, reason, at_least=visibility_timeout)
    return settlement_for(run, JobStatus.QUEUED, AttemptOutcome.INTERRUPTED, attempt_delta=-1,
                          delay=visibility_timeout,
                          error="the worker stopped while the body ignored its cancellation; "
                                "handed back after the visibility timeout")


def slot_unavailable_settlement(run: Run) -> Settlement:
    """The settlement that hands a job that could not get a fleet slot back at once, without
    burning an attempt."""
    return settlement_for(run, JobStatus.QUEUED, None, attempt_delta=-1, delay=0.0)


def unstorable_settlement(run: Run, refused: Settlement, reason: str) -> Settlement:
    """The settlement of a run whose outcome the database refused to store
    (rule 30 (refused-outcome-no-wedge)): a failed attempt saying why, retried by the job's own
    policy, keeping what was true of the run."""
    error = trim_error(f"the outcome could not be stored: {reason}\n(the run ended "
                  f"{refused.status}/{refused.outcome}; the database refused to write that)")
    log_event(logger, logging.ERROR, "jobs.worker.outcome-unstorable", job_id=run.id,
              job=run.job.name, attempt=run.job.attempt, error=reason)
    return retry_or_fail(run, error, steps_run=refused.steps_run,
                         steps_replayed=refused.steps_replayed)


def failed_by_worker(run: Run, exc: BaseException) -> Settlement:
    """The settlement of a run that broke inside the worker itself (a bug, not in the body)."""
    error = trim_error("".join(traceback.format_exception(exc)))
    log_event(logger, logging.ERROR, "jobs.worker.run-crashed", job_id=run.id, job=run.job.name,
              attempt=run.job.attempt, error=describe(exc))
    return retry_or_fail(run, error)


def describe(exc: BaseException) -> str:
    """``Type: message`` for logs and spans, even for an exception whose ``__str__`` raises."""
    try:
        text = str(exc)
    except Exception:
        text = "<the exception's str() raised>"
    return f"{type(exc).__name__}: {text}"


def trim_error(text: str) -> str:
    if len(text) <= MAX_ERROR:
        return text
    half = MAX_ERROR // 2
    return f"{text[:half]}\n… {len(text) - MAX_ERROR} characters cut …\n{text[-half:]}"


def settlement_before_run(run: Run, episode: ParkEpisode | None = None) -> Settlement | None:
    """The settlement of a claimed job that must not run at all; None when it should run.

    ``episode``: for a job this worker does not know, the park episode its latest attempt row
    records, if any (``JobStore.park_episodes``)."""
    job = run.job
    if job.undecodable is not None:
        return _undecodable(run, job.undecodable)
    if is_expired(job):
        return _expired(run)
    if run.spec is None:
        return unknown_job_settlement(run, episode)
    if job.cancel_requested:
        error = "cancelled on request before this attempt started"
        if job.cancel_reason:
            error = f"{error}: {job.cancel_reason}"
        _unstarted_span(run, AttemptOutcome.CANCELLED, "job.cancelled",
                        {"job.cancel_cause": CancelRequestedError.cause, "message": error})
        return settlement_for(run, JobStatus.CANCELLED, AttemptOutcome.CANCELLED, error=error)
    if job.attempt > job.max_attempts:
        # A re-delivery past the last attempt: the worker running it died every time (a job that
        # kills its process, or an OOM). Running it again would only kill another worker.
        error = (f"gave up after {job.max_attempts} attempts: the last one's worker stopped "
                 "heartbeating (it crashed or was killed) before finishing")
        _unstarted_span(run, AttemptOutcome.FAILED, "job.gave_up", {"message": error},
                        error=error)
        return settlement_for(run, JobStatus.FAILED, AttemptOutcome.FAILED, error=error)
    return None


def is_expired(job: ClaimedJob) -> bool:
    """Whether ``job`` reached a worker after its expiry before its body ever started
    (rule 58 (expired-never-runs)).

    Both times are the database's (the claim's ``now`` and the enqueue's ``now + expires_in``).
    Only a claim that would start the job's first run counts: a retry (attempt 2 on) or a
    waiting job that woke has started already, and stopping it halfway is a cancel's job, not
    an expiry's. A run handed back by a stopping worker gave its attempt back (``interrupted``),
    so its next claim is a first run again and does expire."""
    return (job.expires_at is not None and job.attempt == 1 and not job.woke
            and job.claimed_at >= job.expires_at)


def _expired(run: Run) -> Settlement:
    """The settlement of a job claimed after its expiry: ``cancelled``, outcome ``expired``,
    its body never run (rule 58 (expired-never-runs))."""
    job = run.job
    error = (f"expired: not started by {job.expires_at.isoformat()} (its expires_in), so it "
             "was never run")
    log_event(logger, logging.INFO, "jobs.worker.expired", job_id=job.id, job=job.name,
              expires_at=job.expires_at.isoformat())
    _unstarted_span(run, AttemptOutcome.EXPIRED, "job.expired", {"message": error})
    # Its attempt is not burned: the body never ran (a TaskResult counts 0 attempts).
    return settlement_for(run, JobStatus.CANCELLED, AttemptOutcome.EXPIRED, attempt_delta=-1,
                          error=error)


def unknown_job_settlement(run: Run, episode: ParkEpisode | None) -> Settlement:
    """The settlement that parks a job no worker here knows (rule 12 (unknown-job-parked)), or fails
    it once its parking has lasted ``ULTJOBS["UNKNOWN_JOB_TIMEOUT"]``.

    Parked, no attempt is burned: almost always a deploy skew, and the job may be registered by
    the worker next to this one. One attempt row stands for a whole episode of parks (its
    ``claims`` counts them), not one row per ``UNKNOWN_JOB_DELAY``: an orphaned row must not
    grow the attempts table for ever. The episode goes on while the job's latest attempt row is
    a park of this same attempt number; anything else recorded since (a run by a worker that
    knew it, a hand-back) starts a new one.
    """
    job = run.job
    conf = get_settings()
    timeout = conf.UNKNOWN_JOB_TIMEOUT
    ongoing = episode if episode is not None and episode.attempt == job.attempt else None
    if ongoing is not None and ongoing.expired and timeout is not None:
        error = (f'no worker knows job "{job.name}": it was parked as unknown for '
                 f"{_seconds(timeout)} (ULTJOBS[\"UNKNOWN_JOB_TIMEOUT\"]), by every worker that "
                 "claimed it. Was its code removed or renamed? Deploy it (or a job registered "
                 "under this name) and retry the job, or delete it.")
        log_event(logger, logging.ERROR, "jobs.worker.unknown-job-failed", job_id=job.id,
                  job=job.name, timeout=timeout)
        _unstarted_span(run, AttemptOutcome.FAILED, "job.gave_up", {"message": error},
                        error=error)
        return settlement_for(run, JobStatus.FAILED, AttemptOutcome.FAILED, error=error)
    delay = conf.UNKNOWN_JOB_DELAY
    error = f'{UNKNOWN_JOB_PREFIX}"{job.name}"'
    # The first park of an episode says what to do: the usual cause is a @job declared outside
    # an app's jobs.py, in a module this worker never imported.
    hint = {} if ongoing is not None else {"hint": UNKNOWN_JOB_HINT}
    log_event(logger, logging.WARNING, "jobs.worker.unknown-job", job_id=job.id,
              job=job.name, delay=delay, episode=ongoing.attempt_id if ongoing else "new",
              **hint)
    _unstarted_span(run, AttemptOutcome.SUSPENDED, "job.parked",
                    {"reason": error, "job.park_seconds": delay})
    return settlement_for(run, JobStatus.QUEUED, AttemptOutcome.SUSPENDED, attempt_delta=-1,
                          delay=delay, error=error,
                          extends=ongoing.attempt_id if ongoing is not None else None)


def _seconds(value: float) -> str:
    """``7 days``, ``2 h``, ``90 s``: a timeout as the error message shows it."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g} {unit}"
    return f"{value:g} s"


def _undecodable(run: Run, problem: str) -> Settlement:
    """The failure of a job whose stored arguments cannot be decoded, not run
    (rule 15 (undecodable-row-fails-alone)).

    No retry: the same bytes would fail the same way on every attempt (and on every worker of
    this version). The attempt is recorded, so the admin shows when and where it failed.
    """
    job = run.job
    error = (f"arguments cannot be decoded: {problem}. The row was not written by enqueue() "
             "of this version (raw SQL, or another producer); it can never run as stored, so "
             "it failed without a retry")
    log_event(logger, logging.ERROR, "jobs.worker.undecodable", job_id=job.id, job=job.name,
              attempt=job.attempt, error=problem)
    _unstarted_span(run, AttemptOutcome.FAILED, "job.undecodable", {"message": error},
                    error=error)
    return settlement_for(run, JobStatus.FAILED, AttemptOutcome.FAILED, error=error)


def span_attributes(job: ClaimedJob) -> dict[str, Any]:
    """The attributes of every ``job.<name>`` span: the job's own, then messaging semconv."""
    attributes: dict[str, Any] = {
        "job.name": job.name,
        "job.id": job.id,
        "job.attempt": job.attempt,
        "messaging.system": "django_ultjobs",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
    }
    if job.enqueued_by:
        attributes["job.enqueued_by"] = job.enqueued_by
    return attributes


def _unstarted_span(run: Run, outcome: str, event: str, event_attributes: dict[str, Any],
                    error: str | None = None) -> None:
    """A ``job.<name>`` span for a claim settled without running its body (parked, cancelled
    before it started, given up): the trace shows why the job did not run."""
    job = run.job
    with job_span_of(job.name, lambda: span_attributes(job), job.traceparent,
                     job.tracestate) as span:
        span.add_event(event, event_attributes)
        span.set_attribute("job.outcome", outcome)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
