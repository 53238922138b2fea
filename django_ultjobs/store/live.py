"""The live jobs counted with bounded work, whatever the backlog: the stats view's and the admin
summary's figures (rule 120 (bounded-live-stats)).

Each count reads one range of the live index (``ultjobs_job_live``: queue, status, due time) and
stops after ``limit`` rows, so a queue of a million jobs costs what one of ``limit`` does; a
count read from a full range is a lower bound ("at least"). Two statements: what holds runnable
jobs back (slots held, rate limits spent), and the counts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from .base import JobStore


@dataclass(frozen=True)
class LiveRow:
    """One queue's live jobs of one status, each count read from at most ``limit`` rows."""

    queue: str
    status: str
    #: Due now (visible_at passed) and of a kind not held back.
    due: int
    #: Due now, of a kind held back (every slot of its cap held, or its rate limit spent).
    held_back: int
    #: Due later: scheduled (queued), leased (running), waiting for an event or a sleep.
    later: int
    #: When the longest-due job of this status became due; None when none is due.
    oldest_due_at: datetime | None
    paused: bool
    #: The database's clock when the statement ran.
    now: datetime
    #: ``due`` is a lower bound: more free jobs are due than were read.
    due_capped: bool = False
    #: ``held_back`` is a lower bound.
    held_capped: bool = False
    #: ``later`` is a lower bound.
    later_capped: bool = False
    #: Waiting for their dependencies (workflow nodes, batch callbacks): counted on the queue's
    #: ``queued`` row only, 0 on the others.
    pending: int = 0
    #: ``pending`` is a lower bound.
    pending_capped: bool = False


def blocking(store: JobStore) -> tuple[dict[str, int], set[str]]:
    """The fleet slots held per key, and the keys of rate-limit buckets spent now."""
    held: dict[str, int] = {}
    spent: set[str] = set()
    with store.cursor() as cur:
        cur.execute(store.sql["live_blocking"], {"now": store.now_param()})
        for key, count in cur.fetchall():
            if count < 0:
                spent.add(key)
            else:
                held[key] = int(count)
    return held, spent


@contextmanager
def _no_jit(store: JobStore, cur: Any) -> Iterator[None]:
    """PostgreSQL's JIT compiler off for the statements run inside, and back as it was after.

    The planner costs every capped count as if it read its whole limit, so a few queues push
    the statement past ``jit_above_cost``, and compiling it took a second where running it takes
    milliseconds. SET LOCAL lasts until the end of the transaction: one of ours is committed,
    in the caller's the setting is put back."""
    if store.connection.vendor != "postgresql":
        yield
        return
    callers = store.connection.in_atomic_block
    with transaction.atomic(using=store.alias):
        cur.execute("SELECT current_setting('jit'), set_config('jit', 'off', true)")
        before = cur.fetchone()[0]
        yield
        if callers:
            cur.execute("SELECT set_config('jit', %(before)s, true)", {"before": before})


@contextmanager
def no_jit(store: JobStore) -> Iterator[None]:
    """PostgreSQL's JIT compiler off for every statement run inside on ``store``'s connection
    (see ``_no_jit``); nothing elsewhere."""
    with store.cursor() as cur, _no_jit(store, cur):
        yield


def live_rows(store: JobStore, blocked: Sequence[str], limit: int) -> list[LiveRow]:
    """Per queue with a live or pending job or a pause, and per live status, its counts stopped
    at ``limit``; jobs named in ``blocked`` are counted as held back."""
    params = {"now": store.now_param(), "limit": limit,
              "blocked": store.queues_param(sorted(blocked))}
    with store.cursor() as cur, _no_jit(store, cur):
        cur.execute(store.sql["live_stats"], params)
        rows = cur.fetchall()
    found = []
    for queue, status, free, held, later, oldest, paused, now, pending in rows:
        found.append(LiveRow(queue, status, int(free), int(held), int(later),
                             store.parse_time(oldest) if oldest is not None else None,
                             bool(paused), store.parse_time(now), int(free) >= limit,
                             int(held) >= limit, int(later) >= limit, int(pending),
                             int(pending) >= limit))
    return found


def first_due(store: JobStore, queue: str,
              status: str) -> tuple[int, str, datetime, datetime] | None:
    """The live job of ``queue`` and ``status`` due longest ago: its id, name and due time, and
    the database's clock; None when none is due. One probe of the live index."""
    with store.cursor() as cur:
        cur.execute(store.sql["live_first"],
                    {"now": store.now_param(), "queue": queue, "status": status})
        row = cur.fetchone()
    if row is None:
        return None
    job_id, name, due_at, now = row
    return int(job_id), name, store.parse_time(due_at), store.parse_time(now)


def finished_counts(store: JobStore, limit: int) -> dict[str, tuple[int, bool]]:
    """The finished jobs per status (statuses with none left out), each job name's read as at
    most ``limit`` rows: the count, and whether it is a lower bound (a name's reached
    ``limit``). One statement."""
    with store.cursor() as cur:
        cur.execute(store.sql["finished_counts"], {"limit": limit})
        return {status: (int(total), int(most) >= limit)
                for status, total, most in cur.fetchall() if total}


def live_names(store: JobStore) -> list[str]:
    """The names of the queued and waiting jobs, in name order: one index probe per name."""
    with store.cursor() as cur:
        cur.execute(store.sql["live_names"], {})
        return [name for (name,) in cur.fetchall()]


def oldest_due(store: JobStore, name: str | None = None) -> dict[str, datetime]:
    """When the longest-due live job of each queue became due (queues with none due left out),
    of every name or of ``name``'s jobs only: three ranges of the live index per queue, each
    read up to its first entry (of ``name``), however many jobs each holds."""
    found: dict[str, datetime] = {}
    with store.cursor() as cur:
        if name is None:
            cur.execute(store.sql["live_oldest"], {"now": store.now_param()})
        else:
            cur.execute(store.sql["live_oldest_named"], {"now": store.now_param(),
                                                         "name": name})
        for queue, due_at in cur.fetchall():
            if due_at is not None:
                at = store.parse_time(due_at)
                found[queue] = min(at, found.get(queue, at))
    return found


def failed_recent(store: JobStore, seconds: float, limit: int) -> dict[str, int]:
    """Per queue with a failed job, how many failed in the last ``seconds``, each count stopped
    at ``limit`` (queues with none left out): ranges of the failed index, one statement."""
    with store.cursor() as cur:
        cur.execute(store.sql["failed_recent"], {"now": store.now_param(), "seconds": seconds,
                                                  "limit": limit})
        return {queue: int(count) for queue, count in cur.fetchall() if count}
