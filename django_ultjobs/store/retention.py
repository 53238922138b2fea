"""Retention: delete finished jobs (with their attempts and steps), old events and dead workers,
then the batches and workflows none of whose jobs is left (``group_retention``).

Deletes in batches, each its own short transaction, so pruning millions of rows never holds a
long lock or a long transaction against the claim: on PostgreSQL one statement per batch
(``prune_batch``: the jobs, their attempt rows and steps), on SQLite four in one write
transaction. Only finished rows are touched, and a row another transaction holds is skipped.
Each batch starts at the newest finish of the one before, so the finished-jobs index's entries
of the rows already deleted (dead until VACUUM) are not walked again by every later batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from time import monotonic
from typing import Any

from django.db import transaction
from django.db.models import Min, Q, QuerySet
from django.utils import timezone

from ..conf import get_settings
from ..models import (
    FINISHED_STATUSES,
    LIVE_STATUSES,
    AttemptRecord,
    Job,
    JobAttempt,
    JobEvent,
    JobStep,
    Worker,
)
from . import get_store, group_retention
from .base import JobStore


@dataclass(frozen=True)
class Pruned:
    """How many rows one prune removed."""

    jobs: int = 0
    attempts: int = 0
    steps: int = 0
    events: int = 0
    workers: int = 0
    batches: int = 0
    workflows: int = 0


def prunable_jobs(*, older_than: timedelta, using: str) -> int:
    """Count the jobs a prune would delete now (the finished-jobs index, no table scan)."""
    return _finished_jobs(using, timezone.now() - older_than).count()


#: The longest rest after a batch when the prune paces itself: a batch that slow means a server
#: so busy that a longer rest would only stretch the prune past its retention window.
MAX_REST = 5.0


def prune(*, older_than: timedelta, using: str, batch_size: int = 5_000,
          dry_run: bool = False, on_batch: Callable[[int], None] | None = None,
          pause: float | None = None,
          rest: Callable[[float], object] | None = None) -> Pruned:
    """Delete what finished more than ``older_than`` ago; return the counts.

    With ``dry_run`` nothing is deleted: the counts are of what would be. ``on_batch`` is
    called with the number of jobs each committed batch deleted (a progress bar's advance).
    ``pause``: seconds to wait after each full batch, so the workers beside the prune get the
    cores and the log between its batches; None (the default) rests as long as the batch took
    (at most ``MAX_REST``), so the prune keeps a core busy half the time on any server; 0 runs
    the batches back to back. ``rest`` takes those seconds instead of ``time.sleep`` (a run's
    ``ctx.wait``, which a cancel cuts short).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if pause is not None and (isinstance(pause, bool) or not 0 <= pause < math.inf):
        raise ValueError("pause must be a number of seconds from 0, or None")
    cutoff = timezone.now() - older_than
    finished = _finished_jobs(using, cutoff)
    if dry_run:
        batches, workflows = group_retention.prunable_groups(using, cutoff)
        return Pruned(
            jobs=finished.count(),
            attempts=AttemptRecord.objects.using(using).filter(job__in=finished).count(),
            steps=JobStep.objects.using(using).filter(job__in=finished).count(),
            events=_old_events(using, cutoff).count(),
            workers=_dead_workers(using, cutoff).count(),
            batches=batches,
            workflows=workflows,
        )
    store = get_store(using)
    delete_batch = _delete_batch if _relations_known() else _delete_batch_by_orm
    jobs = attempts = steps = 0
    after = None
    while True:
        started = monotonic()
        batch, after = delete_batch(store, cutoff, after, batch_size)
        took = monotonic() - started
        if not batch.jobs:
            break
        jobs, attempts, steps = (jobs + batch.jobs, attempts + batch.attempts,
                                 steps + batch.steps)
        if on_batch is not None:
            on_batch(batch.jobs)
        seconds = min(took, MAX_REST) if pause is None else pause
        if seconds and batch.jobs >= batch_size:  # a short batch (most often the last) gets none
            (rest or time.sleep)(seconds)
    events = _old_events(using, cutoff).delete()[0]
    workers = _dead_workers(using, cutoff).delete()[0]
    # After the jobs: a group goes once its last job went (rule 151 (group-pruned-when-empty)).
    batches, workflows = group_retention.prune_groups(using, cutoff, batch_size)
    return Pruned(jobs=jobs, attempts=attempts, steps=steps, events=events, workers=workers,
                  batches=batches, workflows=workflows)


#: What refers to a job row, each as ``(model label, field name)``: the prune's statements
#: delete the attempt rows and steps with their job, and the attempts view only reads.
KNOWN_RELATIONS = {("django_ultjobs.JobAttempt", "job"), ("django_ultjobs.JobStep", "job"),
                   ("django_ultjobs.AttemptRecord", "job")}


def _relations_known() -> bool:
    """Whether every model that refers to a job is one the prune's statements know."""
    found = {(rel.related_model._meta.label, rel.field.name)
             for rel in Job._meta.related_objects}
    return found <= KNOWN_RELATIONS


def _delete_batch(store: JobStore, cutoff: datetime, after: Any,
                  limit: int) -> tuple[Pruned, Any]:
    """Delete one batch of finished jobs with their attempts and steps, the oldest that
    finished not before ``after`` (None: any), in one short transaction: one statement on
    PostgreSQL (``prune_batch``), four on SQLite. Return the counts and the batch's newest
    finish, in the engine's own form (where the next batch starts)."""
    if "prune_batch" in store.sql:
        with store.cursor() as cur:
            cur.execute(store.sql["prune_batch"],
                        {"cutoff": cutoff, "after": after, "limit": limit})
            jobs, on_row, attempts, steps, newest = cur.fetchone()
        return Pruned(jobs=jobs, attempts=on_row + attempts, steps=steps), newest
    with store.write_transaction(), store.cursor() as cur:
        cur.execute(store.sql["prune_batch_ids"],
                    {"cutoff": store.format_time(cutoff), "after": after, "limit": limit})
        rows = cur.fetchall()
        ids = store.ids_param([job_id for job_id, _, _ in rows])
        cur.execute(store.sql["prune_batch_attempts"], {"ids": ids})
        attempts = cur.rowcount
        cur.execute(store.sql["prune_batch_steps"], {"ids": ids})
        steps = cur.rowcount
        cur.execute(store.sql["prune_batch_jobs"], {"ids": ids})
        # The attempts its rows hold go with the jobs (rule 97 (attempt-on-row)): counted too.
        on_row = sum(1 for _, held, _ in rows if held)
        newest = rows[-1][2] if rows else after
        return Pruned(jobs=cur.rowcount, attempts=on_row + attempts, steps=steps), newest


def _delete_batch_by_orm(store: JobStore, cutoff: datetime, after: Any,
                         limit: int) -> tuple[Pruned, Any]:
    """One batch through Django's deletion collector, for a table the statements do not know
    refers to jobs (a model of the site's own): slower, but it follows every ``on_delete``."""
    using = store.alias
    finished = _finished_jobs(using, cutoff)
    if after is not None:
        finished = finished.filter(finished_at__gte=after)
    rows = list(finished.order_by("finished_at").values_list("id", "finished_at")[:limit])
    if not rows:
        return Pruned(), after
    ids = [job_id for job_id, _ in rows]
    with transaction.atomic(using=using):
        on_row = Job.objects.using(using).filter(id__in=ids, attempt_on_row=True).count()
        attempts = JobAttempt.objects.using(using).filter(job_id__in=ids).delete()[0]
        steps = JobStep.objects.using(using).filter(job_id__in=ids).delete()[0]
        _, deleted = Job.objects.using(using).filter(id__in=ids).delete()
    return (Pruned(jobs=deleted.get(Job._meta.label, 0), attempts=on_row + attempts,
                   steps=steps), rows[-1][1])


def _finished_jobs(using: str, cutoff: datetime) -> QuerySet[Job]:
    return Job.objects.using(using).filter(status__in=FINISHED_STATUSES, finished_at__lt=cutoff)


def _old_events(using: str, cutoff: datetime) -> QuerySet[JobEvent]:
    # An event counts for every job enqueued before it that has not finished (a queued or
    # running job may reach its wait later), so keep every event newer than the oldest of them.
    oldest_waiting = Job.objects.using(using).filter(status__in=LIVE_STATUSES).aggregate(
        oldest=Min("created_at"))["oldest"]
    event_cutoff = cutoff if oldest_waiting is None else min(cutoff, oldest_waiting)
    return JobEvent.objects.using(using).filter(created_at__lt=event_cutoff)


def _dead_workers(using: str, cutoff: datetime) -> QuerySet[Worker]:
    """The workers stopped before ``cutoff``, or silent since before it and not alive
    (rule 106 (live-row-kept)).

    Alive is judged as the admin and ``ultjobs stats`` judge it: not stopped, and heard from
    within the worker's own visibility timeout (the setting's, on rows without one) on the
    database's clock. ``--days 0`` deleted the rows of running workers, whose heartbeats only update
    them. The condition is the delete's own, so a worker that beats while the prune runs is
    kept; one that comes back to its row gone writes it again (``worker/worker_row.py``)."""
    workers = Worker.objects.using(using)
    default = get_settings().VISIBILITY_TIMEOUT
    now = get_store(using).db_now()
    timeouts = set(workers.filter(stopped_at__isnull=True, last_seen_at__lt=cutoff)
                   .values_list("visibility_timeout", flat=True).distinct())
    dead = Q(stopped_at__lt=cutoff)
    for timeout in timeouts:
        # A few distinct timeouts in a fleet: one branch each, exact on the stored value.
        silent_since = min(cutoff, now - timedelta(seconds=timeout or default))
        dead |= Q(stopped_at__isnull=True, visibility_timeout=timeout,
                  last_seen_at__lt=silent_since)
    return workers.filter(dead)
