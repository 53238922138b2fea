"""Errors raised by django_ultjobs: one root, each message says how to fix the problem."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError


class UltJobsError(Exception):
    """Root of every error this package raises on purpose."""


class JobArgumentError(UltJobsError, TypeError):
    """An argument (or a result) cannot be stored as JSON.

    A ``TypeError`` too, because that is what ``json.dumps`` and Django's own task backends raise
    for the same mistake, and what callers already catch.
    """


class JobResultTooLargeError(UltJobsError, ValueError):
    """A job returned a result larger than ``ULTJOBS["MAX_RESULT_BYTES"]``
    (rule 31 (bounded-outcomes))."""


class UnknownJobError(UltJobsError, LookupError):
    """No job is registered under a name."""


class JobConfigurationError(UltJobsError, ImproperlyConfigured):
    """The jobs, the settings or the database cannot give the guarantees that were asked for."""


class JobTablesMissingError(JobConfigurationError, DatabaseError):
    """The database has no django_ultjobs tables, or older ones: nobody ran ``migrate`` on it
    (rule 109 (missing-tables-named)). The message names the database and the command; the driver's
    own error is the ``__cause__``.

    A ``DatabaseError`` too, so code that catches the database's errors catches it as it caught
    the driver's "no such table".
    """


class JobOptionError(JobConfigurationError, ValueError):
    """A job option (queue, priority, max_attempts, delay, run_at, …) has a value the queue
    cannot keep as given, on ``@job(...)`` or on a ``.using(...)`` copy; the message names it.

    A ``JobConfigurationError``, as a bad option always was, and a ``ValueError``, which is what
    a caller passing a bad value to ``.using()`` at enqueue time expects to catch.
    """


class OperationInputError(UltJobsError, ValueError):
    """An operation (pause, resume, cancel, retry) was given a value it cannot act on: a queue
    name no job can have, a job id that is not a whole number. Raised before any SQL."""


class WorkflowError(UltJobsError, ValueError):
    """A workflow, chain or batch was given something it cannot keep (not a job's ``.call()``,
    an unknown ``when=``, a dependency from another workflow, a keyed job); the message names
    it. Raised before any SQL (docs/workflows.md)."""


class UniqueKeyContendedError(UltJobsError):
    """A keyed enqueue found the job holding its key gone before it could read it, 20 times in a
    row (taken over or pruned each time by other enqueues; rule 66 (held-key-returns-holder)). Never
    seen in the tests."""


class DatabaseUnavailableError(UltJobsError):
    """A starting worker's database stayed unreachable for its whole ``--connect-timeout``."""


class JobCancelledError(UltJobsError):
    """The run was cancelled; raised by ``ctx.raise_if_cancelled()`` and every durable write.

    The subclass says why. Catching it to carry on is a bug: the worker no longer owns the job
    (or the slot), so nothing the body does from here can be committed for it.
    """

    #: Stable, short name of the cause, used for attempt outcomes and log fields.
    cause = "cancelled"


class LeaseLostError(JobCancelledError):
    """The job's lease is gone: its heartbeat found another claim (or no row) in the database."""

    cause = "lease_lost"


class JobSlotLostError(JobCancelledError):
    """The fleet slot this run held lapsed or was taken by another holder
    (rule 8 (lost-slot-cancels))."""

    cause = "slot_lost"

    def __init__(self, *, job: str, job_id: int, key: str, slot: int) -> None:
        super().__init__(
            f"job {job!r} (id {job_id}) lost fleet slot {slot} of {key!r}: the slot lapsed or "
            "another holder took it, so this run no longer counts towards the concurrency cap"
        )
        self.job = job
        self.job_id = job_id
        self.key = key
        self.slot = slot


class CancelRequestedError(JobCancelledError):
    """Someone asked for this job to be cancelled (the admin action, or ``cancel_jobs``).

    ``reason`` is what they gave (``cancel_jobs(..., reason=...)``), "" when none
    (rule 59 (cancel-reason-kept)).
    """

    cause = "cancel_requested"

    def __init__(self, message: str = "cancelled on request", *, reason: str = "") -> None:
        super().__init__(f"{message}: {reason}" if reason else message)
        self.reason = reason


class JobTimeoutError(JobCancelledError):
    """The run was still executing after its ``timeout`` seconds (rule 55 (timeout-cancels)).

    A cancellation like the others: the body sees it through ``ctx.cancelled`` and
    ``ctx.raise_if_cancelled()``. The attempt is recorded ``timed_out`` and the job's retry
    policy decides what follows (``retry_on`` included: this is an ``Exception``).
    """

    cause = "timed_out"

    def __init__(self, *, job: str, job_id: int, timeout: float) -> None:
        super().__init__(f"job {job!r} (id {job_id}) timed out: still running after its "
                         f"timeout of {timeout:g} s")
        self.job = job
        self.job_id = job_id
        self.timeout = timeout


class WorkerShutdownError(JobCancelledError):
    """The worker is stopping and the grace period ran out; the job is handed back to the queue."""

    cause = "worker_shutdown"


class JobExpiredError(UltJobsError):
    """A job reached a worker after its expiry (``expires_in``) and was never run
    (rule 58 (expired-never-runs)).

    Never raised into a body: it names the error of an expired job's ``TaskResult``.
    """


class NonRetryable(UltJobsError):
    """Raised by a job's body to fail the job at once, whatever attempts are left
    (rule 57 (retry-on-only)).

    ``raise NonRetryable("the customer was deleted")``: the job ends ``failed`` with that
    message and its attempt is recorded ``non_retryable``. For an error no retry can mend.
    """


class StepError(UltJobsError):
    """A durable step was used wrongly (a name used twice in one run, a non-JSON result)."""


class EventTimeoutError(UltJobsError):
    """``ctx.wait_for_event`` gave up: no matching event arrived before its timeout.

    Raised in the job body, where it can be caught; on a later attempt the same wait raises it
    again (the timeout is part of the job's durable history).
    """

    def __init__(self, event: str, match: dict[str, object] | None) -> None:
        super().__init__(f"no event {event!r} matching {match or {}!r} arrived before the timeout")
        self.event = event
        self.match = match
