"""Wake-ups on PostgreSQL: LISTEN for enqueues so an idle worker claims within milliseconds,
and for cancel requests of this worker's runs so they are cancelled at once.

Polling stays the fallback (and SQLite's only way): a notification only makes the next claim
happen now instead of at the next poll, and a cancel request be found now instead of at the
next heartbeat, so a lost notification costs latency, never a job nor a cancel.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from django.db import connections

from ..observability.logs import log_event
from ..store import JobStore

logger = logging.getLogger("django_ultjobs.worker")

#: The channel of cancel requests, its payload the id of the worker holding the run
#: (``sql/postgresql.sql``, notify_cancel).
CANCEL_CHANNEL = "django_ultjobs_cancel"


class Listener:
    """One thread with its own session LISTENing on both channels; reconnects on loss."""

    def __init__(self, *, store: JobStore, queues: Sequence[str], wake: Callable[[], None],
                 worker_id: str, cancels: Callable[[], None] | None = None) -> None:
        self.store = store
        self.queues = set(queues)
        self.wake = wake
        self.worker_id = worker_id
        #: Called when a run of this worker was asked to stop (``cancel_jobs`` notifies the
        #: worker holding it, rule 133 (cancel-reaches-body)): the heartbeat looks for the request
        #: at once.
        self.cancels = cancels
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ultjobs-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        backoff = 0.2
        try:
            while not self._stop.is_set():
                try:
                    self._listen()
                    backoff = 0.2
                except Exception as exc:
                    log_event(logger, logging.WARNING, "jobs.worker.listen-failed",
                              worker_id=self.worker_id, error=repr(exc), retry_in=backoff)
                    connections[self.store.alias].close()
                    if self._stop.wait(backoff):
                        return
                    backoff = min(backoff * 2, 10.0)
        finally:
            connections.close_all()

    def _listen(self) -> None:
        with self.store.cursor() as cur:
            cur.execute(self.store.sql["listen"])
        raw = connections[self.store.alias].connection
        # Whatever was enqueued while this session was not listening (start-up, a reconnect)
        # sent its notification to nobody: claim once now rather than wait for the poll.
        self.wake()
        if self.cancels is not None:
            # Likewise a cancel request sent while nobody listened.
            self.cancels()
        while not self._stop.is_set():
            for notify in raw.notifies(timeout=0.5, stop_after=64):
                if notify.channel == CANCEL_CHANNEL:
                    if notify.payload == self.worker_id and self.cancels is not None:
                        self.cancels()
                elif notify.payload in self.queues:
                    self.wake()
