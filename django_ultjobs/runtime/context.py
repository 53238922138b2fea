"""``JobContext``: what a running job sees of its own run (``@job(takes_context=True)``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from ..conf import jobs_database
from ..exceptions import CancelRequestedError, JobCancelledError
from ..jobs.batches import batch_results
from ..jobs.workflows import dependency_results
from ..models import Batch, Job
from .cancel import CancelScope
from .progress import JobProgress
from .steps import StepLedger

T = TypeVar("T")


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass(eq=False)
class JobContext:
    """The run's identity and its cancellation, passed as the first argument of the job."""

    job_id: int
    name: str
    #: 1 on the first run; a re-delivery after a lost lease is the next attempt.
    attempt: int
    max_attempts: int
    queue: str
    worker_id: str
    enqueued_by: str
    scope: CancelScope = field(repr=False)
    ledger: StepLedger | None = field(default=None, repr=False)
    progress: JobProgress | None = field(default=None, repr=False)

    @property
    def cancelled(self) -> bool:
        """Whether this run has been cancelled (lost lease, lost slot, cancel request, timeout,
        drain)."""
        return self.scope.cancelled

    @property
    def cancellation(self) -> JobCancelledError | None:
        """The cancellation of this run (its subclass says the cause), or None."""
        return self.scope.reason

    @property
    def cancel_reason(self) -> str | None:
        """Why this run was cancelled, in words, or None while it is not
        (rule 59 (cancel-reason-kept)).

        For a cancel request, the reason given to ``cancel_jobs(..., reason=...)`` (or the
        admin's cancel form); for any other cause (a timeout, a lost lease or slot, a
        drain), what happened."""
        reason = self.scope.reason
        if reason is None:
            return None
        if isinstance(reason, CancelRequestedError) and reason.reason:
            return reason.reason
        return str(reason)

    def set_progress(self, done: int, total: int, message: str = "") -> None:
        """Store how far this run is (``done`` of ``total``, and a short ``message``) on the
        job, for the admin and the Django Tasks result (rule 79 (progress-throttled-fenced)).

        Cheap to call on every item: at most one write a second reaches the database (the
        final ``done == total`` always does, and the last value held back is written when the
        body returns). A run that lost its lease writes nothing. Bad values raise
        ``JobOptionError``."""
        if self.progress is None:
            raise RuntimeError("set_progress needs the context of a run a worker claimed")
        if _in_event_loop():
            raise RuntimeError("set_progress cannot write from an async def body: use "
                               "await ctx.aset_progress(done, total, message)")
        self.progress.set(done, total, message)

    async def aset_progress(self, done: int, total: int, message: str = "") -> None:
        """``set_progress`` for an ``async def`` body (its writes run on a thread)."""
        if self.progress is None:
            raise RuntimeError("aset_progress needs the context of a run a worker claimed")
        await self.progress.aset(done, total, message)

    # -- dependencies (docs/workflows.md) ---------------------------------------------------------

    def dependency_results(self) -> Any:
        """What this job's dependencies returned (None for one that did not succeed): for a
        workflow node, a list in the order given to ``after=``; for a batch's callback, the
        members' results in enqueue order, as an iterator that reads them in chunks."""
        alias = jobs_database()
        batch_id = Job.objects.using(alias).filter(pk=self.job_id).values_list(
            "callback_of_id", flat=True).first()
        if batch_id is not None:
            return batch_results(batch_id, alias)
        return dependency_results(self.job_id, alias)

    @property
    def batch(self) -> Batch | None:
        """The batch this job is a callback (or else a member) of, or None."""
        alias = jobs_database()
        ids = Job.objects.using(alias).filter(pk=self.job_id).values_list(
            "callback_of_id", "batch_id").first()
        batch_id = ids and (ids[0] or ids[1])
        return Batch.objects.using(alias).filter(pk=batch_id).first() if batch_id else None

    def raise_if_cancelled(self) -> None:
        """Raise the cancellation (a ``JobCancelledError``) if this run has been cancelled."""
        self.scope.raise_if_cancelled()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` in-process, waking early on cancellation; return whether it
        was cancelled. (A durable sleep that frees the thread is ``ctx.sleep``.)"""
        return self.scope.wait(seconds)

    # -- durable steps, sleeps and events ---------------------------------------------------------

    def step(self, name: str, fn: Callable[[], T], *, atomic: bool = False) -> T:
        """Run ``fn`` once for this job, ever: its JSON result is stored, and a later run of the
        job (a retry, a wake-up) returns the stored result without calling ``fn``.

        If the process dies after ``fn`` returns and before its result commits, the next run
        calls ``fn`` again: make such functions idempotent (an idempotency key derived from the
        job id and step name). With ``atomic=True``, ``fn`` runs inside a transaction on the jobs
        database together with the step's record, so its writes to that database happen exactly
        once. Raises the run's cancellation instead of running once cancelled
        (rule 11 (cooperative-cancel)).
        """
        return self._ledger().step(name, fn, atomic=atomic)

    def wait_for_event(self, name: str, *, match: dict[str, Any] | None = None,
                       timeout: timedelta | float | None = None) -> Any:
        """Return the payload of an event ``name`` whose payload has every key of ``match``.

        If none has been sent since the job was enqueued, the job is suspended — its thread is
        freed, its status is ``waiting`` — and claimed again when one arrives (``send_event``).
        After ``timeout`` it raises ``EventTimeoutError`` in the body instead (catchable).
        """
        return self._ledger().wait_for_event(name, match, timeout)

    def sleep(self, name: str, duration: timedelta | float) -> None:
        """Suspend the job for ``duration`` without holding a thread (a durable sleep)."""
        self._ledger().sleep(name, duration)

    def _ledger(self) -> StepLedger:
        if self.ledger is None:
            raise RuntimeError("durable steps need a context created by the worker")
        return self.ledger
