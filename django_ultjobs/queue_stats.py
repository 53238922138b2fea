"""What an autoscaler asks of the queues, read with bounded work whatever the backlog
(rule 120 (bounded-live-stats)).

Per queue: jobs runnable now, scheduled for later, running, runnable but held back by a full
concurrency cap or a spent rate limit, waiting for an event or a sleep, pending (waiting for their
dependencies), how long the longest-due job has been due, whether the queue is paused; plus the
workers alive. Each count reads at most
``COUNT_CAP + 1`` rows: the due jobs as a window of the longest-due ones, split by whether their
kind is held back. A count that filled its window is a lower bound ("at least") and names itself
in ``more_than``. Three statements, whatever the tables hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models.functions import Now

from .conf import get_settings
from .core.slot_keys import slot_key_for
from .jobs.registry import registered_jobs
from .models import JobStatus, Worker
from .store import get_store
from .store.live import LiveRow, blocking, live_rows

#: Rows read per figure, less one: past it a figure is "at least" what was read. An autoscaler
#: needs to know there are many, not how many: at a million queued jobs, a cap of 10,000 cost the
#: view four times its 50 ms budget (docs/deployment.md).
COUNT_CAP = 1_000


@dataclass(frozen=True)
class QueueFigures:
    """One queue's live jobs, each count exact unless named in ``more_than``."""

    queue: str
    #: Due now (queued, a lapsed lease to re-deliver, or woken) and free to start.
    runnable: int = 0
    #: Queued for later (a delay, a retry's backoff, a schedule).
    scheduled: int = 0
    #: Running, their leases live.
    running: int = 0
    #: Due now, but their kind's every fleet slot is held or its rate limit is spent.
    waiting_on_limit: int = 0
    #: Waiting for an event or a durable sleep.
    waiting_event: int = 0
    #: Waiting for their dependencies (workflow nodes, batch callbacks): none runs before the
    #: settle of its last dependency releases it.
    pending: int = 0
    #: Seconds the longest-due live job has been due (held back or not); None when none is due.
    oldest_runnable_age: float | None = None
    paused: bool = False
    #: The counts above read from a full window: there are at least that many.
    more_than: list[str] = field(default_factory=list)


def held_back_names(held: dict[str, int], spent: set[str]) -> list[str]:
    """The registered jobs that cannot start now: a per-job cap with every slot held, or a
    per-job rate limit whose budget is spent. Per-key caps and limits hold back some calls of a
    kind, not the kind: their jobs count as runnable."""
    names = []
    for name, spec in registered_jobs().items():
        key = slot_key_for(name)
        full = (spec.concurrency is not None and spec.concurrency_key is None
                and held.get(key, 0) >= spec.concurrency)
        limited = spec.rate_limit is not None and spec.rate_limit_key is None and key in spent
        if full or limited:
            names.append(name)
    return sorted(names)


def _queue_figures(queue: str, rows: Iterable[LiveRow]) -> QueueFigures:
    """One queue's figures from its rows (one per live status)."""
    sums = {"runnable": 0, "scheduled": 0, "running": 0, "waiting_on_limit": 0,
            "waiting_event": 0, "pending": 0}
    later = {JobStatus.QUEUED: "scheduled", JobStatus.RUNNING: "running",
             JobStatus.WAITING: "waiting_event"}
    capped: set[str] = set()
    oldest = None
    paused = False
    for row in rows:
        for figure, count, lower_bound in (
                ("runnable", row.due, row.due_capped),
                ("waiting_on_limit", row.held_back, row.held_capped),
                (later[JobStatus(row.status)], row.later, row.later_capped),
                ("pending", row.pending, row.pending_capped)):
            sums[figure] += count
            if lower_bound:
                capped.add(figure)
        if row.oldest_due_at is not None:
            age = max(0.0, (row.now - row.oldest_due_at).total_seconds())
            oldest = age if oldest is None else max(oldest, age)
        paused = row.paused
    return QueueFigures(queue, **sums, oldest_runnable_age=oldest, paused=paused,
                        more_than=sorted(capped))


def queue_figures(alias: str, also: Iterable[str] = ()) -> list[QueueFigures]:
    """Every queue with a live or pending job or a pause, and the queues ``also`` names (with
    figures of 0 when they have none), in name order, in two statements."""
    store = get_store(alias)
    held, spent = blocking(store)
    by_queue: dict[str, list[LiveRow]] = {queue: [] for queue in also}
    for row in live_rows(store, held_back_names(held, spent), COUNT_CAP + 1):
        by_queue.setdefault(row.queue, []).append(row)
    return [_queue_figures(queue, rows) for queue, rows in sorted(by_queue.items())]


@dataclass(frozen=True)
class RunningWorker:
    """A worker not stopped and heard from within its own visibility timeout."""

    #: The job names it knows; None from a worker that did not say.
    jobs: list[str] | None
    queues: list[str]


def running_workers(alias: str) -> list[RunningWorker]:
    """The running workers, in one query: not stopped and heard from within their own
    visibility timeout."""
    # Each row is judged by its worker's own timeout (rows from before it was kept: by the
    # setting), in Python: the arithmetic differs per engine, and the candidates are few (not
    # stopped, seen in the last day).
    default = get_settings().VISIBILITY_TIMEOUT
    rows = (Worker.objects.using(alias)
            .filter(stopped_at__isnull=True, last_seen_at__gte=Now() - timedelta(days=1))
            .annotate(db_now=Now())
            .values_list("last_seen_at", "visibility_timeout", "db_now", "jobs", "queues"))
    return [RunningWorker(jobs, [str(q) for q in queues or ()])
            for seen, timeout, now, jobs, queues in rows
            if (now - seen).total_seconds() <= (timeout or default)]


def stats(alias: str) -> dict[str, Any]:
    """The stats view's answer, JSON-ready: per queue its figures, and the workers alive.

    A queue a registered job names or a running worker serves is listed with no job in it, so
    an autoscaler's metric is there before the first job and with no worker running."""
    workers = running_workers(alias)
    known = {spec.queue for spec in registered_jobs().values()}
    known.update(queue for worker in workers for queue in worker.queues)
    return {
        "queues": {q.queue: {k: v for k, v in asdict(q).items() if k != "queue"}
                   for q in queue_figures(alias, known)},
        "workers_alive": len(workers),
        "count_cap": COUNT_CAP,
    }
