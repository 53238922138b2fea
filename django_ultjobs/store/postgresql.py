"""The PostgreSQL store (psycopg 3): single-statement claims with FOR UPDATE SKIP LOCKED."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from django.db import transaction

from .base import (
    ClaimedJob,
    EnqueuedJob,
    HeldLease,
    JobStore,
    LostAttempt,
    NewJob,
    SavedStep,
    Settlement,
)


class PostgresStore(JobStore):
    """Jobs and fleet slots on PostgreSQL; every batch is one statement and one round trip."""

    vendor = "postgresql"
    dialect = "postgresql"

    def _raw_cursor(self, raw: Any) -> Any:
        # Server-side parameter binding, whatever Django's connection uses for the ORM: the
        # client-side cursor quoted every parameter (arrays, uuids) in Python, ~11 % of the claim
        # loop's time in a drain profile. Each thread has its own connection, so the statements
        # psycopg prepares after a few runs are per connection and never shared.
        return psycopg.Cursor(raw)

    def enqueue(self, jobs: Sequence[NewJob]) -> list[EnqueuedJob]:
        """Insert ``jobs`` in one statement on the caller's connection (and transaction)."""
        if not jobs:
            return []
        payload = json.dumps([self._new_job_row(job) for job in jobs], separators=(",", ":"))
        with self.cursor() as cur:
            cur.execute(self.sql["enqueue"], {"jobs": payload, "now": self.now_param()})
            rows = cur.fetchall()
        rows.sort(key=lambda row: row[0])
        return [EnqueuedJob(id=row[0], visible_at=row[1], created_at=row[2]) for row in rows]

    def claim(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        visibility_timeout: float,
        caps: Mapping[str, int],
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` runnable jobs in one statement, skipping full kinds."""
        if limit <= 0:
            return []
        token = uuid.uuid4()
        params = {
            "cap_names": list(caps),
            "cap_limits": list(caps.values()),
            "queues": list(queues),
            "limit": limit,
            "token": token,
            "worker_id": worker_id,
            "timeout": float(visibility_timeout),
            "now": self.now_param(),
        }
        with self.cursor() as cur:
            cur.execute(self.sql["claim"], params)
            rows = cur.fetchall()
        claimed = [
            ClaimedJob(
                id=r[0], name=r[1], queue=r[2], priority=r[3], args=self.parse_json(r[4]),
                kwargs=self.parse_json(r[5]),
                attempt=r[6], max_attempts=r[7], token=str(token), traceparent=r[8],
                tracestate=r[9], enqueued_by=r[10], cancel_requested=r[11], claimed_at=r[12],
                redelivered_from=r[14] if r[13] == "running" else None,
                previous_claimed_at=r[15] if r[13] == "running" else None,
                woke=r[13] == "waiting",
            )
            for r in rows
        ]
        claimed.sort(key=lambda job: (-job.priority, job.id))
        return claimed

    def heartbeat(
        self, runs: Sequence[tuple[int, str]], visibility_timeout: float
    ) -> dict[int, bool]:
        """Extend every run's lease in one statement; absent ids were lost."""
        if not runs:
            return {}
        params = {
            "ids": [job_id for job_id, _ in runs],
            "tokens": [uuid.UUID(token) for _, token in runs],
            "timeout": float(visibility_timeout),
            "now": self.now_param(),
        }
        with self.cursor() as cur:
            cur.execute(self.sql["heartbeat"], params)
            return {row[0]: bool(row[1]) for row in cur.fetchall()}

    def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        """Settle a batch in one statement, each row fenced on its token, attempts recorded."""
        if not settlements:
            return set()
        batch = json.dumps([self._settlement_row(s) for s in settlements], separators=(",", ":"))
        params = {"batch": batch, "worker_id": worker_id, "now": self.now_param()}
        waits = sorted({s.wait_event for s in settlements if s.wait_event})
        with self.cursor() as cur:
            if not waits:
                cur.execute(self.sql["settle"], params)
                return {row[0] for row in cur.fetchall()}
            # Runs going to wait on events: hold each event's lock across the check and the
            # write, so an event being sent right now is either seen here or sees the wait.
            with self.connection.connection.transaction():
                cur.execute(self.sql["event_wait_lock"], {"names": waits})
                cur.execute(self.sql["settle"], params)
                return {row[0] for row in cur.fetchall()}

    def record_attempts(self, attempts: Sequence[LostAttempt]) -> None:
        """Record attempts that ended without a report from their worker."""
        if not attempts:
            return
        batch = json.dumps(
            [
                {
                    "job_id": a.job_id,
                    "attempt": a.attempt,
                    "worker_id": a.worker_id,
                    "started_at": None if a.started_at is None else a.started_at.isoformat(),
                    "outcome": a.outcome,
                    "error": a.error,
                }
                for a in attempts
            ]
        )
        with self.cursor() as cur:
            cur.execute(self.sql["record_attempts"], {"batch": batch, "now": self.now_param()})

    # -- durable steps and events --------------------------------------------------------------

    def save_step(self, *, job_id: int, token: str, attempt: int, name: str, status: str,
                  result_json: str | None, wait_seconds: float | None) -> SavedStep | None:
        """Store a step fenced on ``token``; None when the run no longer owns the job."""
        params = {"job_id": job_id, "token": uuid.UUID(token), "attempt": attempt, "name": name,
                  "status": status, "result_json": result_json, "wait_seconds": wait_seconds,
                  "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["step_save"], params)
            row = cur.fetchone()
        return None if row is None else SavedStep(wait_until=row[1])

    def find_event(self, *, name: str, match: dict[str, Any], after: int,
                   since: datetime) -> tuple[int, Any] | None:
        """The first matching event newer than ``after`` and sent since ``since``."""
        with self.cursor() as cur:
            cur.execute(self.sql["event_find"], {"name": name, "match": json.dumps(match),
                                                 "after": after, "since": since})
            row = cur.fetchone()
        return None if row is None else (row[0], self.parse_json(row[1]))

    def send_event(self, name: str, payload: dict[str, Any]) -> int:
        """Record an event and wake its waiters, inside the caller's transaction."""
        body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        with transaction.atomic(using=self.alias), self.cursor() as cur:
            # Shared: senders never wait for each other, only for a settle that is putting a
            # run to wait on this event (which takes it exclusively).
            cur.execute(self.sql["event_send_lock"], {"name": name})
            cur.execute(self.sql["event_insert"], {"name": name, "payload": body,
                                                   "now": self.now_param()})
            event_id = cur.fetchone()[0]
            cur.execute(self.sql["event_wake"], {"name": name, "payload": body,
                                                 "event_id": event_id, "now": self.now_param()})
        return event_id

    def db_now(self) -> datetime:
        """The database's clock (or the injected one)."""
        with self.cursor() as cur:
            cur.execute(self.sql["db_now"], {"now": self.now_param()})
            return cur.fetchone()[0]

    # -- leases -------------------------------------------------------------------------------

    def acquire(self, key: str, limit: int, ttl: float, holder: str) -> HeldLease | None:
        """Take the lowest free slot of ``key`` below ``limit`` in one statement."""
        params = {"key": key, "limit": limit, "ttl": float(ttl), "holder": holder,
                  "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["lease_acquire"], params)
            row = cur.fetchone()
        if row is None:
            return None
        return HeldLease(key=row[0], slot=row[1], holder=row[2], expires_at=row[3])

    def renew_many(self, held: Sequence[HeldLease], ttl: float) -> set[tuple[str, int]]:
        """Extend each lease still held and unexpired, in one statement (rule 7)."""
        if not held:
            return set()
        with self.cursor() as cur:
            cur.execute(self.sql["lease_renew"], {**self._lease_arrays(held), "ttl": float(ttl),
                                                  "now": self.now_param()})
            return {(row[0], row[1]) for row in cur.fetchall()}

    def release_many(self, held: Sequence[HeldLease]) -> None:
        """Hand back slots in one statement, fenced on holder."""
        if not held:
            return
        with self.cursor() as cur:
            cur.execute(self.sql["lease_release"], self._lease_arrays(held))

    @staticmethod
    def _lease_arrays(held: Sequence[HeldLease]) -> dict[str, Any]:
        return {
            "keys": [h.key for h in held],
            "slots": [h.slot for h in held],
            "holders": [h.holder for h in held],
        }

    # -- workers ------------------------------------------------------------------------------

    def worker_upsert(self, worker_id: str, hostname: str, pid: int, threads: int,
                      queues: Sequence[str]) -> None:
        """Register this worker process."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_upsert"], {
                "id": worker_id, "hostname": hostname, "pid": pid, "threads": threads,
                "queues": json.dumps(list(queues)), "now": self.now_param()})

    def worker_touch(self, worker_id: str, in_flight: int) -> None:
        """Keep this worker's row fresh."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_touch"], {"id": worker_id, "in_flight": in_flight,
                                                   "now": self.now_param()})

    def worker_stop(self, worker_id: str) -> None:
        """Mark this worker stopped."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_stop"], {"id": worker_id, "now": self.now_param()})
