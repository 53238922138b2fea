"""The summary on the jobs app's admin index: what an operator looks at first.

Cheap by construction, because the index is the page everybody opens: live jobs (queued,
running, waiting) are counted through the live index, each figure a range of it stopped at a cap
(rule 120 (bounded-live-stats)), so a backlog of millions costs what one of ten thousand does;
finished jobs, the millions, are estimated by the planner on PostgreSQL and counted up to a cap
elsewhere. Nothing here reads the whole jobs table, nor every live row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.db.models.functions import Now

from ..core.slot_keys import slot_key_for
from ..jobs.registry import registered_jobs
from ..models import (
    FINISHED_STATUSES,
    LIVE_STATUSES,
    Job,
    JobAttempt,
    JobStatus,
    QueuePause,
    Slot,
)
from ..queue_stats import running_workers
from ..store import get_store
from ..store.live import LiveRow, finished_counts, first_due, live_names, live_rows
from .display import duration, seconds_between
from .paginator import EXACT_UP_TO, EstimatedCountPaginator, planner_estimate
from .settling import settling_by_key


@dataclass(frozen=True)
class StatusCount:
    """How many jobs are in one status: exact, the planner's estimate, or "more than" a cap."""

    status: str
    count: int
    estimated: bool = False
    #: ``count`` is the cap plus one: there are more than the cap (no estimate to show).
    lower_bound: bool = False


@dataclass
class QueueCounts:
    """The live jobs of one queue, by where they stand."""

    queue: str
    runnable: int = 0
    delayed: int = 0
    in_flight: int = 0
    lapsed: int = 0
    waiting: int = 0
    #: Waiting for their dependencies (``ultjobs stats`` shows them; the index's table does not).
    pending: int = 0
    #: When its longest-runnable job became runnable (queued or woken; database clock).
    oldest_runnable_at: datetime | None = None
    #: Its pause, when paused (rule 75 (paused-queue)): no worker claims from it.
    pause: QueuePause | None = None
    #: The figures above read from a full window: each is at least its count.
    more_than: set[str] = field(default_factory=set)

    @property
    def cells(self) -> list[tuple[int, bool]]:
        """The counts in the table's column order, each with whether it is "more than"."""
        return [(getattr(self, f), f in self.more_than) for f in
                ("runnable", "delayed", "in_flight", "lapsed", "waiting")]

    @property
    def paused(self) -> bool:
        """Whether no worker claims from this queue now."""
        return self.pause is not None


@dataclass(frozen=True)
class SlotWait:
    """A capped job's key, its cap, and how many of its slots are held now."""

    key: str
    cap: int
    held: int
    #: Runs of the key whose bodies have returned and settles are not written: they hold no
    #: slot and are not counted against the cap (rule 91 (settling-shown)).
    settling: int = 0


@dataclass(frozen=True)
class OldestRunnable:
    """The job that has been runnable the longest, and for how long (database clock)."""

    job_id: int
    name: str
    seconds: float
    #: Set when the job is capped and every slot of its key is held: it waits for a slot, not
    #: for a worker.
    slot_wait: SlotWait | None = None

    @property
    def age(self) -> str:
        """How long it has waited, as ``3 min``."""
        return duration(self.seconds)


@dataclass(frozen=True)
class Summary:
    """Everything the app index shows about the jobs."""

    statuses: list[StatusCount]
    queues: list[QueueCounts]
    oldest_runnable: OldestRunnable | None
    in_flight: int
    lapsed: int
    slots_held: int
    slots_lapsed: int
    lost_slots_24h: int
    workers_running: int
    #: Runs settling (body returned, settle not written), held against no cap
    #: (rule 91 (settling-shown)).
    slots_settling: int = 0
    #: Names of queued or waiting jobs that none of the running workers knows
    #: (rule 12 (unknown-job-parked)): a removed or renamed job, or a deploy the workers have not
    #: caught up with. Empty when no worker runs, or one of them did not say which jobs it knows.
    unknown_jobs: list[str] = field(default_factory=list)
    #: More such names beyond the ones listed.
    unknown_jobs_more: int = 0


