"""What run timeouts cost the ticker: one ``Deadlines.check`` and ``next_due`` per wake-up.

    python -m benchmarks.deadlines [--runs 1000] [--rounds 2000]

Prints the microseconds per wake-up over ``--runs`` runs in flight, with no timeout declared and
with a timeout on every run (none due), and the ratio of the two: the ticker pays this once per
heartbeat interval, and once more per timeout that falls due between two heartbeats.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime

import django


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    django.setup()
    plain = per_wakeup(_runs(args.runs, timeout=None), args.rounds)
    timed = per_wakeup(_runs(args.runs, timeout=3600.0), args.rounds)
    print(f"{args.runs} runs in flight: {plain:.1f} µs per wake-up without timeouts, "
          f"{timed:.1f} µs with one on every run ({timed / plain:.1f}x)")
    return 0


def per_wakeup(runs: list, rounds: int) -> float:
    """Microseconds per ``check`` + ``next_due`` over ``runs`` (best of three)."""
    from django_ultjobs.worker.deadlines import Deadlines

    deadlines = Deadlines(store=None, worker_id="bench", grace=5.0)  # type: ignore[arg-type]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(rounds):
            deadlines.check(runs)
            deadlines.next_due(runs)
        best = min(best, (time.perf_counter() - start) / rounds * 1e6)
    return best


def _runs(count: int, timeout: float | None) -> list:
    from django_ultjobs.store import ClaimedJob
    from django_ultjobs.worker.runs import Run

    now = datetime.now(UTC)
    runs = []
    for i in range(count):
        job = ClaimedJob(id=i, name="bench", queue="default", priority=0, args=[], kwargs={},
                         attempt=1, max_attempts=3, token=f"t{i}", traceparent="",
                         tracestate="", enqueued_by="", cancel_requested=False, claimed_at=now,
                         timeout=timeout)
        run = Run(job=job, spec=None)
        run.mark_started()
        runs.append(run)
    return runs


if __name__ == "__main__":
    raise SystemExit(main())
