"""What run timeouts cost: the timer's ``watch`` and ``forget`` of each run with a timeout.

    python -m benchmarks.deadlines [--runs 1000] [--rounds 20]

Every run whose job declares a timeout is put on the worker's heap of deadlines when its body
starts (``Deadlines.watch``) and taken off when its outcome goes to the completer (``forget``);
a run without one costs a test of ``run.deadline``. Prints the microseconds per run of the
pair, with ``--runs`` runs in flight (each watched run waits an hour), and with none: the heap's
depth is what its cost grows with.
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
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    django.setup()
    alone = per_run(_runs(args.runs, timeout=3600.0), 0, args.rounds)
    crowded = per_run(_runs(args.runs, timeout=3600.0), args.runs, args.rounds)
    untimed = per_run(_runs(args.runs, timeout=None), 0, args.rounds)
    print(f"watch + forget per run: {alone:.2f} µs alone, {crowded:.2f} µs beside "
          f"{args.runs} runs in flight with a timeout; {untimed:.2f} µs without a timeout")
    return 0


def per_run(runs: list, in_flight: int, rounds: int) -> float:
    """Microseconds per ``watch`` + ``forget`` of each of ``runs`` (best of ``rounds``), with
    ``in_flight`` other runs watched meanwhile."""
    from django_ultjobs.worker.deadlines import Deadlines

    deadlines = Deadlines(store=None, worker_id="bench", grace=5.0)  # type: ignore[arg-type]
    deadlines.start()
    try:
        for run in _runs(in_flight, timeout=3600.0, first_id=10**9):
            deadlines.watch(run)
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            for run in runs:
                deadlines.watch(run)
            for run in runs:
                deadlines.forget(run)
            best = min(best, (time.perf_counter() - start) / len(runs) * 1e6)
        return best
    finally:
        deadlines.stop()


def _runs(count: int, timeout: float | None, first_id: int = 0) -> list:
    from django_ultjobs.store import ClaimedJob
    from django_ultjobs.worker.runs import Run

    now = datetime.now(UTC)
    runs = []
    for i in range(first_id, first_id + count):
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
