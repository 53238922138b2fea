"""The live jobs counted with bounded work, whatever the backlog: the stats view's and the admin
summary's figures (rule 120 (bounded-live-stats)).

Each count reads one range of the live index (``ultjobs_job_live``: queue, status, due time) and
stops after ``limit`` rows, so a queue of a million jobs costs what one of ``limit`` does; a
count that reached ``limit`` means "at least that many". Two statements: what holds runnable
jobs back (slots held, rate limits spent), and the counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .base import JobStore


@dataclass(frozen=True)
class LiveRow:
    """One queue's live jobs of one status, each count stopped at the statement's limit."""

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


def live_rows(store: JobStore, blocked: Sequence[str], limit: int) -> list[LiveRow]:
    """Per queue with a live job or a pause, and per live status, its counts stopped at
    ``limit``; jobs named in ``blocked`` are counted as held back."""
    params = {"now": store.now_param(), "limit": limit,
              "blocked": store.queues_param(sorted(blocked))}
    with store.cursor() as cur:
        cur.execute(store.sql["live_stats"], params)
        rows = cur.fetchall()
    return [LiveRow(queue, status, int(due), int(held_back), int(later),
                    store.parse_time(oldest) if oldest is not None else None, bool(paused),
                    store.parse_time(now))
            for queue, status, due, held_back, later, oldest, paused, now in rows]
