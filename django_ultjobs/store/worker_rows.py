"""The workers table through the store: a worker process's row, written at its start, touched
by its heartbeat, marked at its stop."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .connection import StoreConnection


class WorkerRows(StoreConnection):
    """Each worker process's row (rule 106 (live-row-kept)), as the admin and ``ultjobs stats``
    read it."""

    def worker_upsert(self, worker_id: str, hostname: str, pid: int, threads: int,
                      queues: Sequence[str], *, visibility_timeout: float | None = None,
                      heartbeat_interval: float | None = None, jobs: Sequence[str] = (),
                      in_flight: int = 0, overrunning: Sequence[Mapping[str, Any]] = (),
                      started_at: datetime | None = None) -> datetime:
        """Register this worker process, with the lease timings it runs under, the job names
        it knows, its runs in flight and overrunning bodies; return when it started.

        ``started_at`` is the start a row written again keeps (None: now)."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_upsert"], {
                "id": worker_id, "hostname": hostname, "pid": pid, "threads": threads,
                "queues": json.dumps(list(queues)), "now": self.now_param(),
                "visibility_timeout": visibility_timeout,
                "heartbeat_interval": heartbeat_interval, "jobs": json.dumps(sorted(jobs)),
                "in_flight": in_flight,
                "overrunning": json.dumps(list(overrunning), default=str) if overrunning
                else None,
                "started_at": None if started_at is None else self.format_time(started_at)})
            return self.parse_time(cur.fetchone()[0])

    def worker_jobs(self, worker_id: str, jobs: Sequence[str]) -> None:
        """Record the job names this worker knows now (it resolved more since it started)."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_jobs"], {"id": worker_id,
                                                  "jobs": json.dumps(sorted(jobs))})

    def worker_overrunning(self, worker_id: str, runs: Sequence[Mapping[str, Any]]) -> None:
        """Record the runs of this worker still executing past their timeout
        (rule 56 (overrun-reported))."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_overrunning"], {
                "id": worker_id, "overrunning": json.dumps(list(runs), default=str)})

    def worker_runners(self, worker_id: str, runners: Mapping[str, int]) -> None:
        """Record which child process runs each of this worker's runs (``--pool process``)."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_runners"], {
                "id": worker_id, "runners": json.dumps(dict(runners))})

    def worker_touch(self, worker_id: str, in_flight: int) -> bool:
        """Keep this worker's row fresh; False when the row is gone (pruned, deleted)."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_touch"], {"id": worker_id, "in_flight": in_flight,
                                                   "now": self.now_param()})
            return cur.fetchone() is not None

    def worker_stop(self, worker_id: str) -> None:
        """Mark this worker stopped."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_stop"], {"id": worker_id, "now": self.now_param()})
