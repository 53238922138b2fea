"""The charts as a page shows them: the SVGs, their legend and the numbers as tables
(rule 81 (svg-charts))."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils.safestring import SafeString

from . import charts as chart_figures
from .charts import Charts, Span, job_charts
from .display import duration
from .svg import (
    bucket_label,
    bucket_span_text,
    durations_svg,
    local_time,
    queue_ages_svg,
    run_time,
    throughput_svg,
)


@dataclass(frozen=True)
class BucketRow:
    """One row of the runs table: a bucket's time, its count per outcome, its total."""

    time: str
    counts: list[int]
    total: int


@dataclass(frozen=True)
class ChartsView:
    """The charts of one page view, drawn, with the numbers behind them as rows of text."""

    figures: Charts
    runs_svg: SafeString
    durations_svg: SafeString
    ages_svg: SafeString
    #: Buckets in which something finished, newest first (empty ones are left out).
    bucket_rows: list[BucketRow]
    #: Each job name's run times, as text: (name, runs, p50, p95).
    duration_rows: list[tuple[str, int, str, str]]
    #: Each queue's oldest runnable job's wait, as text.
    age_rows: list[tuple[str, str]]
    counted_from: str
    timed_from: str
    #: The caps the notes under a cut chart name.
    max_counted: int
    max_timed: int

    @property
    def span(self) -> Span:
        """The window the charts show."""
        return self.figures.span

    @property
    def bucket_text(self) -> str:
        """``minute`` or ``15 minutes``: what one bar of the runs chart counts."""
        return bucket_span_text(self.figures.span.bucket_seconds)

    @property
    def name(self) -> str | None:
        """The job name the charts are about, None for every job."""
        return self.figures.name


def _time(moment: datetime | None) -> str:
    return local_time(moment)


def charts_view(alias: str, span: Span, name: str | None = None) -> ChartsView:
    """Read the figures of ``span`` (of job ``name``, or every job) and draw them."""
    figures = job_charts(alias, span, name)
    runs = figures.throughput
    rows = [BucketRow(bucket_label(b), [b.counts.get(o, 0) for o in runs.outcomes], b.total)
            for b in reversed(runs.buckets) if b.counts]
    return ChartsView(
        figures=figures,
        runs_svg=throughput_svg(runs),
        durations_svg=durations_svg(figures.durations),
        ages_svg=queue_ages_svg(figures.queue_ages),
        bucket_rows=rows,
        duration_rows=[(t.name, t.runs, run_time(t.p50), run_time(t.p95))
                       for t in figures.durations.names],
        age_rows=[(a.queue, duration(a.seconds)) for a in figures.queue_ages],
        counted_from=_time(runs.counted_from),
        timed_from=_time(figures.durations.timed_from),
        max_counted=(chart_figures.MAX_ATTEMPTS_READ if name is None
                     else chart_figures.MAX_NAMED_ATTEMPTS_READ),
        max_timed=chart_figures.MAX_RUNS_TIMED,
    )
