"""Timeouts, retry_on, NonRetryable, expiry and cancel reasons (rules 55 (timeout-cancels) to
59 (cancel-reason-kept)), proved in-process against a real Worker on SQLite and PostgreSQL. Every
wait is a condition with a deadline."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import connections

from django_ultjobs.exceptions import JobTimeoutError
from django_ultjobs.models import AttemptRecord, Job
from django_ultjobs.models import Worker as WorkerRow
from django_ultjobs.operations import cancel_jobs
from tests.conftest import events, running_worker, wait_until
from tests.testapp.jobs import (
    add,
    clocked,
    gives_up,
    overrunning,
    picky,
    reads_cancel_reason,
    timed_clocked,
)
from tests.testapp.models import RunLog

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

#: Several beats inside a lease; a timeout fires at its due time, a lease is renewed every 0.2 s.
FAST = {"visibility_timeout": 3.0, "heartbeat_interval": 0.2}


def row(alias: str, job_id: int) -> Job:
    return Job.objects.using(alias).get(id=job_id)


def attempts(alias: str, job_id: int) -> list[tuple[int, str]]:
    return list(AttemptRecord.objects.using(alias).filter(job_id=job_id)
                .order_by("id").values_list("attempt", "outcome"))


def finished(alias: str, job_id: int) -> Any:
    return lambda: row(alias, job_id).status in ("succeeded", "failed", "cancelled")


def db_now(alias: str) -> Any:
    with connections[alias].cursor() as cur:
        if connections[alias].vendor == "postgresql":
            cur.execute("SELECT clock_timestamp()")
            return cur.fetchone()[0]
    from django.utils import timezone
    return timezone.now()


# -- rule 55 (timeout-cancels): a run past its timeout is cancelled, and retried by its policy
# -------------------


def test_a_cooperative_body_is_cancelled_at_its_timeout_and_retried(alias: str) -> None:
    """rule 55 (timeout-cancels): ``.using(timeout=...)`` reaches the worker through the row; the
    run is cancelled with JobTimeoutError within one heartbeat interval of its timeout, its attempt
    recorded ``timed_out``, and the retry policy applies: retried, then failed after the last
    attempt."""
    job = clocked.using(timeout=0.4, max_attempts=2).enqueue(label="t", seconds=30.0)
    assert row(alias, job.id).timeout == 0.4
    with running_worker(alias, **FAST):
        wait_until(finished(alias, job.id), message="the job to end")
    done = row(alias, job.id)
    assert done.status == "failed"
    assert attempts(alias, job.id) == [(1, "timed_out"), (2, "timed_out")]
    assert "timed out: still running after its timeout of 0.4 s" in done.last_error
    for run in RunLog.objects.using(alias).filter(job_id=job.id):
        assert run.label == "t:unwound"
        ran = (run.ended_at - run.started_at).total_seconds()
        # Cancelled at its due time by the worker's timer, whatever the interval
        # (rule 130 (timeout-on-time)).
        # The log's start is stamped just after the body started: a few ms under 0.4 is fine.
        assert 0.35 <= ran <= 0.4 + FAST["heartbeat_interval"], ran


def test_a_declared_timeout_holds_and_a_quick_run_is_untouched(alias: str) -> None:
    """rule 55 (timeout-cancels): ``@job(timeout=0.5)`` without ``.using``; a run that ends in time
    succeeds."""
    slow = timed_clocked.enqueue(label="slow", seconds=30.0)
    quick = timed_clocked.enqueue(label="quick", seconds=0.0)
    with running_worker(alias, **FAST):
        wait_until(finished(alias, slow.id), message="the slow job to end")
        wait_until(finished(alias, quick.id), message="the quick job to end")
    assert attempts(alias, slow.id) == [(1, "timed_out"), (2, "timed_out")]
    assert row(alias, slow.id).status == "failed"
    assert attempts(alias, quick.id) == [(1, "succeeded")]


def test_a_body_that_ignores_its_timeout_is_reported_and_its_result_kept(
        alias: str, caplog: pytest.LogCaptureFixture) -> None:
    """rule 56 (overrun-reported): a body that never looks at the signal runs on; after
    ``cancel_wait`` more it is logged ``jobs.worker.run-overrunning`` with its job and thread and
    listed on the worker's row; when it returns at last its result stands and the attempt says
    ``timed_out``."""
    caplog.set_level(logging.INFO, logger="django_ultjobs")
    job = overrunning.using(timeout=0.2).enqueue(seconds=2.0)
    with running_worker(alias, cancel_wait=0.3, **FAST) as worker:
        wait_until(lambda: events(caplog, "jobs.worker.run-overrunning", job_id=job.id),
                   message="the overrun to be reported")
        listed = wait_until(lambda: WorkerRow.objects.using(alias)
                            .get(id=worker.worker_id).overrunning, message="the worker row")
        wait_until(finished(alias, job.id), message="the body to return")
        wait_until(lambda: WorkerRow.objects.using(alias)
                   .get(id=worker.worker_id).overrunning == [], message="the row to clear")
    (logged,) = events(caplog, "jobs.worker.run-overrunning", job_id=job.id)
    assert logged["thread"].startswith("ultjobs-exec-")
    assert logged["job"] == "overrunning"
    assert [(e["job_id"], e["thread"]) for e in listed] == [(job.id, logged["thread"])]
    done = row(alias, job.id)
    assert (done.status, done.result) == ("succeeded", 1)
    assert attempts(alias, job.id) == [(1, "timed_out")]


# -- rule 57 (retry-on-only): retry_on and NonRetryable
# ----------------------------------------------------------


def test_retry_on_retries_only_its_exceptions(alias: str) -> None:
    """rule 57 (retry-on-only): ``retry_on=(ConnectionError,)`` retries a ConnectionError to the
    last attempt, and fails anything else at once with its own outcome."""
    flaky = picky.enqueue("connection")
    bug = picky.enqueue("value")
    with running_worker(alias, **FAST):
        wait_until(finished(alias, flaky.id), message="the retried job to end")
        wait_until(finished(alias, bug.id), message="the failed job to end")
    assert attempts(alias, flaky.id) == [(1, "retrying"), (2, "retrying"), (3, "failed")]
    assert attempts(alias, bug.id) == [(1, "not_retried")]
    failed = row(alias, bug.id)
    assert (failed.status, failed.attempt) == ("failed", 1)
    assert failed.last_error.strip().endswith("ValueError: a bug: no retry mends it")


def test_non_retryable_fails_at_once_whatever_attempts_are_left(alias: str) -> None:
    """rule 57 (retry-on-only): ``raise NonRetryable("why")`` ends the job ``failed`` on its first
    attempt of three, with that message, outcome ``non_retryable``; whatever ``retry_on`` says."""
    plain = gives_up.enqueue()
    listed = picky.enqueue("non_retryable")  # retry_on=(ConnectionError,) changes nothing
    with running_worker(alias, **FAST):
        wait_until(finished(alias, plain.id), message="the job to fail")
        wait_until(finished(alias, listed.id), message="the job to fail")
    for job_id, why in ((plain.id, "the order no longer exists"),
                        (listed.id, "the customer was deleted")):
        done = row(alias, job_id)
        assert (done.status, done.attempt, done.max_attempts) == ("failed", 1, 3)
        assert done.last_error.strip().endswith(f"NonRetryable: {why}")
        assert attempts(alias, job_id) == [(1, "non_retryable")]
        assert RunLog.objects.using(alias).filter(job_id=job_id).count() == 1


# -- rule 58 (expired-never-runs): expiry
# -----------------------------------------------------------------------------


def test_a_job_claimed_after_its_expiry_is_cancelled_and_never_run(alias: str) -> None:
    """rule 58 (expired-never-runs): ``.using(expires_in=...)`` sets ``expires_at`` on the
    database's clock; a job not started by then ends ``cancelled`` with outcome ``expired``, its
    body never run, while one whose expiry is ahead runs."""
    stale = clocked.using(expires_in=0.2).enqueue(label="stale")
    fresh = clocked.using(expires_in=3600).enqueue(label="fresh")
    stale_row = row(alias, stale.id)
    assert stale_row.expires_at is not None and stale.expires_at == stale_row.expires_at
    wait_until(lambda: db_now(alias) > stale_row.expires_at, message="the expiry to pass")
    with running_worker(alias, **FAST):
        wait_until(finished(alias, stale.id), message="the stale job to end")
        wait_until(finished(alias, fresh.id), message="the fresh job to end")
    done = row(alias, stale.id)
    assert done.status == "cancelled" and done.finished_at is not None
    assert attempts(alias, stale.id) == [(1, "expired")]
    assert done.last_error.startswith("expired: not started by ")
    assert not RunLog.objects.using(alias).filter(job_id=stale.id).exists()
    assert row(alias, fresh.id).status == "succeeded"


def test_a_retry_past_the_expiry_still_runs(alias: str) -> None:
    """rule 58 (expired-never-runs): expiry stops a job that never started, not one halfway through
    its retries."""
    job = picky.using(expires_in=0.5).enqueue("connection")
    with running_worker(alias, **FAST):
        wait_until(finished(alias, job.id), message="the job to end")
    assert attempts(alias, job.id)[0] == (1, "retrying")
    # The retries ran whether or not the expiry had passed by their claim.
    assert RunLog.objects.using(alias).filter(job_id=job.id).count() == 3


# -- rule 59 (cancel-reason-kept): cancel reasons
# ---------------------------------------------------------------------


def test_a_cancel_reason_reaches_the_body_the_row_and_the_attempt(
        alias: str, caplog: pytest.LogCaptureFixture) -> None:
    """rule 59 (cancel-reason-kept): a running job cancelled with a reason: the body reads it as
    ``ctx.cancel_reason``, the row keeps it, the attempt's error says it, the worker logs it."""
    caplog.set_level(logging.INFO, logger="django_ultjobs")
    job = reads_cancel_reason.enqueue()
    queued = add.using(delay=3600).enqueue(1, 2)
    with running_worker(alias, **FAST):
        wait_until(lambda: RunLog.objects.using(alias).filter(job_id=job.id).exists(),
                   message="the body to start")
        result = cancel_jobs([job.id, queued.id], reason="customer asked to stop")
        assert (result.requested_ids, result.cancelled_ids) == ((job.id,), (queued.id,))
        wait_until(finished(alias, job.id), message="the job to be cancelled")
    assert RunLog.objects.using(alias).get(job_id=job.id).label == "customer asked to stop"
    done = row(alias, job.id)
    assert (done.status, done.cancel_reason) == ("cancelled", "customer asked to stop")
    assert attempts(alias, job.id) == [(1, "cancelled")]
    error = AttemptRecord.objects.using(alias).get(job_id=job.id).error
    assert error.endswith("was cancelled on request: customer asked to stop")
    assert events(caplog, "jobs.worker.cancel-requested", job_id=job.id,
                  reason="customer asked to stop")
    assert row(alias, queued.id).cancel_reason == "customer asked to stop"
    assert events(caplog, "jobs.operations.cancelled", reason="customer asked to stop")


