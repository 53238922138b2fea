"""Wake-ups on PostgreSQL: LISTEN for enqueues so an idle worker claims within milliseconds.

Polling stays the fallback (and SQLite's only way): a notification only makes the next claim
happen now instead of at the next poll, so a lost notification costs latency, never a job.

The LISTEN is on the claim loop's own session, and the claim loop's waits watch its socket
(``Wakeup``): an enqueue's notification wakes the claim loop directly, and the claim goes out on
the session that just received it. A listener thread on a session of its own cost an idle pickup
a thread hop and a second, sleeping server process (performance.md item 92; rule 100).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections

from ..logs import log_event
from ..store import JobStore
from .wakeup import Wakeup

logger = logging.getLogger("django_ultjobs.worker")

#: Seconds before a LISTEN that failed is tried again: doubling from the first, at most the last.
BACKOFF_FIRST = 0.2
BACKOFF_MAX = 10.0


class Listener:
    """LISTENs on ``django_ultjobs`` on the claim loop's session (``ensure``, called by the claim
    loop's thread before each claim), again on every new session after a reconnect."""

    def __init__(self, *, store: JobStore, queues: Sequence[str], wake: Callable[[], None],
                 worker_id: str, wakeup: Wakeup) -> None:
        self.store = store
        self.queues = set(queues)
        self.wake = wake
        self.worker_id = worker_id
        self.wakeup = wakeup
        #: The driver connection LISTENing now (None: none is).
        self._raw: Any = None
        #: Whether ``_raw`` is still this thread's session, and open (the wait asks it too).
        self._current: Callable[[], bool] = lambda: False
        self._listening = threading.Event()
        self._retry_at = 0.0
        self._backoff = BACKOFF_FIRST

    def wait_listening(self, timeout: float) -> bool:
        """Block until the first LISTEN is in place (tests measure pickup after this)."""
        return self._listening.wait(timeout)

    def ensure(self) -> None:
        """LISTEN on this thread's session unless it already does; a failure is logged and
        tried again after a backoff (the poll covers the meanwhile)."""
        raw = self._raw
        if raw is not None and self._current():
            return
        conn = connections[self.store.alias]
        self._detach()
        if time.monotonic() < self._retry_at:
            return
        if conn.connection is not None and conn.connection.closed:
            # Broken under the last wait: a new session, not a failed LISTEN on the dead one.
            conn.close()
        try:
            with self.store.cursor() as cur:
                cur.execute(self.store.sql["listen"])
            raw = conn.connection
            raw.add_notify_handler(self._on_notify)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.listen-failed",
                      worker_id=self.worker_id, error=repr(exc), retry_in=self._backoff)
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
            return
        self._raw = raw
        self._backoff = BACKOFF_FIRST
        self._current = lambda: conn.connection is raw and not raw.closed
        self.wakeup.watch(raw.pgconn, self._current)
        self._listening.set()
        # Whatever was enqueued while this session was not listening (start-up, a reconnect)
        # sent its notification to nobody: claim once now rather than wait for the poll.
        self.wake()

    def stop(self) -> None:
        self._detach()

    def _detach(self) -> None:
        raw, self._raw = self._raw, None
        self.wakeup.unwatch()
        if raw is not None:
            with contextlib.suppress(ValueError):
                raw.remove_notify_handler(self._on_notify)

    def _on_notify(self, notify: Any) -> None:
        if notify.payload in self.queues:
            self.wake()
