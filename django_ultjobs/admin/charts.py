"""The figures behind the admin's charts: runs finished per bucket by outcome, run durations.

Read through the attempts view (rule 97 (attempt-on-row): a first attempt that succeeded plainly is
held by its job's row) and its tables' finish-time indexes (``ultjobs_attempt_finished``, and
``ultjobs_job_attempt_on_row`` for the attempts the jobs' rows hold), and bounded whatever the
tables hold (rule 80 (bounded-charts)): at most ``MAX_ATTEMPTS_READ`` attempts of each table are
counted (``MAX_NAMED_ATTEMPTS_READ`` on a job name's page) and ``MAX_RUNS_TIMED`` runs of each timed
per page.
When the window holds more, the chart covers its newest part and says from when, so a page
reads as fast at a million rows as at a thousand. The oldest runnable job per
queue comes from the live jobs (the claim's partial index).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import (
    Count,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Window,
)
from django.db.models import DurationField as DurationOutput
from django.db.models.functions import RowNumber, TruncMinute
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from ..models import AttemptOutcome, AttemptRecord, Job, JobAttempt
from ..store import get_store
from ..store.live import no_jit, oldest_due

#: Attempts counted per page at most: the counts of a busy day stop at the newest this many.
MAX_ATTEMPTS_READ = 50_000
#: Attempts read on a job name's page at most: each looks its job's name up (a primary-key
#: lookup), so the newest 10,000 of every name are read and that name's counted.
MAX_NAMED_ATTEMPTS_READ = 10_000
#: Runs timed per page at most (each looks its job's name up, and all are sorted). p95 of the
#: newest 5,000 runs is a steady figure; 20,000 cost 4x the time and crossed PostgreSQL's JIT
#: threshold (half a second compiling).
MAX_RUNS_TIMED = 5_000
#: Job names the duration chart shows, slowest p95 first; it says how many more there are.
MAX_NAMES_SHOWN = 12
#: Outcomes of a run whose body returned or raised: what a run's duration means. A cancelled,
#: lost or interrupted run was cut short; a suspended one ended at its wait.
TIMED_OUTCOMES = (AttemptOutcome.SUCCEEDED, AttemptOutcome.RETRYING, AttemptOutcome.FAILED)
#: The stacking order of the outcomes, bottom up: the good news under the bad.
OUTCOME_ORDER = (
    AttemptOutcome.SUCCEEDED, AttemptOutcome.RETRYING, AttemptOutcome.FAILED,
    AttemptOutcome.CANCELLED, AttemptOutcome.SLOT_LOST, AttemptOutcome.LEASE_LOST,
    AttemptOutcome.INTERRUPTED, AttemptOutcome.SUSPENDED,
)


@dataclass(frozen=True)
class Span:
    """A window a chart can show: how far back, and how wide one bar is."""

    key: str
    label: str | Promise
    seconds: int
    bucket_seconds: int

    @property
    def buckets(self) -> int:
        """How many bars: the last one is the bucket the database's clock is in."""
        return self.seconds // self.bucket_seconds


#: The windows on offer, by their ``?charts=`` value; the first is the default.
SPANS = {
    "1h": Span("1h", _("last hour"), 3600, 60),
    "24h": Span("24h", _("last 24 hours"), 86400, 900),
}
DEFAULT_SPAN = SPANS["1h"]


def span_of(value: object) -> Span:
    """Return the window a ``?charts=`` value names; the default for anything else."""
    return SPANS.get(value, DEFAULT_SPAN) if isinstance(value, str) else DEFAULT_SPAN


@dataclass(frozen=True)
class Bucket:
    """The runs that finished in one bucket, by outcome; None when not counted (over the cap)."""

    start: datetime
    counts: dict[str, int] | None

    @property
    def total(self) -> int:
        """Runs of every outcome."""
        return sum(self.counts.values()) if self.counts else 0


@dataclass(frozen=True)
class Throughput:
    """Runs finished per bucket by outcome, oldest bucket first."""

    span: Span
    buckets: list[Bucket]
    #: The outcomes that occur, in stacking order (the legend).
    outcomes: list[str]
    #: When the window held more than ``MAX_ATTEMPTS_READ`` attempts: the first bucket counted.
    counted_from: datetime | None = None

    @property
    def total(self) -> int:
        """Runs counted in the window."""
        return sum(b.total for b in self.buckets)


