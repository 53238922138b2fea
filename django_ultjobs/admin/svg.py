"""The admin's charts drawn as inline SVG on the server: no script, nothing fetched
(rule 81 (svg-charts)).

Colours come from classes the app's stylesheet defines for Django's light and dark themes, never
from ``style`` attributes, which a strict Content-Security-Policy refuses. Each chart is an
``<svg role="img">`` with a title and a one-sentence description, each bar carries a ``<title>``
(a tooltip on hover), and the page lists the numbers as a table for a screen reader (the
template's job, from the same figures).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext

from .charts import Bucket, Durations, QueueAge, Throughput
from .display import duration

WIDTH = 600
#: Room for the y axis's numbers on the left and the time labels under the bars.
LEFT, BOTTOM, TOP = 44, 18, 8
BAR_CHART_HEIGHT = 170
#: One row of a horizontal bar chart, and the columns of its name, bar and numbers.
ROW, NAME_WIDTH, VALUE_WIDTH = 24, 190, 170
#: Characters of a job or queue name shown before it is cut (the whole name is its tooltip).
NAME_CHARS = 28


def run_time(seconds: float) -> str:
    """Return a run's duration in one short unit: ``850 µs``, ``12 ms``, ``1.4 s``, ``3 min``."""
    if seconds < 0.001:
        return gettext("%(n)s µs") % {"n": f"{seconds * 1e6:.0f}"}
    if seconds < 1:
        return gettext("%(n)s ms") % {"n": f"{seconds * 1e3:.0f}"}
    if seconds < 60:
        return gettext("%(n)s s") % {"n": f"{seconds:.1f}"}
    return duration(seconds)


def nice_ceiling(value: float) -> float:
    """Return the smallest of 1, 2 or 5 times a power of ten that is at least ``value``."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def joined(parts: Iterable[SafeString]) -> SafeString:
    """Join pieces that are safe already (each from format_html)."""
    return format_html_join("", "{}", ((p,) for p in parts))


def coord(value: float) -> str:
    """A coordinate to a tenth of a pixel (format_html escapes its arguments to text first)."""
    return f"{value:.1f}"


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"


def svg_figure(chart_id: str, height: int, title: str, desc: str, body: SafeString,
         width: int = WIDTH) -> SafeString:
    """Wrap ``body`` in an accessible ``<svg>``: role img, its title and description."""
    return format_html(
        '<svg class="ultjobs-chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        'aria-labelledby="{id}-title {id}-desc" xmlns="http://www.w3.org/2000/svg">'
        '<title id="{id}-title">{title}</title><desc id="{id}-desc">{desc}</desc>{body}</svg>',
        w=width, h=height, id=chart_id, title=title, desc=desc, body=body)


# -- runs finished per bucket, stacked by outcome -----------------------------------------------


def bucket_label(bucket: Bucket) -> str:
    """``14:05`` in the site's time zone."""
    return timezone.localtime(bucket.start).strftime("%H:%M")


def bucket_text(bucket: Bucket) -> str:
    """``14:05: 12 succeeded, 1 failed`` (or ``none`` / ``not counted``)."""
    if bucket.counts is None:
        return gettext("%(time)s: not counted") % {"time": bucket_label(bucket)}
    parts = [f"{n:,} {outcome}" for outcome, n in bucket.counts.items() if n]
    return f"{bucket_label(bucket)}: {', '.join(parts) or gettext('none')}"


def _labelled(bucket: Bucket, bucket_seconds: int) -> bool:
    """Whether the x axis names this bucket: every 10 minutes by the minute, else 3 hours."""
    local = timezone.localtime(bucket.start)
    if bucket_seconds < 900:
        return local.minute % 10 == 0
    return local.minute == 0 and local.hour % 3 == 0


