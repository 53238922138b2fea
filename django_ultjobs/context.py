"""``JobContext``: what a running job sees of its own run (``@job(takes_context=True)``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .cancel import CancelScope
from .exceptions import JobCancelledError


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

    @property
    def cancelled(self) -> bool:
        """Whether this run has been cancelled (lost lease, lost slot, cancel request, drain)."""
        return self.scope.cancelled

    @property
    def cancel_reason(self) -> JobCancelledError | None:
        """Why this run was cancelled, or None."""
        return self.scope.reason

    def raise_if_cancelled(self) -> None:
        """Raise the cancellation (a ``JobCancelledError``) if this run has been cancelled."""
        self.scope.raise_if_cancelled()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` in-process, waking early on cancellation; return whether it
        was cancelled. (A durable sleep that frees the thread is ``ctx.sleep``.)"""
        return self.scope.wait(seconds)
