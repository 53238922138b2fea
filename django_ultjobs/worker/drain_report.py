"""What a draining worker says while it waits for its runs: how to stop at once, and every few
seconds which jobs are still running and for how long."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .runs import Run

#: Seconds between two lines naming the runs a draining worker still waits for.
REPORT_INTERVAL = 5.0
#: Runs one line names, the longest-running first; the others are counted.
MAX_NAMED = 10
#: Said when the process's own signal handlers drain it: the first signal waits for the runs,
#: which may take the whole grace period, and nothing else would tell the operator the second
#: one does not.
STOP_NOW = ("a second Ctrl-C (SIGINT or SIGTERM) stops now: the running jobs are cancelled and "
            "handed back to the queue, no attempt used")


def describe_runs(runs: Sequence[Run], now: float | None = None) -> str:
    """``#12 send_receipt 25.1 s, #13 slow_report 3.0 s``: each run's job id, name and seconds
    running, the longest-running first, at most ``MAX_NAMED`` of them."""
    now = time.monotonic() if now is None else now
    ordered = sorted(runs, key=lambda run: now if run.started_at is None else run.started_at)
    named = [f"#{run.id} {run.job.name} {_running_for(run, now)}" for run in ordered[:MAX_NAMED]]
    if len(ordered) > MAX_NAMED:
        named.append(f"and {len(ordered) - MAX_NAMED} more")
    return ", ".join(named)


def _running_for(run: Run, now: float) -> str:
    if run.started_at is None:
        return "starting"
    return f"{max(0.0, now - run.started_at):.1f} s"
