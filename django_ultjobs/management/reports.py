"""What ``manage.py ultjobs`` reads: job listings, one job in full, and per-queue and per-worker
figures, as plain values (dicts and dataclasses) the command prints as a table or as JSON.

Reads only, on the jobs database, each through an index: a listing walks the primary key
backwards (newest first) with its filters; the figures are a fixed number of statements, each
count a range of a partial index stopped at a cap (the live, pending and failed jobs;
rule 120 (bounded-live-stats)), so they cost the same at a million queued jobs as at ten.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Now
from django.utils.html import strip_tags

from ..admin.display import exception_line, seconds_between
from ..admin.summary import LIVE_COUNT_CAP, QueueCounts, bounded_queue_counts
from ..admin.workers import worker_state
from ..models import Job, JobStatus, JobStep, Worker
from ..store import get_store
from ..store.attempts import history
from ..store.live import failed_recent

#: The columns of a job in a listing (``list``), in order.
LIST_FIELDS = ("id", "name", "queue", "status", "priority", "attempt", "max_attempts",
               "worker_id", "created_at", "visible_at", "finished_at", "last_error", "tags",
               "progress")
#: Dependencies or dependents ``show`` lists, at most; it says how many there are.
MAX_LINKED = 50
def job_rows(jobs: QuerySet[Job], limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` jobs as listing rows (no arguments or results: they may be big), each
    with its error's exception line (``exception``), as the admin shows it."""
    rows = list(jobs.values(*LIST_FIELDS)[:limit])
    for row in rows:
        row["exception"] = exception_line(row["last_error"])
    return rows


def job_detail(alias: str, job_id: int) -> dict[str, Any] | None:
    """One job in full: its row, its attempts and its steps; None if there is no such job."""
    job = Job.objects.using(alias).filter(id=job_id).values().first()
    if job is None:
        return None
    job["exception"] = exception_line(job["last_error"])
    job["attempts"] = list(
        history(job_id, using=alias).order_by("attempt", "id").values(
            "attempt", "outcome", "worker_id", "started_at", "finished_at", "claims", "error",
            "slot_key", "slot"))
    for attempt in job["attempts"]:
        attempt["exception"] = exception_line(attempt["error"])
    job["steps"] = list(
        JobStep.objects.using(alias).filter(job_id=job_id).order_by("id").values(
            "name", "status", "attempt", "created_at", "completed_at", "wait_until"))
    job["dependencies"], job["dependents"] = linked_jobs(alias, job)
    return job


def linked_jobs(alias: str, job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The jobs ``job`` waits for and the jobs that wait for it, each as ``{"total": n,
    "jobs": [...]}`` listing ``MAX_LINKED`` at most (a node may wait for 10,000 others, a
    batch's callback for a million members)."""
    rows = Job.objects.using(alias).order_by("id").values("id", "name", "status")
    if job["callback_of_id"]:
        dependencies = list(rows.filter(batch_id=job["callback_of_id"])[:MAX_LINKED])
    else:
        ids = [i for i in job["depends_on"] or () if isinstance(i, int)][:MAX_LINKED]
        dependencies = list(rows.filter(id__in=ids))
    listed = [i for i in job["dependents"] or () if isinstance(i, int)]
    dependents = list(rows.filter(id__in=listed[:MAX_LINKED]))
    callbacks = list(rows.filter(callback_of_id=job["batch_id"])) \
        if job["batch_id"] and job["has_dependents"] else []
    return ({"total": job["deps_total"], "jobs": dependencies},
            {"total": len(listed) + len(callbacks), "jobs": dependents + callbacks})


@dataclass(frozen=True)
class QueueStats:
    """One queue's figures for ``ultjobs stats``."""

    queue: str
    paused: bool
    runnable: int
    delayed: int
    running: int
    waiting: int
    #: Waiting for their dependencies (workflow nodes, batch callbacks).
    pending: int
    failed_last_hour: int
    #: Seconds the longest-runnable job has been runnable (database clock); None: none is.
    oldest_runnable_age: float | None
    #: The figures read from a full window: there are at least that many.
    more_than: list[str]


@dataclass(frozen=True)
class WorkerStats:
    """One worker's figures for ``ultjobs stats``."""

    worker_id: str
    state: str
    runs: int
    #: Seconds since its last heartbeat (database clock).
    last_heartbeat_age: float | None
    queues: list[str]


def queue_stats(alias: str) -> list[QueueStats]:
    """Per queue: runnable, delayed, running, waiting, pending, failed in the last hour, oldest
    age; each count read from at most ``LIVE_COUNT_CAP`` + 1 rows, and named in ``more_than``
    when it is a lower bound."""
    _, queues, _ = bounded_queue_counts(alias)
    failed = failed_recent(get_store(alias), 3600.0, LIVE_COUNT_CAP + 1)
    now = get_store(alias).db_now()
    stats = []
    for name in sorted(set(queues) | set(failed)):
        counts = queues.get(name) or QueueCounts(name)
        more = {"running" if f in ("in_flight", "lapsed") else f for f in counts.more_than}
        if failed.get(name, 0) > LIVE_COUNT_CAP:
            more.add("failed_last_hour")
        oldest = counts.oldest_runnable_at
        stats.append(QueueStats(
            queue=name, paused=counts.paused, runnable=counts.runnable, delayed=counts.delayed,
            running=counts.in_flight + counts.lapsed, waiting=counts.waiting,
            pending=counts.pending, failed_last_hour=failed.get(name, 0),
            oldest_runnable_age=max(0.0, seconds_between(oldest, now) or 0.0)
            if oldest is not None else None, more_than=sorted(more)))
    return stats


def worker_stats(alias: str) -> list[WorkerStats]:
    """Per worker not stopped, or stopped within the last hour: state, runs, last heartbeat.

    A worker's runs are the running jobs it claimed, counted from the jobs table: a run counts
    from its claim, not from the worker's next heartbeat, which is when its row's ``in_flight``
    catches up (the admin's in-flight page counts the same rows).
    """
    rows = list(Worker.objects.using(alias)
                .filter(Q(stopped_at__isnull=True, last_seen_at__gte=Now() - timedelta(days=1))
                        | Q(stopped_at__gte=Now() - timedelta(hours=1)))
                .annotate(db_now=Now()).order_by("id"))
    runs = dict(Job.objects.using(alias)
                .filter(status=JobStatus.RUNNING, worker_id__in=[w.id for w in rows])
                .values("worker_id").order_by().annotate(n=Count("id"))
                .values_list("worker_id", "n"))
    return [WorkerStats(worker_id=w.id, state=strip_tags(str(worker_state(w, w.db_now))),
                        runs=runs.get(w.id, 0),
                        last_heartbeat_age=seconds_between(w.last_seen_at, w.db_now),
                        queues=[str(q) for q in w.queues or ()])
            for w in rows]


def as_dict(value: QueueStats | WorkerStats) -> dict[str, Any]:
    """A figure as a JSON-ready dict."""
    return asdict(value)