@dataclass(frozen=True)
class RunTimes:
    """A job name's run durations in the window: nearest-rank p50 and p95, in seconds."""

    name: str
    runs: int
    p50: float
    p95: float


@dataclass(frozen=True)
class Durations:
    """Run durations per job name, slowest p95 first."""

    span: Span
    names: list[RunTimes]
    #: More names beyond the ones listed.
    more: int = 0
    #: When more than ``MAX_RUNS_TIMED`` runs finished in the window: the oldest one timed.
    timed_from: datetime | None = None


@dataclass(frozen=True)
class QueueAge:
    """How long the oldest runnable job of a queue has waited (database clock)."""

    queue: str
    seconds: float


@dataclass(frozen=True)
class Charts:
    """Everything the charts draw, for every job or one job name."""

    span: Span
    now: datetime
    throughput: Throughput
    durations: Durations
    queue_ages: list[QueueAge] = field(default_factory=list)
    name: str | None = None


def bucket_floor(moment: datetime, bucket_seconds: int) -> datetime:
    """Return the start of the bucket ``moment`` falls in (buckets aligned on UTC)."""
    epoch = moment.timestamp()
    return datetime.fromtimestamp(epoch - epoch % bucket_seconds, UTC)


def job_charts(alias: str, span: Span, name: str | None = None) -> Charts:
    """Return the charts' figures for ``alias`` over ``span``, for every job or ``name``.

    Without PostgreSQL's JIT compiler: the planner costs each attempt's name lookup once per
    window function over it, which took the durations' statement past ``jit_above_cost`` at
    5,000 runs, and compiling it cost more than running it."""
    store = get_store(alias)
    now = store.db_now()
    first = bucket_floor(now, span.bucket_seconds) - timedelta(
        seconds=span.bucket_seconds * (span.buckets - 1))
    with no_jit(store):
        return Charts(
            span=span,
            now=now,
            throughput=throughput(alias, span, first, name),
            durations=durations(alias, span, first, name),
            queue_ages=queue_ages(alias, name, now),
            name=name,
        )


def _newest_cut(alias: str, since: datetime, cap: int, *outcomes: str) -> datetime | None:
    """Return the finish time of the ``cap``-th newest attempt since ``since`` of the attempt
    rows, or of the attempts the jobs' rows hold, whichever is later, if there is one.

    One walk down each table's finish-time index, ``cap`` entries at most: the bound on what a
    chart reads, whatever the window holds; after the cut each table has at most ``cap`` (rule
    80). Not one walk down the attempts view: PostgreSQL keeps its filtered half over the jobs a
    subquery, which it sorts whole instead of merging in index order.
    """
    rows = JobAttempt.objects.using(alias).filter(finished_at__gte=since)
    if outcomes:
        rows = rows.filter(outcome__in=outcomes)
    cuts = [_cap_th(rows, cap)]
    if not outcomes or AttemptOutcome.SUCCEEDED in outcomes:
        on_rows = Job.objects.using(alias).filter(attempt_on_row=True, finished_at__gte=since)
        cuts.append(_cap_th(on_rows, cap))
    return max((cut for cut in cuts if cut is not None), default=None)


def _cap_th(rows: QuerySet[Any], cap: int) -> datetime | None:
    """The finish time of the ``cap``-th newest of ``rows``, or None when there are fewer."""
    row = list(rows.order_by("-finished_at").values_list("finished_at", flat=True)[cap - 1:cap])
    return row[0] if row else None


def _with_job_name(attempts: QuerySet[AttemptRecord], name: str | None) -> QuerySet[AttemptRecord]:
    """Annotate each attempt with its job's name (and keep ``name``'s only, when given).

    A scalar subquery, one primary-key lookup per attempt read, and never a join: with a join,
    PostgreSQL's planner hashes the whole jobs table for 20,000 attempts (a million rows read,
    1.4 s at a million jobs).
    """
    job_name = Subquery(Job.objects.filter(id=OuterRef("job_id")).values("name")[:1])
    attempts = attempts.annotate(job_name=job_name)
    return attempts if name is None else attempts.filter(job_name=name)


