"""A run's progress (rule 79 (progress-throttled-fenced)): ``ctx.set_progress(done, total,
message)``, stored on the job.

A loop may call ``set_progress`` on every item, thousands of times a second; a row update each
time would cost more than the work. So at most one write per ``INTERVAL`` seconds per run, except
the final one (``done == total``), which is always written; a value held back is written when
the body returns (``flush``). Every write is fenced on the run's claim token, as every other
write of a run is: a run that lost its lease writes nothing, and stops trying.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

from ..core.jsonargs import is_unicode
from ..exceptions import JobOptionError
from ..observability.logs import log_event

logger = logging.getLogger(__name__)

#: Seconds between two writes of one run's progress.
INTERVAL = 1.0
#: Characters of the message kept; a longer one is cut.
MAX_MESSAGE = 200

#: ``(job id, token, progress)`` → whether the row was this run's and was written.
Writer = Callable[[int, str, dict[str, Any]], bool]


@dataclass
class JobProgress:
    """The throttled, fenced progress writer of one run."""

    job_id: int
    token: str
    write: Writer = field(repr=False)
    clock: Callable[[], float] = time.monotonic
    #: When the last write went out (``clock`` time); None before the first.
    _written_at: float | None = None
    _pending: dict[str, Any] | None = None
    #: The value last written: the same one again is not written twice.
    _written: dict[str, Any] | None = None
    _lost: bool = False

    def set(self, done: int, total: int, message: str = "") -> None:
        """Record progress; write it now unless a write went out less than ``INTERVAL`` ago."""
        value = self._due(progress_value(done, total, message))
        if value is not None:
            self._send(value)

    async def aset(self, done: int, total: int, message: str = "") -> None:
        """``set`` for an ``async def`` body: a write that is due runs on a thread (Django's
        database calls refuse to run inside an event loop)."""
        value = self._due(progress_value(done, total, message))
        if value is not None:
            await sync_to_async(self._send_from_thread, thread_sensitive=False)(value)

    @property
    def has_pending(self) -> bool:
        """Whether ``flush`` has a value to write (an async run only then leaves its loop)."""
        return self._pending is not None and not self._lost

    def flush(self) -> None:
        """Write the value held back by the throttle, if any (the body has returned)."""
        if self._pending is not None and not self._lost:
            value, self._pending = self._pending, None
            self._written_at = self.clock()
            self._send(value)

    def _due(self, value: dict[str, Any]) -> dict[str, Any] | None:
        """``value`` if it is to be written now; else None (held back, or the run is lost)."""
        if self._lost or value == self._written:
            self._pending = None
            return None
        now = self.clock()
        final = value["done"] >= value["total"]
        if not final and self._written_at is not None and now - self._written_at < INTERVAL:
            self._pending = value
            return None
        self._pending = None
        self._written_at = now
        return value

    def _send_from_thread(self, value: dict[str, Any]) -> None:
        """``_send`` on a thread of its own, closing the connection it opened: a thread's
        connection left open would outlive the run (at most one such write a second)."""
        try:
            self._send(value)
        finally:
            connections.close_all()

    def _send(self, value: dict[str, Any]) -> None:
        try:
            owned = self.write(self.job_id, self.token, value)
        except DatabaseError as exc:
            # Progress is for the people watching: a write that failed (a lock wait that timed
            # out, a dropped connection) must not fail the run; the next due call tries again.
            log_event(logger, logging.WARNING, "jobs.worker.progress-failed",
                      job_id=self.job_id, error=str(exc)[:200])
            return
        self._written = value
        if not owned:
            # Another claim owns the row (or it is gone): this run may write nothing more.
            self._lost = True
            log_event(logger, logging.WARNING, "jobs.worker.progress-fenced", job_id=self.job_id)


def progress_value(done: Any, total: Any, message: Any = "") -> dict[str, Any]:
    """The stored form of a progress report; ``JobOptionError`` for one that cannot be."""
    for option, value in (("done", done), ("total", total)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise JobOptionError(f"set_progress: {option} must be an int of at least 0, "
                                 f"not {value!r}")
        if value > 2**53:  # past it a JSON number loses digits in a browser
            raise JobOptionError(f"set_progress: {option} must be at most 2**53, not {value!r}")
    if not isinstance(message, str):
        raise JobOptionError(f"set_progress: message must be a string, not {message!r}")
    message = message[:MAX_MESSAGE]
    if "\x00" in message or (not message.isascii() and not is_unicode(message)):
        raise JobOptionError("set_progress: message cannot contain a NUL character or a lone "
                             "surrogate")
    return {"done": done, "total": total, "message": message}


def progress_text(progress: Any) -> str:
    """``"37 / 100 — message"`` (or ``"37 / 100"``) for a stored progress; "" for none."""
    if not isinstance(progress, dict):
        return ""
    done, total = progress.get("done"), progress.get("total")
    if not isinstance(done, int) or not isinstance(total, int):
        return ""
    message = progress.get("message")
    text = f"{done:,} / {total:,}"
    return f"{text} — {message}" if isinstance(message, str) and message else text