#: Jobs in the table (the planner's estimate) past which a finished status is estimated even
#: when few rows hold it: no index leads with the status, so counting a rare one (400 cancelled
#: among a million) reads the whole table, 90-120 ms at 1.2 million rows.
ESTIMATE_PAST = 10 * EXACT_UP_TO


def _count_or_estimate(alias: str, status: str, table_rows: int | None) -> StatusCount:
    """How many jobs finished in ``status``: the planner's estimate on a big table, else what
    the changelist's paginator says (exact up to its cap)."""
    jobs = Job.objects.using(alias).filter(status=status).order_by("-id")
    if table_rows is not None and table_rows > ESTIMATE_PAST:
        return StatusCount(status, planner_estimate(jobs) or 0, estimated=True)
    paginator = EstimatedCountPaginator(jobs, 1)
    return StatusCount(status, paginator.count, paginator.estimated, paginator.lower_bound)


def slot_wait(alias: str, name: str, settling: dict[str, int] | None = None) -> SlotWait | None:
    """Return the slots of a capped job when all are held (it waits for one), else None;
    ``settling``: the runs settling per key (``settling_by_key``), read here when not given."""
    spec = registered_jobs().get(name)
    if spec is None or not spec.concurrency:
        return None
    key = slot_key_for(name)
    held = Slot.objects.using(alias).filter(key=key, expires_at__gt=Now()).count()
    if held < spec.concurrency:
        return None
    if settling is None:
        settling = settling_by_key(alias)
    return SlotWait(key, spec.concurrency, held, settling.get(key, 0))


#: Live jobs read per figure, less one: the lists' exact count (past it, a figure is "at least").
LIVE_COUNT_CAP = EXACT_UP_TO

#: Which figure of the summary a live row's counts go to: (status, due now or later).
_FIGURE = {(JobStatus.QUEUED, True): "runnable", (JobStatus.QUEUED, False): "delayed",
           (JobStatus.RUNNING, True): "lapsed", (JobStatus.RUNNING, False): "in_flight",
           (JobStatus.WAITING, True): "runnable", (JobStatus.WAITING, False): "waiting"}


def bounded_queue_counts(alias: str) -> tuple[list[StatusCount], dict[str, QueueCounts],
                                              LiveRow | None]:
    """The live jobs by status and by queue, every figure a range of the live index stopped at
    ``LIVE_COUNT_CAP`` rows (rule 120 (bounded-live-stats)), in one statement; and the row of
    the status and queue whose due job has waited longest."""
    by_status = dict.fromkeys(LIVE_STATUSES, 0)
    capped_status: set[str] = set()
    queues: dict[str, QueueCounts] = {}
    oldest: LiveRow | None = None
    for row in live_rows(get_store(alias), (), LIVE_COUNT_CAP + 1):
        counts = queues.setdefault(row.queue, QueueCounts(row.queue))
        counts.pending += row.pending
        if row.pending_capped:
            counts.more_than.add("pending")
        for due, count, lower_bound in ((True, row.due + row.held_back,
                                         row.due_capped or row.held_capped),
                                        (False, row.later, row.later_capped)):
            figure = _FIGURE[(JobStatus(row.status), due)]
            setattr(counts, figure, getattr(counts, figure) + count)
            by_status[row.status] += count
            if lower_bound:
                counts.more_than.add(figure)
                capped_status.add(row.status)
        if row.oldest_due_at is None:
            continue
        if oldest is None or row.oldest_due_at < oldest.oldest_due_at:  # type: ignore[operator]
            oldest = row
        if row.status != JobStatus.RUNNING and (counts.oldest_runnable_at is None
                                                or row.oldest_due_at < counts.oldest_runnable_at):
            counts.oldest_runnable_at = row.oldest_due_at
    paused = {p.queue: p for p in QueuePause.objects.using(alias).all()}
    for queue, pause in paused.items():
        queues.setdefault(queue, QueueCounts(queue)).pause = pause
    # A sum with a part stopped at the cap is a lower bound: shown as "more than" it less one.
    statuses = [StatusCount(s, n, lower_bound=s in capped_status) for s, n in by_status.items()]
    return statuses, dict(sorted(queues.items())), oldest