def throughput(alias: str, span: Span, first: datetime, name: str | None = None) -> Throughput:
    """Count the runs finished per bucket and outcome since ``first``."""
    start = first
    cap = MAX_ATTEMPTS_READ if name is None else MAX_NAMED_ATTEMPTS_READ
    cut = _newest_cut(alias, first, cap + 1)
    counted_from = None
    if cut is not None:
        # Over the cap: count whole buckets after the cut only, never a bucket in part.
        start = counted_from = bucket_floor(cut, span.bucket_seconds) + timedelta(
            seconds=span.bucket_seconds)
    attempts = AttemptRecord.objects.using(alias).filter(finished_at__gte=start)
    if name is not None:
        attempts = _with_job_name(attempts, name)
    rows = (attempts.annotate(minute=TruncMinute("finished_at", tzinfo=UTC))
            .values("minute", "outcome").order_by().annotate(n=Count("id")))
    counts: list[dict[str, int]] = [defaultdict(int) for _ in range(span.buckets)]
    seen: set[str] = set()
    for row in rows:
        index = int((row["minute"] - first).total_seconds() // span.bucket_seconds)
        if 0 <= index < span.buckets:
            counts[index][row["outcome"]] += row["n"]
            seen.add(row["outcome"])
    buckets = []
    for index, by_outcome in enumerate(counts):
        begins = first + timedelta(seconds=index * span.bucket_seconds)
        buckets.append(Bucket(begins, None if begins < start else dict(by_outcome)))
    outcomes = [o for o in OUTCOME_ORDER if o in seen] + sorted(seen - set(OUTCOME_ORDER))
    return Throughput(span, buckets, outcomes, counted_from)


def percentile_rank(runs: int, percent: int) -> int:
    """The nearest-rank position (1-based) of the ``percent``-th percentile of ``runs`` values."""
    return max(1, math.ceil(runs * percent / 100))


def durations(alias: str, span: Span, first: datetime, name: str | None = None) -> Durations:
    """Return p50 and p95 of the run durations per job name since ``first``.

    Nearest rank, computed in the database on both engines alike: each run is numbered within
    its name by duration, and only the two runs at the p50 and p95 ranks come back per name.
    """
    start = first
    cut = _newest_cut(alias, first, MAX_RUNS_TIMED + 1, *TIMED_OUTCOMES)
    if cut is not None:
        start = cut + timedelta(microseconds=1)
    runs = AttemptRecord.objects.using(alias).filter(
        finished_at__gte=start, outcome__in=TIMED_OUTCOMES, started_at__isnull=False)
    took = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationOutput())
    ranked = (_with_job_name(runs, name).annotate(took=took)
              .annotate(rank=Window(RowNumber(), partition_by=F("job_name"),
                                    order_by=[F("took").asc(), F("id").asc()]),
                        runs=Window(Count("id"), partition_by=F("job_name")))
              .values("job_name", "took", "rank", "runs"))
    # Rank 1..n; p50 is at ceil(n/2), p95 at ceil(0.95 n): integer arithmetic, alike everywhere.
    p50_rank = ExpressionWrapper((F("runs") * 50 + 99) / 100, output_field=IntegerField())
    p95_rank = ExpressionWrapper((F("runs") * 95 + 99) / 100, output_field=IntegerField())
    picked = ranked.annotate(p50_rank=p50_rank, p95_rank=p95_rank).filter(
        Q(rank=F("p50_rank")) | Q(rank=F("p95_rank")))
    found: dict[str, dict[str, object]] = {}
    for row in picked:
        entry = found.setdefault(row["job_name"], {"runs": row["runs"]})
        seconds = row["took"].total_seconds()
        if row["rank"] == percentile_rank(row["runs"], 50):
            entry["p50"] = seconds
        if row["rank"] == percentile_rank(row["runs"], 95):
            entry["p95"] = seconds
    times = sorted((RunTimes(n, int(e["runs"]), float(e["p50"]), float(e["p95"]))  # type: ignore[arg-type]
                    for n, e in found.items()), key=lambda t: (-t.p95, t.name))
    return Durations(span, times[:MAX_NAMES_SHOWN], max(0, len(times) - MAX_NAMES_SHOWN),
                     None if cut is None else start)


def queue_ages(alias: str, name: str | None, now: datetime) -> list[QueueAge]:
    """Return how long the oldest runnable job of each queue has waited, oldest first.

    Runnable as in the summary's "oldest runnable job": live and due (a lapsed running job is
    due again, for re-delivery). The first entry (of ``name``) of each queue's ranges of the
    live index (rule 120 (bounded-live-stats)).
    """
    oldest = oldest_due(get_store(alias), name)
    ages = [QueueAge(queue, max(0.0, (now - at).total_seconds())) for queue, at in oldest.items()]
    return sorted(ages, key=lambda a: (-a.seconds, a.queue))
