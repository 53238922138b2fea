"""What a running body writes through the store: its durable steps, its progress, and the
events it waits for or sends."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from .connection import StoreConnection
from .records import SavedStep


class BodyRows(StoreConnection):
    """Steps, progress and events: the rows a body's ``ctx`` reads and writes."""

    def save_step(self, *, job_id: int, token: str, attempt: int, name: str, status: str,
                  result_json: str | None, wait_seconds: float | None) -> SavedStep | None:
        """Store a step (``done``, or ``waiting`` for ``wait_seconds``), fenced on ``token``;
        None when the run no longer owns the job."""
        params = {"job_id": job_id, "token": self.token_param(token), "attempt": attempt,
                  "name": name, "status": status, "result_json": result_json,
                  "wait_seconds": wait_seconds, "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["step_save"], params)
            row = cur.fetchone()
        if row is None:
            return None
        return SavedStep(wait_until=None if row[1] is None else self.parse_time(row[1]))

    def save_progress(self, job_id: int, token: str, progress: dict[str, Any]) -> bool:
        """Store a run's progress, fenced on ``token`` (rule 79 (progress-throttled-fenced)); False
        when the run no longer owns the job."""
        params = {"job_id": job_id, "token": self.token_param(token),
                  "progress": json.dumps(progress, separators=(",", ":"))}
        with self.cursor() as cur:
            cur.execute(self.sql["progress_save"], params)
            return cur.fetchone() is not None

    def find_event(self, *, job_id: int, name: str, match: dict[str, Any],
                   after: int) -> tuple[int, Any] | None:
        """The first event named ``name`` matching ``match`` that job ``job_id`` may consume:
        newer than id ``after`` and sent no earlier than the job was enqueued (compared in SQL,
        in the database's own time format). ``(id, payload)``, or None."""
        with self.cursor() as cur:
            self.execute_unprepared(cur, "event_find", {
                "name": name, "match": json.dumps(match), "after": after, "job_id": job_id})
            row = cur.fetchone()
        return None if row is None else (row[0], self.parse_json(row[1]))

    def send_event(self, name: str, payload: dict[str, Any]) -> int:
        """Record an event and wake the jobs waiting for it, in the caller's transaction.

        On PostgreSQL the event name's advisory lock is taken shared first: senders never wait
        for each other, only for a settle that is putting a run to wait on this event (which
        takes it exclusively), so the event is either seen by that settle or sees the wait.
        SQLite needs no lock: the insert makes this transaction its one writer until it commits,
        so such a settle runs wholly before or wholly after it.
        """
        body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        with transaction.atomic(using=self.alias), self.cursor() as cur:
            if "event_send_lock" in self.sql:
                cur.execute(self.sql["event_send_lock"], {"name": name})
            cur.execute(self.sql["event_insert"], {"name": name, "payload": body,
                                                   "now": self.now_param()})
            event_id = cur.fetchone()[0]
            cur.execute(self.sql["event_wake"], {"name": name, "payload": body,
                                                 "event_id": event_id, "now": self.now_param()})
        return event_id
