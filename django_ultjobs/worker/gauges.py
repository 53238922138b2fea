"""The gauge sampler: one worker of the fleet reads the queue and slot gauges, the others none.

Every worker started with an SDK configured runs this thread; each interval it tries to hold
the fleet slot ``ultjobs:gauges`` (limit 1, the same slots ``concurrency=`` uses, so it is held
by one worker of the fleet at a time, rule 71 (gauges-one-reader)) and, while it holds it, reads the
gauges in two statements and publishes them on ``metrics.board``, where the SDK's reader finds them.
A worker that does not hold it publishes nothing. A sampler that dies (SIGKILL) leaves its slot to
lapse after three GAUGE_INTERVALs; one that stops hands it back at once.
"""

from __future__ import annotations

import logging
import threading

from django.db import connections

from ..core.slot_keys import SLOT_KEY_PREFIX
from ..observability import metrics
from ..observability.logs import log_event
from ..observability.metrics import GaugeBoard, GaugeSample, QueueSample
from ..store import JobStore, SlotHold, SlotStore

logger = logging.getLogger("django_ultjobs.worker")

#: The fleet slot whose holder samples the gauges. Not a job's key (those start with "job:").
GAUGE_SLOT_KEY = "ultjobs:gauges"
#: Runnable jobs counted per queue and live status: past it the depth gauge reads "at least",
#: as the stats view's figures do, so a sample costs the same at a million queued jobs as at ten.
DEPTH_CAP = 10_000


class GaugeSampler:
    """A thread that samples the gauges while this worker holds the fleet's sampler slot."""

    def __init__(self, *, store: JobStore, slot_store: SlotStore, worker_id: str,
                 interval: float, board: GaugeBoard | None = None) -> None:
        self.store = store
        self.slot_store = slot_store
        self.worker_id = worker_id
        self.holder = f"{worker_id}:gauges"
        self.interval = interval
        self.board = board if board is not None else metrics.board
        #: Samples read and published by this worker. Kept for tests, which show that one worker
        #: of two samples and the other never does.
        self.samples = 0
        self._held: SlotHold | None = None
        # The queues and slot keys sampled so far (see _with_zeros).
        self._queues: set[str] = set()
        self._keys: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ultjobs-gauges", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        try:
            while True:
                self.sample_once()
                if self._stop.wait(self.interval):
                    return
        finally:
            self._release()
            # Every thread the worker starts closes its own connection (rule 13 (nothing-leaks)).
            connections.close_all()

    def sample_once(self) -> bool:
        """Keep (or take) the sampler slot and, holding it, read and publish one sample;
        return whether this worker sampled. Never raises: a failed read publishes nothing."""
        try:
            if not self._hold():
                self.board.withdraw(self.worker_id)
                return False
            queues, slots = self.store.gauge_rows(DEPTH_CAP)
        except Exception as exc:
            # Stale figures would read as live ones: nothing is better than wrong.
            self.board.withdraw(self.worker_id)
            log_event(logger, logging.WARNING, "jobs.worker.gauges-failed",
                      worker_id=self.worker_id, error=repr(exc))
            return False
        self.board.publish(self.worker_id, self._with_zeros(queues, slots))
        self.samples += 1
        return True

    def _with_zeros(self, queues: list[tuple[str, int, float]], slots: list[tuple[str, int]]
                    ) -> GaugeSample:
        """The sample, with 0 for every queue and key this sampler saw before and the database
        no longer lists: a queue that drained reads 0 on a dashboard, not a series that stops."""
        seen_queues = {q for q, _, _ in queues}
        seen_keys = {key for key, _ in slots}
        queues = queues + [(q, 0, 0.0) for q in sorted(self._queues - seen_queues)]
        slots = slots + [(key, 0) for key in sorted(self._keys - seen_keys)]
        self._queues |= seen_queues
        self._keys |= seen_keys
        return GaugeSample(
            queues=tuple(QueueSample(q, depth, age) for q, depth, age in queues),
            slots=tuple((key, n) for key, n in slots if key.startswith(SLOT_KEY_PREFIX)))

    def _hold(self) -> bool:
        """Renew the sampler slot, or try to take it; whether this worker holds it now."""
        ttl = 3 * self.interval
        if self._held is not None and self.slot_store.renew(self._held, ttl):
            return True
        self._held = self.slot_store.acquire(GAUGE_SLOT_KEY, 1, ttl, self.holder)
        return self._held is not None

    def _release(self) -> None:
        """Withdraw this worker's sample and release the slot, so another worker samples
        from its next interval instead of after the slot lapses."""
        self.board.withdraw(self.worker_id)
        held, self._held = self._held, None
        if held is None:
            return
        try:
            self.slot_store.release(held)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.gauges-release-failed",
                      worker_id=self.worker_id, error=repr(exc))
