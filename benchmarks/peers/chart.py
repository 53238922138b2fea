"""Draw the peer benchmark's results: drain jobs/s and idle pickup latency per system.

``python -m benchmarks.peers --output report.md`` writes ``report.png`` beside the table (or
where ``--chart`` says); this module also redraws one from the raw figures an earlier run wrote
with ``--json``:

    python -m benchmarks.peers.chart results.json chart.png

Left: each system's drain, the bar its median and a dot per run (the spread). Right: its idle
pickup, the bar p50 and the whisker up to p99. Both on log scales: the systems differ by orders
of magnitude, and a ratio reads as a distance. matplotlib is in the ``bench-peers`` extra only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: The order and names of the systems, as the report's table has them.
SYSTEMS = ("ours", "pgqueuer", "procrastinate", "django-tasks-db", "celery")
LABELS = {"ours": "django_ultjobs", "pgqueuer": "PgQueuer", "procrastinate": "Procrastinate",
          "django-tasks-db": "django-tasks-db", "celery": "Celery (Redis)"}
OURS, PEER = "#0072b2", "#8a8a8a"
#: Where the log axes begin (the bars' common baseline).
DRAIN_FROM, PICKUP_FROM = 100, 1


def draw(results: dict[str, dict[str, Any]], env: dict[str, Any], path: Path) -> Path:
    """Write the chart of ``results`` (as ``benchmarks.peers --json`` has them) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file, on a server or in CI
    import matplotlib.pyplot as plt

    # Only the systems whose no-op drain ran (``--workloads`` without noop draws nothing).
    systems = [s for s in SYSTEMS if "drain" in results.get(s, {}) and "pickup" in results[s]]
    labels = [LABELS[s] for s in systems]
    colours = [OURS if s == "ours" else PEER for s in systems]
    rows = list(range(len(systems)))
    fig, (drain, pickup) = plt.subplots(1, 2, figsize=(11, 0.6 * len(systems) + 1.6),
                                        sharey=True, layout="constrained")
    _drain(drain, [results[s] for s in systems], rows, colours)
    _pickup(pickup, [results[s]["pickup"] for s in systems], rows, colours)
    drain.set_yticks(rows, labels)
    drain.invert_yaxis()
    fig.suptitle(f"One worker process per system, no-op jobs — {env.get('date', '?')}, "
                 f"django_ultjobs at {env.get('git', '?')}", fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _drain(ax: Any, figures: list[dict[str, Any]], rows: list[int], colours: list[str]) -> None:
    """Median drain as a bar, every run as a dot on it."""
    ax.barh(rows, [f["drain"] for f in figures], color=colours, height=0.6)
    for row, f in zip(rows, figures, strict=True):
        runs = f.get("drain_runs") or [f["drain"]]
        ax.plot(runs, [row] * len(runs), "o", color="black", markersize=3.5)
        ax.annotate(f"{f['drain']:,.0f}", (max(runs), row), xytext=(7, -3),
                    textcoords="offset points", fontsize=8)
    ax.set_xscale("log")
    # A bar on a log scale starts where the axis does: fixed, so two charts compare.
    ax.set_xlim(DRAIN_FROM, max(f["drain"] for f in figures) * 4)
    ax.set_xlabel(f"drain jobs/s: median bar, a dot per run (log, from {DRAIN_FROM})")
    ax.grid(axis="x", which="major", alpha=0.3)


def _pickup(ax: Any, figures: list[dict[str, Any]], rows: list[int], colours: list[str]) -> None:
    """p50 as a bar, a whisker from p50 up to p99."""
    p50 = [f["p50_ms"] for f in figures]
    p99 = [f["p99_ms"] for f in figures]
    ax.barh(rows, p50, color=colours, height=0.6)
    ax.errorbar(p50, rows, xerr=[[0] * len(p50), [b - a for a, b in zip(p50, p99, strict=True)]],
                fmt="none", ecolor="black", capsize=3, linewidth=1)
    for row, a, b in zip(rows, p50, p99, strict=True):
        ax.annotate(f"{a:,.1f} / {b:,.1f} ms", (b, row), xytext=(6, -3),
                    textcoords="offset points", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(PICKUP_FROM, max(p99) * 8)
    ax.set_xlabel(f"idle pickup ms, lower is better: p50 bar, whisker to p99 (log, from "
                  f"{PICKUP_FROM})")
    ax.grid(axis="x", which="major", alpha=0.3)


def main(argv: list[str] | None = None) -> int:
    """Redraw a chart from the JSON an earlier ``benchmarks.peers --json`` run wrote."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.chart",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="the raw figures (benchmarks.peers --json)")
    parser.add_argument("output", type=Path, help="the chart to write (.png, .svg)")
    args = parser.parse_args(argv)
    data = json.loads(args.json.read_text())
    print(draw(data["results"], data.get("environment", {}), args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