def test_a_cancel_reason_given_before_the_claim_is_kept_in_the_attempt(alias: str) -> None:
    """rule 59 (cancel-reason-kept): a job asked to stop while between runs (flagged, not yet
    claimed) is cancelled at its next claim, and its attempt's error gives the reason."""
    job = add.enqueue(1, 2)
    Job.objects.using(alias).filter(id=job.id).update(cancel_requested=True,
                                                      cancel_reason="duplicate order")
    with running_worker(alias, **FAST):
        wait_until(finished(alias, job.id), message="the job to be cancelled")
    error = AttemptRecord.objects.using(alias).get(job_id=job.id).error
    assert error == "cancelled on request before this attempt started: duplicate order"


def test_ctx_cancel_reason_says_what_happened_for_other_causes() -> None:
    """rule 59 (cancel-reason-kept): with no reason given (a timeout, say), ``ctx.cancel_reason``
    describes the cause; ``ctx.cancellation`` is the error itself."""
    from django_ultjobs.runtime.cancel import CancelScope
    from django_ultjobs.runtime.context import JobContext

    scope = CancelScope()
    ctx = JobContext(job_id=1, name="j", attempt=1, max_attempts=1, queue="default",
                     worker_id="w", enqueued_by="", scope=scope)
    assert ctx.cancel_reason is None and ctx.cancellation is None
    scope.cancel(JobTimeoutError(job="j", job_id=1, timeout=2.5))
    assert ctx.cancel_reason == "job 'j' (id 1) timed out: still running after its timeout of 2.5 s"
    assert isinstance(ctx.cancellation, JobTimeoutError)
    assert isinstance(ctx.cancellation.__class__.__mro__[1](), Exception)


