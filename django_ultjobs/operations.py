"""Cancel and retry jobs, pause and resume queues and schedules: the operations behind the
admin's actions and ``manage.py ultjobs``, usable from code too.

```python
from django_ultjobs.operations import cancel_jobs, pause_queue, resume_queue, retry_jobs

result = cancel_jobs(Job.objects.filter(name="send_invoice", status="queued"),
                     reason="the invoice run was started twice")
result.cancelled, result.requested      # how many were cancelled now / asked to stop
retry_jobs([41, 42]).retried            # failed or cancelled jobs back in the queue, runnable now
pause_queue("emails")                   # no worker claims; enqueue works (rule 75 (paused-queue))
resume_queue("emails")                  # claimed again at once (LISTEN) or within a poll
pause_schedules(["refresh_rates"])      # no worker enqueues its ticks until it is resumed
```

Every change is one ``UPDATE`` fenced on the status it starts from, so an operation racing a
worker (a claim, a settle) changes nothing the worker already moved on from. A running job is
never written here beyond its ``cancel_requested`` flag: its worker still owns the row, and it
cancels the run through the same signal as a lost lease (rule 3 (lost-lease-cancels)) — at once
on PostgreSQL, which notifies it on commit, at its next heartbeat on SQLite — then settles it
``cancelled`` itself under its claim token (rule 4 (fenced-settle)).
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from django.db import connections, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Greatest, Now

from .conf import jobs_database
from .core.jsonargs import is_unicode
from .exceptions import JobOptionError, OperationInputError
from .jobs.batches import Batch
from .jobs.options import MAX_QUEUE
from .jobs.unique import KeyHeld, take_keys_back
from .jobs.workflows import WorkflowRun
from .models import Batch as BatchRow
from .models import Job, JobSchedule, JobStatus, QueuePause, Workflow
from .observability.logs import log_event
from .store import dependencies, get_store

__all__ = ["CancelResult", "RetryResult", "cancel_jobs", "check_job_ids", "check_job_name",
           "check_queue_name",
           "pause_queue", "pause_schedules", "paused_queues", "resume_queue",
           "resume_schedules", "retry_jobs"]

logger = logging.getLogger("django_ultjobs.operations")

#: Called after each chunk an operation wrote, with how many ids of the selection it has been
#: through so far and how many there are: what a progress display needs, nothing more.
Progress = Callable[[int, int], None]

#: Statuses cancelled at once: no worker holds such a job, so nobody else writes its row. A
#: waiting job is parked on an event or a durable sleep and holds no thread either.
CANCEL_NOW = (JobStatus.QUEUED, JobStatus.WAITING, JobStatus.PENDING)
#: What cancelling a batch or a workflow cancels (rule 115 (group-cancel)): its members that
#: may run without waiting for others; what waits follows its ``when``.
GROUP_CANCEL = (JobStatus.QUEUED, JobStatus.WAITING, JobStatus.RUNNING)
#: Statuses a retry starts from.
RETRYABLE = (JobStatus.FAILED, JobStatus.CANCELLED)
#: Ids per statement: keeps a "select all 1,000,000" action under PostgreSQL's 65,535-parameter
#: limit and every lock short, so the heartbeats it shares rows with wait milliseconds, not seconds.
CHUNK = 500
#: The largest ``chunk_size`` an operation takes: ten times that many ids would still fit one
#: statement, and a transaction of more would hold its row locks for seconds.
MAX_CHUNK = 10_000
#: Ids fetched per round trip while a selection's ids are read.
READ_CHUNK = 10_000
#: The largest id a job can have (the primary key is a 64-bit integer).
BIGINT_MAX = 2**63 - 1
#: The longest cancel reason kept (rule 59 (cancel-reason-kept)): it is written into logs and every
#: cancelled attempt.
MAX_CANCEL_REASON = 2000
#: The longest job name (the ``name`` column's length).
MAX_JOB_NAME = 200
#: Ids a cancel's log line names, at most (a "select all" cancels a million).
LOGGED_IDS = 50


@dataclass(frozen=True)
class CancelResult:
    """What ``cancel_jobs`` did: the ids it cancelled now, and the running ones it asked to stop."""

    #: Queued or waiting jobs, now ``cancelled``.
    cancelled_ids: tuple[int, ...] = ()
    #: Running jobs now flagged ``cancel_requested``: their worker cancels them at once on
    #: PostgreSQL (a notification), at its next heartbeat on SQLite or if the notification is
    #: missed (or, if that worker is gone, the worker the job is re-delivered to does).
    requested_ids: tuple[int, ...] = ()
    #: Jobs gone through but left alone for their status (finished, or running and asked already).
    skipped: int = 0
    #: Ids given that no job has (ids only: a queryset names no missing job).
    missing_ids: tuple[int, ...] = ()

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
    """What ``retry_jobs`` did: the ids of the failed or cancelled jobs queued again, and the
    ones left alone because another job holds the unique key they held
    (rule 107 (retry-takes-key-back))."""

    retried_ids: tuple[int, ...] = ()
    #: Jobs not retried: a later enqueue took their key over and another job holds it now;
    #: each names that job. Empty with ``keyless=True``.
    refused: tuple[KeyHeld, ...] = ()
    #: Jobs retried without their key, beside its holder (``keyless=True`` only).
    keyless_ids: tuple[int, ...] = ()
    #: Jobs gone through but left alone for their status (not failed or cancelled).
    skipped: int = 0
    #: Ids given that no job has (ids only: a queryset names no missing job).
    missing_ids: tuple[int, ...] = ()

    @property
    def retried(self) -> int:
        """How many jobs were queued again."""
        return len(self.retried_ids)


def cancel_jobs(jobs: QuerySet[Job] | Iterable[int] | Batch | BatchRow | WorkflowRun | Workflow,
                *, using: str | None = None,
                progress: Progress | None = None, by: str = "", reason: str = "",
                chunk_size: int = CHUNK, dry_run: bool = False) -> CancelResult:
    """Cancel queued or waiting jobs now and ask running ones to stop; return what changed.

    ``jobs`` is a queryset of jobs, an iterable of job ids, or a batch or workflow (``Batch``,
    ``WorkflowRun`` or their model rows): then its members that do not wait for others
    (rule 115 (group-cancel)). Jobs in any other status (finished
    ones, running ones already asked) are left alone and counted as ``skipped``; ids no job has
    are returned as ``missing_ids``. ``using`` is the jobs database; it defaults to
    ``ULTJOBS["DATABASE"]``, whatever alias a queryset was built on. The jobs are gone through
    in id order, ``chunk_size`` ids per transaction (rule 125 (bulk-cli-in-chunks)); a queryset's
    ids are read once, first, so only its jobs that existed when the call began are touched.
    ``progress`` is called after each chunk (see ``Progress``). ``by`` goes to the
    ``jobs.operations.cancelled`` log line. ``dry_run=True`` changes nothing and logs nothing: it
    returns what would change now.

    ``reason`` says why (rule 59 (cancel-reason-kept)): it is stored on each job
    (``Job.cancel_reason``, shown in the admin), logged, written into the cancelled attempt's error
    and the ``last_error`` of the jobs cancelled now, and a running body reads it as
    ``ctx.cancel_reason``. At most ``MAX_CANCEL_REASON`` characters of text.
    """
    reason = _checked_reason(reason)
    size = _checked_chunk_size(chunk_size)
    alias = using or jobs_database()
    group = _group(jobs, alias)
    if group is not None:
        jobs = group
    cancelled: list[int] = []
    requested: list[int] = []
    missing: list[int] = []
    seen = 0
    for chunk in _chunks(jobs, alias, (*CANCEL_NOW, JobStatus.RUNNING), size, progress):
        seen += len(chunk)
        found = _statuses(alias, chunk) if dry_run or not isinstance(jobs, QuerySet) else {}
        if not isinstance(jobs, QuerySet):
            missing.extend(job_id for job_id in chunk if job_id not in found)
        if dry_run:
            cancelled.extend(i for i, (status, _) in found.items() if status in CANCEL_NOW)
            requested.extend(i for i, (status, asked) in found.items()
                             if status == JobStatus.RUNNING and not asked)
            continue
        now, asked = _cancel_chunk(alias, chunk, reason, by)
        cancelled.extend(now)
        requested.extend(asked)
    if (cancelled or requested) and not dry_run:
        log_event(logger, logging.INFO, "jobs.operations.cancelled", by=by, database=alias,
                  cancelled=len(cancelled), requested=len(requested), reason=reason,
                  job_ids=",".join(map(str, (cancelled + requested)[:LOGGED_IDS])))
    return CancelResult(tuple(cancelled), tuple(requested),
                        seen - len(cancelled) - len(requested) - len(missing), tuple(missing))


def _cancel_chunk(alias: str, chunk: list[int], reason: str, by: str) -> tuple[list[int],
                                                                                list[int]]:
    """Cancel the queued and waiting jobs of ``chunk`` and flag its running ones, in two short
    transactions; return the ids of each."""
    error = {"last_error": f"cancelled by {by or 'an operator'}: {reason}"} if reason else {}
    with transaction.atomic(using=alias):
        cancelled = _lock(alias, chunk, Q(status__in=CANCEL_NOW))
        # Fenced on the status again, though the lock already holds it: the fence is what
        # the operation means, and it stays true if the locking ever changes.
        Job.objects.using(alias).filter(id__in=cancelled, status__in=CANCEL_NOW).update(
            status=JobStatus.CANCELLED, cancel_requested=True, claim_token=None,
            cancel_reason=reason, finished_at=Now(), updated_at=Now(), **error,
        )
        store = get_store(alias)
        with store.cursor() as cur:
            # Their dependents, released or cancelled in this transaction
            # (rule 110 (released-in-settle)).
            dependencies.release(store, cur, _with_dependents(alias, cancelled))
            dependencies.notify_finished(store, cur, cancelled)
    with transaction.atomic(using=alias):
        # A job claimed since the statement above is running now, and is caught here.
        running = Q(status=JobStatus.RUNNING, cancel_requested=False)
        requested = _lock(alias, chunk, running)
        Job.objects.using(alias).filter(running, id__in=requested).update(
            cancel_requested=True, cancel_reason=reason, updated_at=Now())
        # Their workers hear of it on commit (PostgreSQL), not at their next heartbeat
        # (rule 133 (cancel-reaches-body)).
        get_store(alias).notify_cancel(requested)
    return cancelled, requested


def _checked_reason(reason: object) -> str:
    """``reason`` as stored: text of at most ``MAX_CANCEL_REASON`` characters, refused by name
    before any SQL otherwise, as is one with a NUL or a lone surrogate, which no text column of
    both engines keeps alike (rule 16 (bad-input-refused))."""
    if not isinstance(reason, str):
        raise JobOptionError(f"cancel_jobs(): reason must be text, not {reason!r}")
    if len(reason) > MAX_CANCEL_REASON:
        raise JobOptionError(f"cancel_jobs(): reason is {len(reason):,} characters; at most "
                             f"{MAX_CANCEL_REASON:,} are kept")
    if "\x00" in reason or not is_unicode(reason):
        raise JobOptionError(f"cancel_jobs(): reason cannot contain a NUL character or a lone "
                             f"surrogate: {reason!r}")
    return reason.strip()


def _checked_chunk_size(size: object) -> int:
    """``size`` if it is a whole number from 1 to ``MAX_CHUNK``; refused before any SQL."""
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_CHUNK:
        raise OperationInputError(
            f"chunk_size is a whole number from 1 to {MAX_CHUNK:,}, not {size!r}")
    return size


def retry_jobs(jobs: QuerySet[Job] | Iterable[int], *, using: str | None = None,
               progress: Progress | None = None, by: str = "", keyless: bool = False,
               chunk_size: int = CHUNK, dry_run: bool = False) -> RetryResult:
    """Queue failed or cancelled jobs again, runnable now, with one more attempt allowed.

    ``max_attempts`` becomes ``max(max_attempts, attempt + 1)``: a job that used all its attempts
    gets exactly one more, and one that still had some keeps them. Steps it completed before stay
    memoised, so the new run replays them instead of running them twice. Jobs in other statuses
    are left alone and counted as ``skipped``. ``progress``, ``by``, ``chunk_size``, ``dry_run``
    and ``missing_ids`` as for ``cancel_jobs``.

    A job whose unique key a later enqueue took over gets it back when an enqueue of the key
    could take it now (no job holds it, or its holder expired); when another job holds it, the
    job is not retried and ``RetryResult.refused`` names that job: two runs of one key must not
    run at once (rule 107 (retry-takes-key-back)). ``keyless=True`` retries it anyway, without its
    key, beside the holder (``RetryResult.keyless_ids``). A dry run does not look at keys: it
    counts such a job as retried.
    """
    size = _checked_chunk_size(chunk_size)
    alias = using or jobs_database()
    retried: list[int] = []
    refused: list[KeyHeld] = []
    keyless_ids: list[int] = []
    missing: list[int] = []
    seen = 0
    for chunk in _chunks(jobs, alias, RETRYABLE, size, progress):
        seen += len(chunk)
        found = _statuses(alias, chunk) if dry_run or not isinstance(jobs, QuerySet) else {}
        if not isinstance(jobs, QuerySet):
            missing.extend(job_id for job_id in chunk if job_id not in found)
        if dry_run:
            retried.extend(i for i, (status, _) in found.items() if status in RETRYABLE)
            continue
        ids, held = _retry_chunk(alias, chunk, keyless)
        retried.extend(ids)
        if keyless:
            keyless_ids.extend(held)
        else:
            refused.extend(held.values())
    skipped = seen - len(retried) - len(refused) - len(missing)
    if dry_run:
        return RetryResult(tuple(retried), skipped=skipped, missing_ids=tuple(missing))
    keys: dict[str, object] = {}
    if refused:
        keys = {"refused": len(refused), "held": "; ".join(map(str, refused[:LOGGED_IDS]))}
    if keyless_ids:
        keys["keyless"] = ",".join(map(str, keyless_ids[:LOGGED_IDS]))
    log_event(logger, logging.INFO, "jobs.operations.retried", by=by, retried=len(retried),
              database=alias, **keys)
    return RetryResult(tuple(retried), tuple(refused), tuple(keyless_ids), skipped,
                       tuple(missing))


def _with_dependents(alias: str, ids: list[int]) -> list[int]:
    """Those of ``ids`` whose finish some pending job counts (rule 110 (released-in-settle))."""
    if not ids:
        return []
    return list(Job.objects.using(alias).filter(id__in=ids, has_dependents=True)
                .order_by("id").values_list("id", flat=True))


def _group(jobs: object, alias: str) -> QuerySet[Job] | None:
    """The members of ``jobs`` that do not wait, when it is a batch or a workflow."""
    if isinstance(jobs, (Batch, BatchRow)):
        return Job.objects.using(alias).filter(batch_id=jobs.id, status__in=GROUP_CANCEL)
    if isinstance(jobs, (WorkflowRun, Workflow)):
        return Job.objects.using(alias).filter(workflow_id=jobs.id, status__in=GROUP_CANCEL)
    return None


def _retry_chunk(alias: str, chunk: list[int], keyless: bool) -> tuple[list[int],
                                                                        dict[int, KeyHeld]]:
    """Queue the failed and cancelled jobs of ``chunk`` again in one transaction; return their
    ids, and the jobs whose key another job holds (retried too if ``keyless``)."""
    with transaction.atomic(using=alias):
        ids = _lock(alias, chunk, Q(status__in=RETRYABLE))
        # In the transaction that locked the rows and queues them: a holder that appears
        # after this check finds the key taken back and returns this job
        # (rule 66 (held-key-returns-holder)).
        held = take_keys_back(alias, ids)
        if not keyless:
            ids = [job_id for job_id in ids if job_id not in held]
        # Read before the update: a retried job no longer counts as finished
        # (rule 114 (retry-takes-finish-back)).
        taken_back = _with_dependents(alias, ids)
        Job.objects.using(alias).filter(id__in=ids, status__in=RETRYABLE).update(
            status=JobStatus.QUEUED,
            visible_at=Now(),
            max_attempts=Greatest(F("max_attempts"), F("attempt") + 1),
            cancel_requested=False,
            cancel_reason="",
            claim_token=None,
            finished_at=None,
            updated_at=Now(),
        )
        with get_store(alias).cursor() as cur:
            dependencies.unfinish(get_store(alias), cur, taken_back)
        get_store(alias).notify(list(
            Job.objects.using(alias).filter(id__in=ids).values_list("queue", flat=True)
            .distinct()))
    return ids, held


# -- pausing queues -------------------------------------------------------------------------------


def pause_queue(name: str, *, reason: str = "", by: str = "", using: str | None = None) -> bool:
    """Pause queue ``name`` fleet-wide; return False if it was paused already.

    Every worker stops claiming from it at its next claim (within one poll interval when idle);
    runs in flight finish as usual, and enqueue still adds jobs to it (rule 75 (paused-queue)).
    ``by`` says who paused it (the admin and the command line pass ``admin:<user>`` and
    ``cli:<user>``).
    """
    name = check_queue_name(name)
    reason = _check_text("reason", reason)
    alias = using or jobs_database()
    _, created = QueuePause.objects.using(alias).get_or_create(
        queue=name, defaults={"reason": str(reason), "paused_by": str(by)[:200]})
    log_event(logger, logging.INFO, "jobs.queue.paused" if created else "jobs.queue.pause-kept",
              queue=name, by=by, reason=reason)
    return created


def resume_queue(name: str, *, by: str = "", using: str | None = None) -> bool:
    """Resume paused queue ``name``; return False if it was not paused.

    Its idle workers are notified (PostgreSQL, LISTEN), so they claim at once; elsewhere they
    claim within one poll interval.
    """
    name = check_queue_name(name)
    alias = using or jobs_database()
    with transaction.atomic(using=alias):
        deleted, _ = QueuePause.objects.using(alias).filter(queue=name).delete()
        if deleted:
            get_store(alias).notify([name])  # delivered when this commits
    log_event(logger, logging.INFO, "jobs.queue.resumed" if deleted else "jobs.queue.not-paused",
              queue=name, by=by)
    return bool(deleted)


def paused_queues(*, using: str | None = None) -> dict[str, QueuePause]:
    """The paused queues by name, oldest pause first."""
    alias = using or jobs_database()
    return {p.queue: p for p in QueuePause.objects.using(alias).order_by("paused_at", "queue")}


def _check_text(what: str, text: object, limit: int = 1000) -> str:
    """Return ``text`` if a text column can keep it; refuse it before any SQL."""
    if not isinstance(text, str) or len(text) > limit:
        raise OperationInputError(f"the {what} is text of at most {limit} characters, "
                                  f"not {text!r}")
    if "\x00" in text or not is_unicode(text):
        raise OperationInputError(
            f"the {what} cannot contain a NUL character or a lone surrogate: {text!r}")
    return text


def check_job_ids(ids: Iterable[object]) -> list[int]:
    """Return ``ids`` as job ids; refuse one that no job can have, before any SQL."""
    checked = []
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BIGINT_MAX:
            raise OperationInputError(
                f"a job id is a whole number from 1 to {BIGINT_MAX}, not {value!r}")
        checked.append(value)
    return checked


def check_job_name(name: object) -> str:
    """Return ``name`` if a job could have it; refuse it before any SQL (a lone surrogate, from
    a byte of the command line that is not UTF-8, would fail inside the driver instead)."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_JOB_NAME:
        raise OperationInputError(
            f"a job name is 1 to {MAX_JOB_NAME} characters of text, not {name!r}")
    if "\x00" in name or not is_unicode(name):
        raise OperationInputError(
            f"a job name cannot contain a NUL character or a lone surrogate: {name!r}")
    return name


