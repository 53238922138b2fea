"""Cancel and retry jobs, pause and resume schedules: the operations behind the admin's
actions, usable from code too.

```python
from django_ultjobs.operations import cancel_jobs, retry_jobs

result = cancel_jobs(Job.objects.filter(name="send_invoice", status="queued"))
result.cancelled, result.requested      # how many were cancelled now / asked to stop
retry_jobs([41, 42]).retried            # failed or cancelled jobs back in the queue, runnable now
pause_schedules(["refresh_rates"])      # no worker enqueues its ticks until it is resumed
```

Every change is one ``UPDATE`` fenced on the status it starts from, so an operation racing a
worker (a claim, a settle) changes nothing the worker already moved on from. A running job is
never written here beyond its ``cancel_requested`` flag: its worker still owns the row, and it
cancels the run at its next heartbeat through the same signal as a lost lease (rule 3), then
settles it ``cancelled`` itself under its claim token (rule 4).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from django.db import connections, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Greatest, Now

from .conf import jobs_database
from .models import Job, JobSchedule, JobStatus
from .store import get_store

__all__ = ["CancelResult", "RetryResult", "cancel_jobs", "pause_schedules", "resume_schedules",
           "retry_jobs"]

#: Statuses cancelled at once: no worker holds such a job, so nobody else writes its row. A
#: waiting job is parked on an event or a durable sleep and holds no thread either.
CANCEL_NOW = (JobStatus.QUEUED, JobStatus.WAITING)
#: Statuses a retry starts from.
RETRYABLE = (JobStatus.FAILED, JobStatus.CANCELLED)
#: Ids per statement: keeps a "select all 1,000,000" action under PostgreSQL's 65,535-parameter
#: limit and every lock short, so the heartbeats it shares rows with wait milliseconds, not seconds.
CHUNK = 500


@dataclass(frozen=True)
class CancelResult:
    """What ``cancel_jobs`` did: the ids it cancelled now, and the running ones it asked to stop."""

    #: Queued or waiting jobs, now ``cancelled``.
    cancelled_ids: tuple[int, ...] = ()
    #: Running jobs now flagged ``cancel_requested``: their worker cancels them at its next
    #: heartbeat (or, if that worker is gone, the worker the job is re-delivered to does).
    requested_ids: tuple[int, ...] = ()

    @property
    def cancelled(self) -> int:
        """How many jobs were cancelled now."""
        return len(self.cancelled_ids)

    @property
    def requested(self) -> int:
        """How many running jobs were asked to stop."""
        return len(self.requested_ids)


@dataclass(frozen=True)
class RetryResult:
    """What ``retry_jobs`` did: the ids of the failed or cancelled jobs queued again."""

    retried_ids: tuple[int, ...] = ()

    @property
    def retried(self) -> int:
        """How many jobs were queued again."""
        return len(self.retried_ids)


def cancel_jobs(jobs: QuerySet[Job] | Iterable[int], *, using: str | None = None) -> CancelResult:
    """Cancel queued or waiting jobs now and ask running ones to stop; return what changed.

    ``jobs`` is a queryset of jobs or an iterable of job ids. Jobs in any other status (finished
    ones, running ones already asked) are left alone and not counted. ``using`` is the jobs
    database; it defaults to ``ULTJOBS["DATABASE"]``, whatever alias a queryset was built on.
    """
    alias = using or jobs_database()
    cancelled: list[int] = []
    requested: list[int] = []
    live = (*CANCEL_NOW, JobStatus.RUNNING)
    for chunk in _chunks(_candidate_ids(jobs, alias, live)):
        with transaction.atomic(using=alias):
            ids = _lock(alias, chunk, Q(status__in=CANCEL_NOW))
            # Fenced on the status again, though the lock already holds it: the fence is what
            # the operation means, and it stays true if the locking ever changes.
            Job.objects.using(alias).filter(id__in=ids, status__in=CANCEL_NOW).update(
                status=JobStatus.CANCELLED, cancel_requested=True, claim_token=None,
                finished_at=Now(), updated_at=Now(),
            )
            cancelled.extend(ids)
        with transaction.atomic(using=alias):
            # A job claimed since the statement above is running now, and is caught here.
            running = Q(status=JobStatus.RUNNING, cancel_requested=False)
            ids = _lock(alias, chunk, running)
            Job.objects.using(alias).filter(running, id__in=ids).update(
                cancel_requested=True, updated_at=Now())
            requested.extend(ids)
    return CancelResult(tuple(cancelled), tuple(requested))


def retry_jobs(jobs: QuerySet[Job] | Iterable[int], *, using: str | None = None) -> RetryResult:
    """Queue failed or cancelled jobs again, runnable now, with one more attempt allowed.

    ``max_attempts`` becomes ``max(max_attempts, attempt + 1)``: a job that used all its attempts
    gets exactly one more, and one that still had some keeps them. Steps it completed before stay
    memoised, so the new run replays them instead of running them twice. Jobs in other statuses
    are left alone and not counted.
    """
    alias = using or jobs_database()
    retried: list[int] = []
    for chunk in _chunks(_candidate_ids(jobs, alias, RETRYABLE)):
        with transaction.atomic(using=alias):
            ids = _lock(alias, chunk, Q(status__in=RETRYABLE))
            Job.objects.using(alias).filter(id__in=ids, status__in=RETRYABLE).update(
                status=JobStatus.QUEUED,
                visible_at=Now(),
                max_attempts=Greatest(F("max_attempts"), F("attempt") + 1),
                cancel_requested=False,
                claim_token=None,
                finished_at=None,
                updated_at=Now(),
            )
            get_store(alias).notify(list(
                Job.objects.using(alias).filter(id__in=ids).values_list("queue", flat=True)
                .distinct()))
            retried.extend(ids)
    return RetryResult(tuple(retried))


def pause_schedules(names: QuerySet[JobSchedule] | Iterable[str], *,
                    using: str | None = None) -> tuple[str, ...]:
    """Pause periodic jobs fleet-wide: no worker enqueues their ticks until they are resumed
    (rule 63). Jobs already enqueued still run. Returns the names paused now (those already
    paused are left alone and not counted)."""
    alias = using or jobs_database()
    # Begun as the writer on SQLite: it reads, then writes (rule 21).
    with get_store(alias).write_transaction():
        rows = JobSchedule.objects.using(alias).filter(name__in=_names(names), paused=False)
        paused = tuple(sorted(rows.values_list("name", flat=True)))
        # Fenced on the state it starts from: the tick statement reads "paused" under the
        # schedule's row lock, so from this commit on no worker sends a tick.
        JobSchedule.objects.using(alias).filter(name__in=paused, paused=False).update(
            paused=True, updated_at=Now())
    return paused


def resume_schedules(names: QuerySet[JobSchedule] | Iterable[str], *,
                     using: str | None = None) -> tuple[str, ...]:
    """Resume paused periodic jobs from now on: the ticks that passed while they were paused
    are not caught up (rule 63), whatever their ``catch_up``. Returns the names resumed now."""
    alias = using or jobs_database()
    with get_store(alias).write_transaction():
        rows = JobSchedule.objects.using(alias).filter(name__in=_names(names), paused=True)
        resumed = tuple(sorted(rows.values_list("name", flat=True)))
        # The cursor moves to now (the database's clock): a worker that starts after this sees
        # no tick of the pause as missed.
        JobSchedule.objects.using(alias).filter(name__in=resumed, paused=True).update(
            paused=False, last_tick=Greatest(F("last_tick"), Now()), updated_at=Now())
    return resumed


def _names(names: QuerySet[JobSchedule] | Iterable[str]) -> list[str]:
    if isinstance(names, QuerySet):
        return list(names.values_list("name", flat=True))
    return [str(name) for name in names]


def _candidate_ids(jobs: QuerySet[Job] | Iterable[int], alias: str,
                   statuses: Sequence[str]) -> list[int]:
    """The ids of ``jobs`` whose status may change; a queryset is read on the jobs database."""
    if isinstance(jobs, QuerySet):
        # Narrowed by status first: "select all" over a million finished rows reads only the
        # few that can change, through the partial indexes on live and failed rows.
        return list(jobs.using(alias).filter(status__in=statuses).order_by("id")
                    .values_list("id", flat=True))
    return sorted({int(job_id) for job_id in jobs})


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start:start + CHUNK]


def _lock(alias: str, ids: list[int], condition: Q) -> list[int]:
    """Lock the rows of ``ids`` matching ``condition`` for this transaction; return their ids.

    Rows are locked in id order, as the worker's heartbeat and settle lock them, so the two
    cannot deadlock. The claim skips locked rows, so a claim never waits on an operation.
    """
    if not ids:
        return []
    rows = Job.objects.using(alias).filter(condition, id__in=ids).order_by("id")
    if connections[alias].features.has_select_for_update:
        return list(rows.select_for_update().values_list("id", flat=True))
    # SQLite has no row locks, and a transaction that reads first and writes second fails with
    # "database is locked" if any other connection wrote in between (its snapshot went stale).
    # Writing first takes the single writer lock (waiting its turn like any writer), so the read
    # below and the update after it see one consistent database. The write changes nothing.
    Job.objects.using(alias).filter(id=ids[0]).update(updated_at=F("updated_at"))
    return list(rows.values_list("id", flat=True))
