"""The schedules' SQL: register periodic jobs, and enqueue each tick once across the fleet.

Beside the job store, on its connection and cursor (rule 41 (instrumented-statements)): the
scheduler thread of every worker calls it, and nobody leads. A worker offers candidate ticks; which
are due, which the catch-up policy keeps and where the schedule's cursor moves are decided by the
statement on the database's clock, never the worker's (rule 102 (database-clock-ticks)). One
statement on PostgreSQL; on SQLite one ``BEGIN IMMEDIATE`` write of three, the first of which
decides (rule 60 (tick-once)).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..core.schedules import Candidates
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
    #: The newest tick dealt with (or when the schedule began, or was resumed).
    last_tick: datetime | None
    paused: bool


@dataclass(frozen=True, slots=True)
class TickAnswer:
    """What the tick statement decided, on the database's clock."""

    #: ``(id, tick)`` of each job this statement created, oldest tick first.
    created: list[tuple[int, datetime]]
    #: The database's clock when it decided.
    now: datetime
    #: The schedule's cursor after the statement; None when the schedule has no row.
    cursor: datetime | None
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

    def enqueue_ticks(self, job: TickJob, offer: Candidates, enqueued_by: str) -> TickAnswer:
        """Enqueue one job per tick of ``offer`` that the database's clock has reached and the
        catch-up policy keeps, unless another worker got there first or the schedule is paused
        (rules 60 (tick-once) to 62 (catch-up-policy), 102 (database-clock-ticks)); a tick still
        ahead of the database's clock is neither enqueued nor passed by the cursor."""
        store = self.store
        params = {"name": job.name, "queue": job.queue, "priority": job.priority,
                  "max_attempts": job.max_attempts, "enqueued_by": enqueued_by,
                  "now": store.now_param(), "keep": offer.keep, "late": offer.late}
        if "schedule_tick" in store.sql:
            with store.cursor() as cur:
                cur.execute(store.sql["schedule_tick"], {
                    **params, "ticks": list(offer.ticks), "floor": offer.floor,
                    "horizon": offer.horizon})
                rows = cur.fetchall()
            first = rows[0]
            return TickAnswer(
                created=[(row[0], store.parse_time(row[1])) for row in rows if row[0] is not None],
                now=store.parse_time(first[2]), cursor=self._time_or_none(first[3]),
                paused=bool(first[4]))
        return self._enqueue_in_three(params, offer)

    def _enqueue_in_three(self, params: dict[str, Any], offer: Candidates) -> TickAnswer:
        """SQLite (no DML in a CTE): decide, move the cursor, insert, in one write transaction;
        the last two read the clock the first read, so all three see one instant."""
        store = self.store
        with store.write_transaction(), store.cursor() as cur:
            cur.execute(store.sql["schedule_due"], {
                **params, "ticks": json.dumps([[orm_time(t), clock_time(store, t)]
                                               for t in offer.ticks]),
                "floor": None if offer.floor is None else clock_time(store, offer.floor),
                "horizon": clock_time(store, offer.horizon)})
            now, cursor, paused, newest, kept = cur.fetchone()
            created: list[tuple[Any, ...]] = []
            if newest is not None:
                decided = {**params, "now": now}
                cur.execute(store.sql["schedule_advance"], {**decided, "newest": newest})
                # Oldest first, so ids rise with ticks as on PostgreSQL.
                oldest_first = sorted(json.loads(kept), key=lambda pair: pair[1])
                cur.execute(store.sql["schedule_insert"], {**decided,
                                                           "ticks": json.dumps(oldest_first)})
                created = list(cur.fetchall())
                cursor = newest
        return TickAnswer(created=[(row[0], store.parse_time(row[1])) for row in created],
                          now=store.parse_time(now), cursor=self._time_or_none(cursor),
                          paused=bool(paused))

    def _time_or_none(self, value: Any) -> datetime | None:
        return None if value is None else self.store.parse_time(value)


def clock_time(store: JobStore, moment: datetime) -> str:
    """``moment`` in the form SQLite's clock macro reads (UTC, milliseconds), which the tick
    statement compares as text with that clock and with its cursor."""
    return str(store.format_time(moment))[:23]


def orm_time(moment: datetime) -> str:
    """``moment`` as Django writes a ``DateTimeField`` on SQLite (UTC, no offset, microseconds
    only when there are some), so an ORM lookup by tick finds the row the scheduler wrote."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
