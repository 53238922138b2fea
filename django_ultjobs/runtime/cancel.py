"""The run's cancel scope: one signal, many causes, the first cause wins.

Python cannot kill a thread, so cancellation of a sync body is cooperative: the body reads
``ctx.cancelled`` or calls ``ctx.raise_if_cancelled()``, and every durable write checks the scope
first (rule 11 (cooperative-cancel)), which is what unwinds a body that never looks. An ``async
def`` body is also cancelled at its next ``await``: the async lane sets a canceller that cancels its
task (rule 86 (async-cancel)). The scope belongs to one run and is dropped with it: it holds no
reference to anything of the worker's past the run (rule 13 (nothing-leaks)).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..exceptions import JobCancelledError


class CancelScope:
    """A one-shot cancellation signal carrying the reason it fired."""

    __slots__ = ("_canceller", "_event", "_lock", "_reason")

    def __init__(self) -> None:
        # The event exists only once a body waits on the scope (ctx.sleep, a wait for an
        # event): most runs never do, and an Event per run (a Condition, two locks) is a
        # cost every run would pay.
        self._event: threading.Event | None = None
        self._lock = threading.Lock()
        self._reason: JobCancelledError | None = None
        # Called once when the signal fires: the async lane's way to cancel a task (set only
        # for an ``async def`` body, and cleared when it ends: rule 13 (nothing-leaks)).
        self._canceller: Callable[[], None] | None = None

    def set_canceller(self, canceller: Callable[[], None] | None) -> None:
        """Call ``canceller`` (from the cancelling thread) when the signal fires; at once if it
        has fired already. None clears it."""
        with self._lock:
            self._canceller = canceller
            fired = self._reason is not None
        if fired and canceller is not None:
            canceller()

    def cancel(self, reason: JobCancelledError) -> bool:
        """Fire the signal with ``reason``; return False if it had already fired (first wins)."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            event = self._event
            canceller = self._canceller
        if event is not None:
            event.set()
        if canceller is not None:
            canceller()
        return True

    @property
    def cancelled(self) -> bool:
        """Whether the signal has fired."""
        return self._reason is not None

    @property
    def reason(self) -> JobCancelledError | None:
        """Why the run was cancelled, or None."""
        return self._reason

    def raise_if_cancelled(self) -> None:
        """Raise the cancellation reason if the signal has fired."""
        reason = self._reason
        if reason is not None:
            raise reason

    def wait(self, timeout: float | None) -> bool:
        """Block until cancelled or ``timeout`` passes; return whether it was cancelled."""
        with self._lock:
            if self._reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)
