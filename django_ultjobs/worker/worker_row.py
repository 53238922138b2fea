"""This worker's row in the workers table: what operators see of the process
(rule 106 (live-row-kept)).

Written whole at start, touched at every beat of the heartbeat, and written whole again when a beat
finds it gone: an operator deleted it, or a prune ran with a retention shorter than the worker's
life. Without that, ``ultjobs stats`` and the admin's workers page lost a running worker for
good, and a job page the "overrunning" flag its worker's row carries (rule 56 (overrun-reported)).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..jobs.registry import registered_jobs, registry_generation
from ..observability.logs import log_event
from ..store import JobStore
from .options import WorkerOptions

logger = logging.getLogger("django_ultjobs.worker")


class WorkerRow:
    """Register this worker, keep its row fresh, and write it again whole when it is gone."""

    def __init__(self, store: JobStore, options: WorkerOptions, *,
                 overrunning: Callable[[], Sequence[Mapping[str, Any]]],
                 runners: Callable[[], Mapping[str, int] | None] | None = None) -> None:
        self.store = store
        self.options = options
        self.worker_id = options.worker_id
        #: The runs executing past their timeout now (the deadlines' list): a row written again
        #: carries them, as the row it replaces did.
        self.overrunning = overrunning
        #: Which child process runs each run now (the process pool), or None (threads).
        self.runners = runners
        self._runners_written: dict[str, int] | None = None
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        #: When the row first said this process started (the database's clock), which a row
        #: written again keeps; None until the row is first written.
        self.started_at: datetime | None = None
        #: The registry generation whose job names the row lists (-1: none written yet).
        self.jobs_generation = -1

    def register(self, in_flight: int = 0) -> None:
        """Write the whole row: every column the admin and ``ultjobs stats`` read."""
        options = self.options
        generation = registry_generation()  # read first: a job registered meanwhile is told next
        self.started_at = self.store.worker_upsert(
            self.worker_id, self.hostname, self.pid, options.places, options.queues,
            visibility_timeout=options.visibility_timeout,
            heartbeat_interval=options.heartbeat_interval, jobs=list(registered_jobs()),
            in_flight=in_flight, overrunning=self.overrunning(), started_at=self.started_at)
        self.jobs_generation = generation

    def record_jobs(self, generation: int) -> None:
        """Tell the admin which job names this worker knows, when that changed since the row
        said so last (a task resolved on its first claim): it flags queued jobs nobody knows.
        A write that fails is logged and tried again at the next call."""
        if generation == self.jobs_generation:
            return
        try:
            self.store.worker_jobs(self.worker_id, list(registered_jobs()))
            self.jobs_generation = generation
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))

    def touch(self, in_flight: int) -> None:
        """Mark the row seen now (one statement); write it again whole if it is gone. With the
        process pool, write which child runs what when that changed since the last write."""
        if self.store.worker_touch(self.worker_id, in_flight):
            self._write_runners()
            return
        self._runners_written = None
        self.register(in_flight)
        log_event(logger, logging.WARNING, "jobs.worker.row-restored", worker_id=self.worker_id,
                  note="this worker's row was gone (deleted by hand, or pruned); written again")

    def _write_runners(self) -> None:
        """Write the runners when they changed; a failed write is tried at the next touch."""
        current = self.runners() if self.runners is not None else None
        if current is None or current == self._runners_written:
            return
        try:
            self.store.worker_runners(self.worker_id, current)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))
            return
        self._runners_written = dict(current)