def check_queue_name(name: object) -> str:
    """Return ``name`` if a job could be in a queue of that name; refuse it before any SQL."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_QUEUE:
        raise OperationInputError(
            f"a queue name is 1 to {MAX_QUEUE} characters of text, not {name!r}")
    if "\x00" in name or not is_unicode(name):
        raise OperationInputError(
            f"a queue name cannot contain a NUL character or a lone surrogate: {name!r}")
    return name
def pause_schedules(names: QuerySet[JobSchedule] | Iterable[str], *,
                    using: str | None = None) -> tuple[str, ...]:
    """Pause periodic jobs fleet-wide: no worker enqueues their ticks until they are resumed
    (rule 63 (fleet-wide-pause)). Jobs already enqueued still run. Returns the names paused now
    (those already paused are left alone and not counted)."""
    alias = using or jobs_database()
    # Begun as the writer on SQLite: it reads, then writes (rule 21 (sqlite-begins-as-writer)).
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
    are not caught up (rule 63 (fleet-wide-pause)), whatever their ``catch_up``. Returns the names
    resumed now."""
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


def _chunks(jobs: QuerySet[Job] | Iterable[int], alias: str, statuses: Sequence[str],
            size: int, progress: Progress | None) -> Iterator[list[int]]:
    """The ids to go through, ``size`` at a time in id order; ``progress`` hears of each chunk
    once its statements are done.

    A queryset is narrowed to ``statuses`` (a "select all" over a million finished rows reads
    only the few that can change, through the partial indexes on live and failed rows) and its
    ids read once, in one statement, before any is written: a walk that read a page per chunk
    would search the partial index again for every page. They are kept 8 bytes each (a million
    ids, 8 MB), and jobs enqueued after that read are left alone.
    """
    if isinstance(jobs, QuerySet):
        ids = array("q", jobs.using(alias).filter(status__in=statuses).order_by("id")
                    .values_list("id", flat=True).iterator(chunk_size=READ_CHUNK))
    else:
        ids = array("q", sorted({int(job_id) for job_id in jobs}))
    total = len(ids)
    for start in range(0, total, size):
        yield ids[start:start + size].tolist()
        if progress is not None:
            progress(min(start + size, total), total)


def _statuses(alias: str, ids: list[int]) -> dict[int, tuple[str, bool]]:
    """The status and ``cancel_requested`` of each job of ``ids`` there is, by id."""
    return {job_id: (status, asked) for job_id, status, asked in Job.objects.using(alias)
            .filter(id__in=ids).values_list("id", "status", "cancel_requested")}


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
