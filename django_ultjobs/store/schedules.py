"""The schedules' SQL: register periodic jobs, and enqueue each tick once across the fleet.

Beside the job store, on its connection and cursor (rule 41): the scheduler thread of every
worker calls it, and nobody leads. A tick is enqueued by one statement on PostgreSQL and by one
``BEGIN IMMEDIATE`` write of two statements on SQLite (rule 60).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from .base import JobStore


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """What a worker says about one of its periodic jobs: shown in the admin's Schedules."""

    name: str
    #: ``*/5 * * * *`` or ``every 30 s``.
    schedule: str
    timezone: str
    catch_up: str


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """One schedule's row as the database has it now."""

    name: str
    #: The newest tick enqueued (or when the schedule began, or was resumed).
    last_tick: datetime | None
    paused: bool


@dataclass(frozen=True, slots=True)
class TickJob:
    """The job a tick enqueues: a periodic job's name and how its runs are queued."""

    name: str
    queue: str
    priority: int
    max_attempts: int


class ScheduleStore:
    """The schedule queries of one job store's engine."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def sync(self, schedules: Sequence[ScheduleInfo]) -> tuple[dict[str, ScheduleState],
                                                               datetime]:
        """Register ``schedules`` (creating the rows of new ones, begun now) and return every
        one's state, with the database's clock, in one statement."""
        store = self.store
        payload = json.dumps([
            {"name": s.name, "schedule": s.schedule, "timezone": s.timezone,
             "catch_up": s.catch_up} for s in sorted(schedules, key=lambda s: s.name)])
        if not schedules:
            return {}, store.db_now()
        with store.write_transaction(), store.cursor() as cur:
            cur.execute(store.sql["schedule_sync"], {"schedules": payload,
                                                     "now": store.now_param()})
            rows = cur.fetchall()
        states = {row[0]: ScheduleState(
            name=row[0], last_tick=None if row[1] is None else store.parse_time(row[1]),
            paused=bool(row[2])) for row in rows}
        return states, store.parse_time(rows[0][3])

    def enqueue_ticks(self, job: TickJob, ticks: Sequence[datetime], enqueued_by: str
                      ) -> list[tuple[int, datetime]]:
        """Enqueue one job per tick of ``ticks`` (ascending), visible at its tick, unless
        another worker got there first or the schedule is paused; return ``(id, tick)`` of
        each job this call created (rule 60)."""
        if not ticks:
            return []
        store = self.store
        params = {"name": job.name, "queue": job.queue, "priority": job.priority,
                  "max_attempts": job.max_attempts, "enqueued_by": enqueued_by,
                  "now": store.now_param()}
        if "schedule_tick" in store.sql:
            with store.cursor() as cur:
                cur.execute(store.sql["schedule_tick"], {
                    **params, "newest": ticks[-1], "ticks": list(ticks)})
                rows = cur.fetchall()
        else:
            rows = self._enqueue_in_two(params, ticks)
        return [(row[0], store.parse_time(row[1])) for row in rows]

    def _enqueue_in_two(self, params: dict[str, object], ticks: Sequence[datetime]
                        ) -> list[tuple[object, ...]]:
        """SQLite: move the cursor, then insert, in one write transaction (no DML in a CTE)."""
        store = self.store
        pairs = json.dumps([[orm_time(t), store.format_time(t)[:23]] for t in ticks])
        with store.write_transaction(), store.cursor() as cur:
            cur.execute(store.sql["schedule_advance"], {
                "name": params["name"], "newest": orm_time(ticks[-1]), "now": params["now"]})
            if cur.fetchone() is None:
                return []
            cur.execute(store.sql["schedule_insert"], {**params, "ticks": pairs})
            return list(cur.fetchall())


def orm_time(moment: datetime) -> str:
    """``moment`` as Django writes a ``DateTimeField`` on SQLite (UTC, no offset, microseconds
    only when there are some), so an ORM lookup by tick finds the row the scheduler wrote."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