def _oldest_runnable(alias: str, row: LiveRow | None,
                     settling: dict[str, int]) -> OldestRunnable | None:
    """The live job due longest ago (the first entry of ``row``'s range of the live index), how
    long it has waited, and whether for a fleet slot."""
    if row is None:
        return None
    oldest = first_due(get_store(alias), row.queue, row.status)
    if oldest is None:  # claimed or finished since the counts were read
        return None
    job_id, name, due_at, now = oldest
    waited = seconds_between(due_at, now) or 0.0
    return OldestRunnable(job_id, name, max(waited, 0.0), slot_wait(alias, name, settling))


def jobs_summary(alias: str) -> Summary:
    """Return the summary of the jobs in ``alias``, in a handful of index-backed queries, each
    reading a bounded number of rows."""
    statuses, queues, oldest = bounded_queue_counts(alias)
    table_rows = planner_estimate(Job.objects.using(alias).all())
    if table_rows is None:
        # No planner to ask (SQLite): each status counted by name, up to the cap per name; a
        # lower bound is shown as "more than" the cap, as the live counts are.
        finished = finished_counts(get_store(alias), LIVE_COUNT_CAP + 1)
        for status in FINISHED_STATUSES:
            count, capped = finished.get(status, (0, False))
            statuses.append(StatusCount(status, LIVE_COUNT_CAP + 1 if capped else count,
                                        lower_bound=capped))
    else:
        statuses += [_count_or_estimate(alias, s, table_rows) for s in FINISHED_STATUSES]

    slots = Slot.objects.using(alias).aggregate(
        held=Count("id", filter=Q(expires_at__gt=Now())),
        lapsed=Count("id", filter=Q(expires_at__lte=Now())))
    # The table, not the attempts view: a slot_lost attempt always has its row
    # (rule 97 (attempt-on-row)), and the table's partial index serves this count.
    lost = JobAttempt.objects.using(alias).filter(
        outcome="slot_lost", finished_at__gte=Now() - timedelta(hours=24)).count()
    known = [worker.jobs for worker in running_workers(alias)]
    unknown = _unknown_job_names(alias, known)
    settling = settling_by_key(alias)
    return Summary(
        statuses=statuses,
        # A queue holding pending jobs alone has nothing in the table's columns.
        queues=[q for q in queues.values() if q.paused or any(n for n, _ in q.cells)],
        oldest_runnable=_oldest_runnable(alias, oldest, settling),
        in_flight=sum(q.in_flight for q in queues.values()),
        lapsed=sum(q.lapsed for q in queues.values()),
        slots_held=slots["held"] or 0,
        slots_lapsed=slots["lapsed"] or 0,
        lost_slots_24h=lost,
        workers_running=len(known),
        slots_settling=sum(settling.values()),
        unknown_jobs=unknown[:UNKNOWN_JOBS_SHOWN],
        unknown_jobs_more=max(0, len(unknown) - UNKNOWN_JOBS_SHOWN),
    )


#: The unknown job names the summary lists; it says how many more there are.
UNKNOWN_JOBS_SHOWN = 20


def _unknown_job_names(alias: str, known_by_worker: list[object]) -> list[str]:
    """Names of queued or waiting jobs no running worker knows, given each running worker's
    list of known names. None without a running worker, or with one that did not say (a worker
    of a version before workers said): every name would look unknown."""
    if not known_by_worker or not all(isinstance(k, list) for k in known_by_worker):
        return []
    known: set[object] = set().union(*known_by_worker)  # type: ignore[arg-type]
    # One probe of the per-kind claim index per name, however many jobs each has.
    return [name for name in live_names(get_store(alias)) if name not in known]