def _y_axis(top: float, plot_height: int) -> SafeString:
    """Grid lines and their numbers at 0, half (when whole) and the top of the scale."""
    lines = []
    for fraction in (0, 0.5, 1):
        y = TOP + plot_height * (1 - fraction)
        value = top * fraction
        if value != int(value):
            continue  # runs are whole: no "2.5" line on a scale of 5
        label = f"{value:,.0f}"
        lines.append(format_html(
            '<line class="ultjobs-grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
            '<text class="ultjobs-axis" x="{}" y="{}" text-anchor="end">{}</text>',
            LEFT, WIDTH, f"{y:.1f}", f"{y:.1f}", LEFT - 6, f"{y + 4:.1f}", label))
    return joined(lines)


def _stack(bucket: Bucket, outcomes: list[str], x: float, width: float, scale: float,
           plot_height: int) -> SafeString:
    """One bar: its outcomes stacked bottom up, its text as a tooltip."""
    if bucket.counts is None:
        return format_html(
            '<rect class="ultjobs-uncounted" x="{}" y="{}" width="{}" height="{}">'
            '<title>{}</title></rect>', coord(x), TOP, coord(width), plot_height,
            bucket_text(bucket))
    rects, base = [], TOP + plot_height
    for outcome in outcomes:
        height = bucket.counts.get(outcome, 0) * scale
        if height > 0:
            base -= height
            rects.append(format_html(
                '<rect class="ultjobs-o-{}" x="{}" y="{}" width="{}" height="{}"/>',
                outcome, coord(x), coord(base), coord(width), coord(height)))
    if not rects:
        return SafeString("")
    return format_html("<g><title>{}</title>{}</g>", bucket_text(bucket),
                       joined(rects))


