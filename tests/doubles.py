"""Test doubles shared by the test modules: clocks, a claimed job, recording stores.

One module, so a test module never imports another test module for its doubles.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import OperationalError

from django_ultjobs.store import ClaimedJob, JobStore, SlotHold, SlotStore, get_store
from django_ultjobs.store.postgresql import PostgresStore
from django_ultjobs.store.records import Settlement
from django_ultjobs.store.sqlite import SQLiteStore

#: The worker id the hand-driven worker parts run under.
WORKER = "host:1:abcdef"


# -- clocks -------------------------------------------------------------------------------------


class FakeClock:
    """An injectable clock for the store: starts at the real time, moves only when told."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class MonotonicClock:
    """An injectable monotonic clock (seconds) for ``FleetSlots``: moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- a claimed job --------------------------------------------------------------------------------


def claimed(job_id: int = 1, name: str = "record", *, args: Any = None,
            kwargs: Any = None) -> ClaimedJob:
    """A job as a claim returns it, under a fresh token, never read from a database."""
    return ClaimedJob(
        id=job_id, name=name, queue="default", priority=0,
        args=[] if args is None else args, kwargs={} if kwargs is None else kwargs,
        attempt=1, max_attempts=3, token=str(uuid.uuid4()), traceparent="", tracestate="",
        enqueued_by="", cancel_requested=False, claimed_at=datetime.now(UTC),
    )


# -- recording stores -----------------------------------------------------------------------------


class StubStore:
    """Answers ``heartbeat`` with whatever the test sets (an exception is raised)."""

    def __init__(self) -> None:
        self.answer: dict[int, bool] | Exception = {}
        self.heartbeats: list[list[tuple[int, str]]] = []

    def heartbeat(self, runs: Sequence[tuple[int, str]], visibility_timeout: float,
                  ) -> dict[int, bool]:
        self.heartbeats.append(list(runs))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def worker_touch(self, worker_id: str, in_flight: int) -> bool:
        return True  # the worker's row is there


class StubSlots:
    """A slot store whose every call is recorded; ``renew_many`` answers what the test sets."""

    def __init__(self) -> None:
        self.renewed: set[tuple[str, int, str]] | Exception = set()
        self.renew_calls: list[list[SlotHold]] = []
        self.release_error: Exception | None = None
        self.released: list[list[SlotHold]] = []
        self.acquired: list[tuple[str, int, float, str]] = []
        self.acquire_error: Exception | None = None

    def acquire_many(self, key: str, limit: int, ttl: float,
                     holders: Sequence[str]) -> dict[str, SlotHold]:
        if isinstance(self.acquire_error, Exception):
            raise self.acquire_error
        got = {}
        for holder in holders:
            self.acquired.append((key, limit, ttl, holder))
            got[holder] = SlotHold(key=key, slot=len(self.acquired) - 1, holder=holder,
                                    expires_at=datetime.now(UTC))
        return got

    def renew_many(self, held: Sequence[SlotHold], ttl: float) -> set[tuple[str, int, str]]:
        self.renew_calls.append(list(held))
        if isinstance(self.renewed, Exception):
            raise self.renewed
        return self.renewed

    def release_many(self, held: Sequence[SlotHold]) -> None:
        self.released.append(list(held))
        if self.release_error is not None:
            raise self.release_error


# -- stores for ``ULTJOBS["STORE"]`` (import_string needs a dotted path) ---------------------------


class NoSlotSQLiteStore(SQLiteStore):
    """The SQLite store pretending its engine keeps no fleet slots
    (rule 10 (cap-kept-or-refused))."""

    @property
    def slot_store(self) -> SlotStore | None:
        return None


class NoSlotPostgresStore(PostgresStore):
    """The PostgreSQL store pretending its engine keeps no fleet slots
    (rule 10 (cap-kept-or-refused))."""

    @property
    def slot_store(self) -> SlotStore | None:
        return None


class SlowSettlePostgresStore(PostgresStore):
    """The PostgreSQL store of a worker process whose every settle batch waits
    ``ULTJOBS_TEST_SETTLE_DELAY`` seconds before it is written: runs stay settling
    (rule 90 (slot-passes-on-return))."""

    def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        time.sleep(float(os.environ.get("ULTJOBS_TEST_SETTLE_DELAY", "0")))
        return super().settle(settlements, worker_id)


def no_slot_store_path(alias: str) -> str:
    """The dotted path of the no-slot store for ``alias``'s engine."""
    name = "NoSlotPostgresStore" if alias == "postgres" else "NoSlotSQLiteStore"
    return f"{__name__}.{name}"


def settle_outage_store(alias: str, outage: threading.Event,
                        message: str = "the database system is shutting down") -> JobStore:
    """``alias``'s own store, whose settles fail as in an outage while ``outage`` is set."""

    class SettleOutage(type(get_store(alias))):  # type: ignore[misc]
        def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
            if outage.is_set():
                raise OperationalError(message)
            return super().settle(settlements, worker_id)

    return SettleOutage(alias)
