"""The SQLite store: conditional ``UPDATE … RETURNING`` in short ``BEGIN IMMEDIATE`` writes.

SQLite has one writer at a time, so a statement (or an immediate transaction) is atomic against
every other worker thread and process: that, not row locks, is what makes a claim exclusive here.
Batches travel as one JSON parameter (``json_each``), so no batch is ever more than one statement.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

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


class SQLiteStore(JobStore):
    """Jobs and fleet slots on SQLite (3.35+: RETURNING, UPDATE … FROM, json_each)."""

    vendor = "sqlite"
    dialect = "sqlite"

    @staticmethod
    def format_time(value: datetime) -> str:
        """Django's SQLite text form: UTC, no offset, microseconds."""
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds")

    @staticmethod
    def parse_time(value: Any) -> datetime:
        """Read a SQLite time (text, or a datetime when Django's converter ran) as aware UTC."""
        parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)

    def _json_time(self, value: datetime) -> str:
        return self.format_time(value)

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """A cursor inside one immediate write transaction (or the caller's, if one is open).

        IMMEDIATE takes the write lock up front: a deferred transaction that reads, then writes,
        can fail with "database is locked" at the write instead of waiting its turn.
        """
        with self.cursor() as cur:
            if self.connection.in_atomic_block:
                yield cur
                return
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    def enqueue(self, jobs: Sequence[NewJob]) -> list[EnqueuedJob]:
        """Insert ``jobs`` in one statement on the caller's connection (and transaction)."""
        if not jobs:
            return []
        payload = json.dumps([self._new_job_row(job) for job in jobs], separators=(",", ":"))
        with self.cursor() as cur:
            cur.execute(self.sql["enqueue"], {"jobs": payload, "now": self.now_param()})
            rows = cur.fetchall()
        rows.sort(key=lambda row: row[0])
        return [
            EnqueuedJob(id=r[0], visible_at=self.parse_time(r[1]), created_at=self.parse_time(r[2]))
            for r in rows
        ]

    def claim(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        visibility_timeout: float,
        caps: Mapping[str, int],
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` runnable jobs in one write transaction, skipping full kinds."""
        if limit <= 0:
            return []
        # Stored as Django's SQLite UUID form (hex), handed out in the canonical form PostgreSQL
        # returns, so a ClaimedJob looks the same on both engines.
        token = uuid.uuid4()
        now = self.now_param()
        with self._write() as cur:
            queues_json = json.dumps(list(queues))
            cur.execute(self.sql["claim_candidates"], {
                "queues": queues_json, "capped": json.dumps(list(caps)), "limit": limit,
                "now": now,
            })
            rows = cur.fetchall()
            if caps:
                cur.execute(self.sql["claim_caps"], {
                    "caps": json.dumps([[name, lim] for name, lim in caps.items()]),
                    "now": now,
                })
                for name, free in cur.fetchall():
                    if free > 0:
                        cur.execute(self.sql["claim_capped_candidates"], {
                            "name": name, "queues": queues_json, "limit": min(free, limit),
                            "now": now,
                        })
                        rows.extend(cur.fetchall())
            # The claim order across uncapped and capped kinds: priority, then due time, then id.
            rows.sort(key=lambda row: (-row[1], row[2], row[0]))
            candidates = {row[0]: row for row in rows[:limit]}
            if not candidates:
                return []
            cur.execute(self.sql["claim"], {
                "ids": json.dumps(list(candidates)),
                "token": token.hex,
                "worker_id": worker_id,
                "timeout": float(visibility_timeout),
                "now": now,
            })
            rows = cur.fetchall()
        claimed = []
        for r in rows:
            _, _, _, prev_status, prev_worker, prev_claimed_at = candidates[r[0]]
            claimed.append(ClaimedJob(
                id=r[0], name=r[1], queue=r[2], priority=r[3], args=self.parse_json(r[4]),
                kwargs=self.parse_json(r[5]), attempt=r[6], max_attempts=r[7], token=str(token),
                traceparent=r[8] or "", tracestate=r[9] or "", enqueued_by=r[10] or "",
                cancel_requested=bool(r[11]), claimed_at=self.parse_time(r[12]),
                redelivered_from=prev_worker if prev_status == "running" else None,
                previous_claimed_at=(
                    self.parse_time(prev_claimed_at)
                    if prev_status == "running" and prev_claimed_at else None
                ),
                woke=prev_status == "waiting",
            ))
        claimed.sort(key=lambda job: (-job.priority, job.id))
        return claimed

    def heartbeat(
        self, runs: Sequence[tuple[int, str]], visibility_timeout: float
    ) -> dict[int, bool]:
        """Extend every run's lease in one statement; absent ids were lost."""
        if not runs:
            return {}
        params = {
            "runs": json.dumps([[job_id, uuid.UUID(token).hex] for job_id, token in runs]),
            "timeout": float(visibility_timeout),
            "now": self.now_param(),
        }
        with self.cursor() as cur:
            cur.execute(self.sql["heartbeat"], params)
            return {row[0]: bool(row[1]) for row in cur.fetchall()}

    def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        """Settle a batch in one write transaction, each row fenced on its token."""
        if not settlements:
            return set()
        rows = [self._settlement_row(s) for s in settlements]
        for row in rows:
            row["token"] = uuid.UUID(row["token"]).hex
            # Stored as JSON text, as Django's JSONField keeps it on SQLite.
            if row["wait_match"] is not None:
                row["wait_match"] = json.dumps(row["wait_match"], separators=(",", ":"))
        batch = json.dumps(rows, separators=(",", ":"))
        now = self.now_param()
        with self._write() as cur:
            cur.execute(self.sql["settle"], {"batch": batch, "now": now})
            settled = {row[0] for row in cur.fetchall()}
            if settled:
                cur.execute(self.sql["settle_record"], {
                    "batch": batch, "settled": json.dumps(sorted(settled)),
                    "worker_id": worker_id, "now": now})
        return settled

    def record_attempts(self, attempts: Sequence[LostAttempt]) -> None:
        """Record attempts that ended without a report from their worker."""
        if not attempts:
            return
        batch = json.dumps([
            {
                "job_id": a.job_id,
                "attempt": a.attempt,
                "worker_id": a.worker_id,
                "started_at": None if a.started_at is None else self.format_time(a.started_at),
                "outcome": a.outcome,
                "error": a.error,
            }
            for a in attempts
        ])
        with self.cursor() as cur:
            cur.execute(self.sql["record_attempts"], {"batch": batch, "now": self.now_param()})

    # -- durable steps and events --------------------------------------------------------------

    def save_step(self, *, job_id: int, token: str, attempt: int, name: str, status: str,
                  result_json: str | None, wait_seconds: float | None) -> SavedStep | None:
        """Store a step fenced on ``token``; None when the run no longer owns the job."""
        params = {"job_id": job_id, "token": uuid.UUID(token).hex, "attempt": attempt,
                  "name": name, "status": status, "result_json": result_json,
                  "wait_seconds": wait_seconds, "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["step_save"], params)
            row = cur.fetchone()
        if row is None:
            return None
        return SavedStep(wait_until=None if row[1] is None else self.parse_time(row[1]))

    def find_event(self, *, name: str, match: dict[str, Any], after: int,
                   since: datetime) -> tuple[int, Any] | None:
        """The first matching event newer than ``after`` and sent since ``since``."""
        with self.cursor() as cur:
            cur.execute(self.sql["event_find"], {"name": name, "match": json.dumps(match),
                                                 "after": after,
                                                 "since": self.format_time(since)})
            row = cur.fetchone()
        return None if row is None else (row[0], self.parse_json(row[1]))

    def send_event(self, name: str, payload: dict[str, Any]) -> int:
        """Record an event and wake its waiters, inside the caller's transaction.

        No lock is needed: the insert makes this transaction SQLite's one writer until it
        commits, so a settle putting a run to wait runs wholly before or wholly after it.
        """
        body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        with transaction.atomic(using=self.alias), self.cursor() as cur:
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
            return self.parse_time(cur.fetchone()[0])

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
        return HeldLease(key=row[0], slot=row[1], holder=row[2],
                         expires_at=self.parse_time(row[3]))

    def renew_many(self, held: Sequence[HeldLease], ttl: float) -> set[tuple[str, int]]:
        """Extend each lease still held and unexpired, in one statement (rule 7)."""
        if not held:
            return set()
        with self.cursor() as cur:
            cur.execute(self.sql["lease_renew"], {"held": self._held_json(held),
                                                  "ttl": float(ttl), "now": self.now_param()})
            return {(row[0], row[1]) for row in cur.fetchall()}

    def release_many(self, held: Sequence[HeldLease]) -> None:
        """Hand back slots in one statement, fenced on holder."""
        if not held:
            return
        with self.cursor() as cur:
            cur.execute(self.sql["lease_release"], {"held": self._held_json(held)})

    @staticmethod
    def _held_json(held: Sequence[HeldLease]) -> str:
        return json.dumps([[h.key, h.slot, h.holder] for h in held])

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