def throughput_svg(figures: Throughput, chart_id: str = "ultjobs-chart-runs") -> SafeString:
    """Draw the runs finished per bucket, stacked by outcome, with a time axis."""
    plot_height = BAR_CHART_HEIGHT - TOP - BOTTOM
    peak = max((b.total for b in figures.buckets), default=0)
    top = nice_ceiling(peak)
    scale = plot_height / top
    step = (WIDTH - LEFT) / max(1, len(figures.buckets))
    bars, labels = [], []
    for index, bucket in enumerate(figures.buckets):
        x = LEFT + index * step
        bars.append(_stack(bucket, figures.outcomes, x + 0.5, max(step - 1, 1), scale,
                           plot_height))
        if _labelled(bucket, figures.span.bucket_seconds):
            labels.append(format_html(
                '<text class="ultjobs-axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                coord(x + step / 2), BAR_CHART_HEIGHT - 4, bucket_label(bucket)))
    per = bucket_span_text(figures.span.bucket_seconds)
    title = gettext("Runs finished per %(bucket)s, %(span)s, by outcome") % {
        "bucket": per, "span": figures.span.label}
    body = format_html("{}{}{}", _y_axis(top, plot_height), joined(bars), joined(labels))
    return svg_figure(chart_id, BAR_CHART_HEIGHT, title, throughput_desc(figures), body)


def bucket_span_text(bucket_seconds: int) -> str:
    """``minute`` or ``15 minutes``."""
    minutes = bucket_seconds // 60
    return gettext("minute") if minutes == 1 else gettext("%(n)d minutes") % {"n": minutes}


def throughput_desc(figures: Throughput) -> str:
    """One sentence: how many runs, of which outcomes, and the busiest bucket."""
    if not figures.total:
        return gettext("No run finished in the %(span)s.") % {"span": figures.span.label}
    totals = {o: sum((b.counts or {}).get(o, 0) for b in figures.buckets)
              for o in figures.outcomes}
    parts = ", ".join(f"{n:,} {o}" for o, n in totals.items() if n)
    busiest = max(figures.buckets, key=lambda b: b.total)
    return ngettext("%(count)s run finished in the %(span)s (%(parts)s); the busiest, %(time)s.",
                    "%(count)s runs finished in the %(span)s (%(parts)s); the busiest, %(time)s.",
                    figures.total) % {"count": f"{figures.total:,}", "span": figures.span.label,
                                      "parts": parts, "time": bucket_text(busiest)}


# -- horizontal bars: run times per job name, oldest runnable per queue ----------------------------


def _row(index: int, name: str, bars: SafeString, value: str, tooltip: str) -> SafeString:
    """One row of a horizontal bar chart: the name, its bars, its numbers."""
    y = TOP + index * ROW
    return format_html(
        '<g><title>{tooltip}</title>'
        '<text class="ultjobs-label" x="{nx}" y="{ty}" text-anchor="end">{name}</text>{bars}'
        '<text class="ultjobs-value" x="{vx}" y="{ty}">{value}</text></g>',
        tooltip=tooltip, nx=NAME_WIDTH - 8, ty=y + 15, name=_short(name), bars=bars,
        vx=WIDTH - VALUE_WIDTH + 6, value=value)


def _bar(css: str, index: int, length: float, inset: int = 0) -> SafeString:
    y = TOP + index * ROW + 3 + inset
    return format_html('<rect class="{}" x="{}" y="{}" width="{}" height="{}" rx="2"/>',
                       css, NAME_WIDTH, y, coord(max(length, 1.0)), ROW - 6 - 2 * inset)


def durations_svg(figures: Durations, chart_id: str = "ultjobs-chart-durations") -> SafeString:
    """Draw p50 (dark, inside) and p95 (light) of each job name's run time."""
    room = WIDTH - NAME_WIDTH - VALUE_WIDTH
    slowest = max((t.p95 for t in figures.names), default=0.0) or 1.0
    rows = []
    for index, t in enumerate(figures.names):
        bars = format_html("{}{}", _bar("ultjobs-p95", index, t.p95 / slowest * room),
                           _bar("ultjobs-p50", index, t.p50 / slowest * room, inset=4))
        value = gettext("p50 %(p50)s · p95 %(p95)s") % {
            "p50": run_time(t.p50), "p95": run_time(t.p95)}
        tooltip = ngettext("%(name)s: %(value)s over %(runs)s run",
                           "%(name)s: %(value)s over %(runs)s runs", t.runs) % {
            "name": t.name, "value": value, "runs": f"{t.runs:,}"}
        rows.append(_row(index, t.name, bars, value, tooltip))
    height = TOP * 2 + ROW * max(1, len(rows))
    title = gettext("Run time per job, %(span)s: median (p50) and 95th percentile (p95)") % {
        "span": figures.span.label}
    desc = "; ".join(f"{t.name}: p50 {run_time(t.p50)}, p95 {run_time(t.p95)}"
                     for t in figures.names) or gettext("No timed run in the %(span)s.") % {
        "span": figures.span.label}
    return svg_figure(chart_id, height, title, desc, joined(rows))


def queue_ages_svg(ages: list[QueueAge], chart_id: str = "ultjobs-chart-ages") -> SafeString:
    """Draw how long the oldest runnable job of each queue has waited."""
    room = WIDTH - NAME_WIDTH - VALUE_WIDTH
    oldest = max((a.seconds for a in ages), default=0.0) or 1.0
    rows = [_row(index, a.queue, _bar("ultjobs-age", index, a.seconds / oldest * room),
                 duration(a.seconds), f"{a.queue}: {duration(a.seconds)}")
            for index, a in enumerate(ages)]
    height = TOP * 2 + ROW * max(1, len(rows))
    title = gettext("Oldest runnable job per queue: how long it has waited")
    desc = "; ".join(f"{a.queue}: {duration(a.seconds)}" for a in ages) or gettext(
        "No queue has a runnable job waiting.")
    return svg_figure(chart_id, height, title, desc, joined(rows))



def local_time(moment: datetime | None) -> str:
    """``14:05`` in the site's time zone (empty for None)."""
    return "" if moment is None else timezone.localtime(moment).strftime("%H:%M")
